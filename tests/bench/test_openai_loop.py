"""`scripts/bench openai-loop` runs its loops for real (functional only: what they cost is
measured by the bench, never asserted here).

- each peer (openai-agents, pydantic-ai: hostd-dev's bench dependencies) answers a text turn
  and a tool turn on the fake server, calling the real MCP server and sending the result back;
- the daemon round (hostd-openai through the real daemon and a client) yields one figure per
  metric and its tool turn reaches the model with the tool's result;
- the whole scenario, one round (slow).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
import trio

from tests.fakes.openai_api import FakeOpenAI
from tests.openai import bench
from tests.openai.bench_daemon import daemon_round, running_daemon

pytestmark = pytest.mark.e2e


def _tool_results(api: FakeOpenAI) -> list[str]:
    return [
        str(m.get("content"))
        for r in api.requests
        if r.last_role == "tool"
        for m in r.messages
        if m.get("role") == "tool"
    ]


@pytest.mark.parametrize("name", [bench.AGENTS, bench.PYDANTIC])
def test_a_peer_loop_answers_text_and_tool_turns(name: str, tmp_path: Path) -> None:
    missing = bench.missing_peers()
    assert name not in missing, missing[name]  # scripts/setup installs hostd-dev's peers
    with FakeOpenAI(bench.rules()) as api:
        loop = bench.LoopProcess(bench.loop_argv(name, api, tmp_path / "state"))
        try:
            loop.expect("ready")
            loop.turn(f"new {bench.HELLO}")
            loop.turn(f"next {bench.TOOL_PLAIN}")
            loop.command("rss")
            assert float(loop.expect("rss").split()[1]) > 0
        finally:
            loop.close()
        assert loop.proc.returncode == 0
    # Turn 1, turn 2 asking for the tool, the request carrying the MCP server's answer.
    assert [r.last_role for r in api.requests] == ["user", "user", "tool"]
    assert any("x" in text for text in _tool_results(api)), _tool_results(api)
    # Turn 2 was sent with turn 1 in it (one conversation).
    assert [m.get("role") for m in api.requests[1].messages][:3] == ["user", "assistant", "user"]


async def test_the_daemon_round_measures_every_figure(tmp_path: Path) -> None:
    home = Path(tempfile.mkdtemp(prefix="hob", dir="/tmp"))  # short: AF_UNIX path limit
    figures = bench.LoopFigures()
    try:
        with FakeOpenAI(bench.rules()) as api, trio.fail_after(240):
            async with running_daemon(home) as daemon:
                await daemon_round(
                    daemon,
                    api,
                    tmp_path,
                    figures,
                    hello=bench.HELLO,
                    tool=bench.TOOL,
                    in_session_turns=1,
                    tool_turns=1,
                )
            # cold, prewarmed, in-session, then two tool turns of two requests each.
            assert len(api.requests) == 7
            assert [r.last_role for r in api.requests].count("tool") == 2
            assert "x" in _tool_results(api)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    for metric in ("cold", "prewarmed", "in_session", "tool_step"):
        assert len(getattr(figures, metric)) == 1, metric
    assert figures.rss[0] > 0  # the topic's driver process was found under the daemon


@pytest.mark.slow
def test_the_scenario_runs_every_loop_once() -> None:
    out = bench.measure(1, warm_up=False)
    assert list(out.loops) == [bench.DAEMON, bench.PIPE, bench.BARE, bench.AGENTS, bench.PYDANTIC]
    for name, figures in out.loops.items():
        for metric in ("cold", "prewarmed", "in_session", "tool_step", "rss"):
            assert len(getattr(figures, metric)) == 1, (name, metric)
    assert len(out.loops[bench.PIPE].hung_mcp) == 1
