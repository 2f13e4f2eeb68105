"""Optional: the OpenAI driver beside its peers, side by side in one run.

hostd-openai through the real daemon and a real client, the same driver alone on its pipe,
a bare `openai` SDK loop, openai-agents and pydantic-ai (issue 35; the peers are hostd-dev's
bench dependencies). Same fake OpenAI-compatible server, same stdio MCP server, rounds
interleaved (the helper is `tests.openai.bench`, run from the repository root as
`scripts/bench` does): time to first chunk cold / prewarmed / in-session, one tool step on
the fake server's clock, RSS, and the driver's first chunk with a hung MCP server beside a
live one. Skipped with a clear message when the driver, the `openai` package or the helper is
missing; a peer whose package is missing is left out with a note.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import time
from typing import Any

from hostd_dev.bench.cpu_stats import busy_cpu_seconds
from hostd_dev.bench.report import Context, Result, first_missing

GOAL = (
    "hostd-openai (daemon + client): in-session first chunk and tool step within 2 ms of a "
    "bare openai SDK loop; side by side with openai-agents and pydantic-ai"
)

#: The bar from issue 17 (peers measured offline: see shared/notes/peer-runtimes.md).
WITHIN_MS = 2.0
#: Issue 32: a hung MCP server never holds a turn up (a fresh process, send -> first chunk).
HUNG_MCP_MS = 3000.0


def _missing() -> str:
    why = first_missing(
        (
            ("hostd_openai", "the openai driver is not installed (scripts/setup)"),
            (
                "openai",
                "the openai package is not installed (scripts/setup installs the test extra)",
            ),
            (
                "tests.openai.bench",
                "tests/openai/bench.py is not importable (run from the repo root)",
            ),
        )
    )
    return why


LABELS = {
    "cold": "cold: process start -> first chunk (incl. MCP connect)",
    "prewarmed": "prewarmed, new conversation -> first chunk",
    "in_session": "in-session turn -> first chunk",
    "tool_step": "tool step (response end -> next request, server clock)",
}


def own_cpu_seconds() -> float:
    """This process's CPU and its waited-for children's (every loop the bench ran)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def run(ctx: Context) -> Result:
    res = Result("openai-loop", GOAL)
    why = _missing()
    if why:
        res.skipped = why
        return res
    bench: Any = importlib.import_module("tests.openai.bench")
    busy0, own0, t0 = busy_cpu_seconds(), own_cpu_seconds(), time.monotonic()
    out = bench.measure(1 if ctx.quick else ctx.runs, warm_up=not ctx.quick)
    wall = time.monotonic() - t0
    other = (busy_cpu_seconds() - busy0) - (own_cpu_seconds() - own0)
    loops = out.loops
    for metric, label in LABELS.items():
        for name, figures in loops.items():
            for value in getattr(figures, metric):
                res.add(f"{name}: {label}", "ms", value * 1000, baseline=name != bench.DAEMON)
    for value in loops[bench.PIPE].hung_mcp:
        res.add(
            f"{bench.PIPE}: hung MCP server beside a live one, send -> first chunk",
            "ms",
            value * 1000,
            goal=("<=", HUNG_MCP_MS),
        )
    for name, figures in loops.items():
        what = "driver process" if name == bench.DAEMON else "loop process"
        for value in figures.rss:
            res.add(
                f"{name}: RSS after the turns ({what})", "MiB", value, baseline=name != bench.DAEMON
            )
    for value in out.daemon_rss:
        res.add(f"{bench.DAEMON}: the daemon's RSS (serves every topic)", "MiB", value)
    _diffs(res, bench, loops)
    res.add("CPU used by other processes (cores, noise)", "", round(max(0.0, other) / wall, 2))
    for name, why in out.missing.items():
        res.notes.append(f"{name} not run: {why}")
    res.notes.append(out.summary())
    return res


def _diffs(res: Result, bench: Any, loops: dict[str, Any]) -> None:
    """hostd-openai (daemon + client) minus each other loop, paired per round (rounds are
    interleaved, so both saw the same machine). The +2 ms bar (issue 17) is against the bare
    SDK loop; against the frameworks the rows are side by side figures, no goal."""
    mine = loops[bench.DAEMON]
    for name, figures in loops.items():
        if name == bench.DAEMON:
            continue
        for metric in ("in_session", "tool_step"):
            goal = ("<=", WITHIN_MS) if name == bench.BARE else None
            pairs = zip(getattr(mine, metric), getattr(figures, metric), strict=True)
            for d, b in pairs:
                res.add(
                    f"{bench.DAEMON} - {name}: {LABELS[metric]}", "ms", (d - b) * 1000, goal=goal
                )
