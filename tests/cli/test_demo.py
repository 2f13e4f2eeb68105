"""`hostd demo` as scripts/demo runs it: a subprocess, its exit code, its final line and the
history it reports; plus the failure path (a non-zero exit with the reason)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import trio
from rich.console import Console

from hostd.cli import demo

pytestmark = pytest.mark.e2e


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


async def test_demo_passes_and_reports_the_rolled_history(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    with trio.fail_after(60):
        proc = await trio.run_process(
            [sys.executable, "-m", "hostd", "demo", "--report", str(report)],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env={**os.environ, "COLUMNS": "120"},
        )
    out = proc.stdout.decode()
    assert proc.returncode == 0, out + proc.stderr.decode()
    assert out.rstrip().splitlines()[-1] == "PASS: both windows agree: A1a / U2 / A2 stored"
    assert "where to go next" in out
    data = json.loads(report.read_bytes())
    assert data["ok"] is True
    assert data["labels"] == {"A": ["U1", "A1a", "U2", "A2"], "B": ["U1", "A1a", "U2", "A2"]}
    assert data["windows"]["A"] == data["windows"]["B"] == data["stored"]
    roles = [(r["role"], r["status"]) for r in data["stored"]]
    assert roles == [
        ("user", "success"),
        ("assistant", "success"),
        ("user", "success"),
        ("assistant", "success"),
    ]
    texts = data["stored_text"]
    assert texts[0] == demo.QUESTION
    assert texts[2] == demo.STEER
    assert texts[3].startswith(f"You said: {demo.STEER}.")
    # A1a ends at the tool call: the steer landed at its boundary.
    assert [p["type"] for p in data["stored"][1]["parts"]] == [
        "thinking",
        "text",
        "tool-call",
        "tool-result",
    ]
    # Both daemons the demo started (the second reads the store back) are gone.
    assert len(data["daemon_pids"]) == 2
    assert all(_gone(pid) for pid in data["daemon_pids"])


def test_demo_fails_clearly_when_the_answer_does_not_roll(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # No tool call, so no steer boundary: the steer arrives after the turn and starts a turn
    # of its own. The demo must say so and exit non-zero (and still stop its daemon).
    monkeypatch.setattr(demo, "DEMO_SCRIPT", "/text A short answer with no tool.")
    console = Console(record=True, color_system=None, width=100, file=open(os.devnull, "w"))
    report = tmp_path / "report.json"
    code = demo.run_demo(console, report=str(report))
    console.file.close()
    text = console.export_text()
    assert code == 1
    assert text.rstrip().splitlines()[-1] == "FAIL: the steer was started, not steered"
    data = json.loads(report.read_bytes())
    assert data["ok"] is False
    assert data["daemon_pids"] and all(_gone(pid) for pid in data["daemon_pids"])


def test_where_to_go_next_names_only_what_exists_where_hostd_runs() -> None:
    # Found from outside: run from the installed wheels, the demo sent the user to
    # `scripts/test` and `docs/protocol.md`, which exist only in a checkout.
    from rich.console import Console

    from hostd.cli.demo import _next_steps

    def shown(in_checkout: bool) -> str:
        c = Console(width=120, record=True, color_system=None)
        c.print(_next_steps(in_checkout=in_checkout))
        return c.export_text()

    installed = shown(False)
    assert "scripts/test" not in installed and "docs/protocol.md" not in installed
    assert "hostd web --open" in installed and "hostd protocol-schema" in installed
    checkout = shown(True)
    assert "scripts/test" in checkout and "docs/protocol.md" in checkout
