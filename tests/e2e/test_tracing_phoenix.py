"""A traced turn read back from a real trace backend: Arize Phoenix (`arize-phoenix` from the
package index; `scripts/setup` installs it into `.cache/phoenix`, its own venv, at the
versions of `scripts/phoenix-requirements.txt`).

`phoenix serve` runs on loopback and receives OTLP over HTTP; a real `hostd serve`
subprocess with only the standard `OTEL_*` variables set runs a scripted turn with a tool
call and a steer; the spans are then read through Phoenix's own REST API
(`GET /v1/projects/<project>/spans`): names, parent links, gen_ai attributes, span events.
Skips, saying why, only when Phoenix is not installed.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio

from hostd.shell.paths import Paths
from tests.e2e import daemon_proc
from tests.e2e.test_tracing_e2e import STEER_TURN, _free_port, run_steered_turn
from tests.polling import eventually

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
PHOENIX = ROOT / ".cache" / "phoenix" / "bin" / "phoenix"
PROJECT = "hostd-test"


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as resp:  # loopback only
        return json.loads(resp.read())


@pytest.fixture
async def phoenix(nursery: trio.Nursery) -> AsyncIterator[str]:
    """`phoenix serve` on free loopback ports; yields its base URL once it serves."""
    if not PHOENIX.exists():
        pytest.skip(
            f"Arize Phoenix is not installed at {PHOENIX.parent.parent}: scripts/setup installs "
            "it (scripts/phoenix-requirements.txt); see .cache/phoenix-setup.log for why not"
        )
    work = Path(tempfile.mkdtemp(prefix="phx", dir="/tmp"))
    port = _free_port()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PHOENIX_"))},
        "PHOENIX_WORKING_DIR": str(work),
        "PHOENIX_HOST": "127.0.0.1",
        "PHOENIX_PORT": str(port),
        "PHOENIX_GRPC_PORT": str(_free_port()),
        "PHOENIX_TELEMETRY_ENABLED": "false",
    }
    proc = await trio.lowlevel.open_process(
        [str(PHOENIX), "serve"],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    assert proc.stdout is not None
    out = b""
    try:
        # Ready when uvicorn says it serves (its start-up takes ~10-30 s on two cores).
        with trio.fail_after(180):
            while b"Uvicorn running on" not in out:
                data = await proc.stdout.receive_some(65536)
                if not data:
                    raise RuntimeError(
                        f"phoenix serve exited: {out.decode(errors='replace')[-2000:]}"
                    )
                out += data

        async def drain() -> None:  # keep its pipe from filling up
            assert proc.stdout is not None
            while await proc.stdout.receive_some(65536):
                pass

        nursery.start_soon(drain)
        yield f"http://127.0.0.1:{port}"
    finally:
        if proc.returncode is None:
            os.killpg(proc.pid, signal.SIGTERM)
            with trio.move_on_after(20):
                await proc.wait()
            if proc.returncode is None:
                os.killpg(proc.pid, signal.SIGKILL)
                await proc.wait()
        shutil.rmtree(work, ignore_errors=True)


async def _spans(base: str, want: int) -> list[dict[str, Any]]:
    """The project's spans, once Phoenix has ingested at least `want` (it stores them from
    a queue of its own: there is no event to wait on, so ask again until they are there)."""
    url = f"{base}/v1/projects/{PROJECT}/spans?limit=100"
    seen: list[dict[str, Any]] = []

    async def ingested() -> bool:
        try:
            data = (await trio.to_thread.run_sync(_get, url))["data"]
        except urllib.error.HTTPError as exc:
            exc.close()
            if exc.code != 404:  # 404: the project exists once its first span is stored
                raise
            data = []
        seen[:] = data
        return len(data) >= want

    assert await eventually(ingested, within=60, every=0.2), (
        f"Phoenix holds {len(seen)} of the turn's {want} spans after 60 s"
    )
    return list(seen)


async def test_a_traced_turn_reads_back_from_phoenix(home: Path, phoenix: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(
        OTEL_EXPORTER_OTLP_ENDPOINT=phoenix,
        OTEL_SERVICE_NAME="hostd",
        OTEL_RESOURCE_ATTRIBUTES=f"openinference.project.name={PROJECT}",
        OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT="true",
    )
    with trio.fail_after(120):
        proc = await daemon_proc.start(home, "--default-driver", "scripted", env=env)
        try:
            topic_id, turn_id, _ = await run_steered_turn(Paths.under(home), STEER_TURN)
        finally:
            # A graceful stop exports what the batch processor still holds.
            assert await proc.terminate() == 0
        spans = await _spans(phoenix, 4)
    by_name: dict[str, list[dict[str, Any]]] = {}
    for s in spans:
        by_name.setdefault(s["name"], []).append(s)
    assert sorted(by_name) == ["chat", "execute_tool Read", "invoke_agent scripted"]
    (turn,) = by_name["invoke_agent scripted"]
    (tool,) = by_name["execute_tool Read"]
    chats = sorted(by_name["chat"], key=lambda s: s["start_time"])
    assert len(chats) == 2
    assert turn["parent_id"] is None
    turn_span_id = turn["context"]["span_id"]
    for child in (tool, *chats):
        assert child["parent_id"] == turn_span_id
        assert child["context"]["trace_id"] == turn["context"]["trace_id"]
    a = turn["attributes"]
    assert a["gen_ai.operation.name"] == "invoke_agent"
    assert a["gen_ai.conversation.id"] == topic_id
    assert a["hostd.turn.id"] == turn_id
    assert a["gen_ai.provider.name"] == "scripted"
    assert a["gen_ai.usage.input_tokens"] == 1200
    assert a["gen_ai.usage.output_tokens"] == 180
    assert a["gen_ai.response.finish_reasons"] == ["stop"]
    # Content capture was asked for: the prompt (the script) and the answer are there.
    (prompt,) = json.loads(a["gen_ai.input.messages"])
    assert prompt["role"] == "user" and "/tool Read" in prompt["parts"][0]["content"]
    (answer,) = json.loads(a["gen_ai.output.messages"])
    assert "You said: use the short form" in answer["parts"][0]["content"]
    assert [e["name"] for e in turn["events"]] == [
        "hostd.steer",
        "hostd.steer.injected",
        "hostd.roll",
    ]
    t = tool["attributes"]
    assert t["gen_ai.operation.name"] == "execute_tool"
    assert t["gen_ai.tool.name"] == "Read"
    assert t["gen_ai.tool.call.id"].startswith("call-")
    assert t["hostd.tool.status"] == "success"
    assert json.loads(t["gen_ai.tool.call.arguments"]) == {"file_path": "README.md"}
    assert [c["attributes"]["gen_ai.response.finish_reasons"] for c in chats] == [
        ["tool_calls"],
        ["stop"],
    ]
    assert all(c["attributes"]["gen_ai.operation.name"] == "chat" for c in chats)
    # Phoenix read the GenAI conventions: its own kinds for the three.
    assert (turn["span_kind"], tool["span_kind"]) == ("AGENT", "TOOL")
