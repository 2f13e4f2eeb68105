"""Optional: the OpenAI driver's agent loop against a bare `openai` SDK loop, side by side.

Same fake OpenAI-compatible server, same stdio MCP server, rounds interleaved (the helper is
`tests.openai.bench`, run from the repository root as `scripts/bench` does): time to first
chunk cold / prewarmed / in-session, one tool step on the fake server's clock, RSS, and the
driver's first chunk with a hung MCP server beside a live one. Skipped
with a clear message when the driver, the `openai` package or the helper is missing.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

from hostd_dev.bench.report import Context, Result, first_missing

GOAL = "hostd-openai: in-session first chunk and tool step within 2 ms of a bare openai SDK loop"

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


def run(ctx: Context) -> Result:
    res = Result("openai-loop", GOAL)
    why = _missing()
    if why:
        res.skipped = why
        return res
    bench: Any = importlib.import_module("tests.openai.bench")
    out = bench.measure(1 if ctx.quick else ctx.runs)
    labels = {
        "cold": "cold: process start -> first chunk (incl. MCP connect)",
        "prewarmed": "prewarmed, new conversation -> first chunk",
        "in_session": "in-session turn -> first chunk",
        "tool_step": "tool step (response end -> next request, server clock)",
    }
    for metric, label in labels.items():
        for value in getattr(out.bare, metric):
            res.add(f"bare openai SDK: {label}", "ms", value * 1000, baseline=True)
        for value in getattr(out.driver, metric):
            res.add(f"hostd-openai: {label}", "ms", value * 1000)
    for value in out.driver.hung_mcp:
        res.add(
            "hostd-openai: hung MCP server beside a live one, send -> first chunk",
            "ms",
            value * 1000,
            goal=("<=", HUNG_MCP_MS),
        )
    for value in out.bare.rss:
        res.add("bare openai SDK: RSS after the turns", "MiB", value, baseline=True)
    for value in out.driver.rss:
        res.add("hostd-openai: RSS after the turns", "MiB", value)
    for metric in ("in_session", "tool_step"):
        diffs = [
            (d - b) * 1000
            for d, b in zip(getattr(out.driver, metric), getattr(out.bare, metric), strict=True)
        ]
        for value in diffs:
            res.add(f"hostd-openai - bare: {labels[metric]}", "ms", value, goal=("<=", WITHIN_MS))
    res.notes.append(out.summary())
    return res
