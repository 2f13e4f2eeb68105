"""Optional: the ACP driver (real claude-agent-acp) beside the Claude Code driver on the same
fake Messages API: time to first chunk cold / warm / in-session, and RSS. Uses the ACP
driver's helper `tests.acp.bench` (run from the repository root, as `scripts/bench` does);
skipped with a clear message when a driver, the npm agent or the helper is missing.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

from hostd_dev.bench.report import Context, Result, first_missing

GOAL = "ACP driver beside Claude Code on the fake API: first chunk and RSS (optional)"


def _missing() -> str:
    why = first_missing((
        ("hostd_acp", "the acp driver is not installed (scripts/setup)"),
        ("hostd_claude_code", "the claude-code driver is not installed (scripts/setup)"),
        ("tests.acp.bench", "tests/acp/bench.py is not importable (run from the repo root)"),
    ))
    if why:
        return why
    support: Any = importlib.import_module("tests.acp.support")
    if not support.CLAUDE_AGENT_ACP.exists():
        return "claude-agent-acp is not installed in .cache/npm-acp (scripts/setup)"
    return ""


def run(ctx: Context) -> Result:
    res = Result("acp-ttft", GOAL)
    why = _missing()
    if why:
        res.skipped = why
        return res
    bench: Any = importlib.import_module("tests.acp.bench")
    try:
        out = bench.measure(1 if ctx.quick else ctx.runs)
    except Exception as exc:  # an agent that refuses to start on this machine
        res.skipped = f"the ACP helper failed: {type(exc).__name__}: {exc}"
        return res
    for name, driver in out.items():
        for label, samples in (
            ("cold: spawn -> first chunk", driver.cold),
            ("warm (prewarmed): send -> first chunk", driver.warm),
            ("in-session turn 2: send -> first chunk", driver.in_session),
            ("prewarm", driver.prewarm),
        ):
            for value in samples:
                res.add(f"{name} {label}", "ms", value * 1000)
        for value in driver.driver_rss:
            res.add(f"{name} driver RSS", "MiB", value)
        for value in driver.tree_rss:
            res.add(f"{name} agent/CLI RSS", "MiB", value)
        res.notes.append(driver.summary())
    _ratios(res, out)
    return res


def _ratios(res: Result, out: dict[str, Any]) -> None:
    """Issue 22 items 3 and 4 as ratios, paired per run (the runs are interleaved, so the
    two drivers of one run saw the same machine load; ratios survive a noisy machine better
    than absolute figures).

    - item 3: Claude Code in-session first chunk / the peer's (claude-agent-acp) in-session.
    - item 4: Claude Code prewarmed first turn / its own in-session turn.
    Both are also given as differences in ms (the goals are "peer + 2 ms" and "within 10 ms").
    """
    claude, acp = out.get("claude-code"), out.get("acp")
    if claude is None:
        return
    if acp is not None:
        for mine, peer in zip(claude.in_session, acp.in_session, strict=False):
            if peer > 0:
                res.add("item 3: in-session first chunk, claude-code / claude-agent-acp",
                        "x", mine / peer)
            res.add("item 3: in-session first chunk, claude-code - claude-agent-acp",
                    "ms", (mine - peer) * 1000)
    for warm, hot in zip(claude.warm, claude.in_session, strict=False):
        if hot > 0:
            res.add("item 4: claude-code prewarmed first turn / in-session turn", "x", warm / hot)
        res.add("item 4: claude-code prewarmed first turn - in-session turn", "ms",
                (warm - hot) * 1000)
