"""Optional: the Claude Code driver's time to first token, cold vs warm, on the fake Messages
API (no network, no key), and its memory. Uses the Claude driver engineer's helper
`tests.claude.bench` (run from the repository root, as `scripts/bench` does); skipped with a
clear message when the driver, its SDK or the helper is not installed.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

from hostd_dev.bench.report import Context, Result, first_missing

GOAL = "Claude Code driver on the fake API: warm << cold; interrupt well under its 5 s grace (optional)"


def _missing() -> str:
    why = first_missing((
        ("hostd_claude_code", "the claude-code driver is not installed (scripts/setup)"),
        ("claude_agent_sdk", "claude-agent-sdk is not installed (it comes with the driver)"),
        ("tests.claude.bench", "tests/claude/bench.py is not importable (run from the repo root)"),
    ))
    return why


def run(ctx: Context) -> Result:
    res = Result("claude-ttft", GOAL)
    why = _missing()
    if why:
        res.skipped = why
        return res
    bench: Any = importlib.import_module("tests.claude.bench")
    runs = 1 if ctx.quick else ctx.runs
    try:
        out = bench.measure(runs)
    except Exception as exc:  # the CLI may be missing or refuse to start on this machine
        res.skipped = f"the Claude helper failed: {type(exc).__name__}: {exc}"
        return res
    for value in out.cold_samples:
        res.add("cold: spawn -> first token", "ms", value * 1000)
    for value in out.warm_samples:
        res.add("warm (prewarmed): send -> first token", "ms", value * 1000)
    for value in getattr(out, "interrupt_samples", ()):
        # Was a test assert (< 5 s, tests/claude/test_claude_driver.py) before session 9.
        res.add("interrupt mid-answer -> stopped", "ms", value * 1000)
    res.add("cold / warm", "x", out.speedup)
    res.add("prewarm", "ms", out.prewarm_s * 1000)
    res.add("driver RSS", "MiB", out.driver_rss_mib)
    res.add("CLI RSS", "MiB", out.cli_rss_mib)
    res.notes.append(out.summary())
    return res
