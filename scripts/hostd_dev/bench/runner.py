"""`scripts/bench [SCENARIO ...] [--quick] [--runs N] [--json PATH]`, and
`scripts/bench ab --before REV [SCENARIO ...]` (before/after in one run: `hostd_dev.bench.ab`).

Runs each scenario (all by default) on the real daemon subprocess, real sockets and real
driver subprocesses, prints a rich table of medians with min/max, and optionally writes the
same numbers as JSON. Each scenario warms up first and then measures `--runs` times.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import sys
import time
import traceback
from typing import Any

from hostd_dev.bench.procs import product_python
from hostd_dev.bench.report import Context, Result, render

#: name -> module under hostd_dev.bench (each has GOAL and run(ctx) -> Result).
SCENARIOS: dict[str, str] = {
    "throughput": "throughput",
    "latency": "latency",
    "ttft": "ttft",
    "sandbox-ttft": "sandbox_ttft",
    "cli": "cli",
    "memory": "memory",
    "store": "store_lag",
    "claude-ttft": "claude_ttft",
    "acp-ttft": "acp_ttft",
    "openai-loop": "openai_loop",
    "otel": "otel_cost",
    "editor-ttft": "editor_ttft",
    "app": "app_window",
    "web-page": "web_page",
    "failures": "failures",
    "floor": "floor",
}
#: What runs when no scenario is named (claude-ttft / acp-ttft / openai-loop are optional: they
#: need their drivers and vendor packages).
DEFAULT = [
    "throughput",
    "latency",
    "ttft",
    "sandbox-ttft",
    "cli",
    "memory",
    "store",
    "claude-ttft",
    "acp-ttft",
    "openai-loop",
    "otel",
    "editor-ttft",
    "app",
    "web-page",
    "failures",
    "floor",
]
#: Slow and outside hostd's own data path (or, sandbox-ttft, needing bubblewrap; editor-ttft,
#: an edge process beside the daemon, measured on its own): skipped by a bare `--quick` (the
#: smoke test).
#: failures waits out a 3 s interrupt grace and a 4 s stream per run: not a smoke test's cost.
#: floor measures no hostd code (the syscalls and trio's loop under the daemon's figure).
OPTIONAL = {
    "claude-ttft", "acp-ttft", "openai-loop", "sandbox-ttft", "editor-ttft", "app", "web-page",
    "failures", "floor",
}


def machine() -> dict[str, Any]:
    return {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        # What ran the daemon and the drivers (another tree's venv on ab's before side).
        "product_python": product_python(),
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="scripts/bench",
        description="Measure hostd's data path against a bare pipe, side by side in one run.",
    )
    p.add_argument(
        "scenarios",
        nargs="*",
        metavar="SCENARIO",
        help=f"any of: {', '.join(SCENARIOS)} (default: all)",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="a tiny version of every scenario (a smoke test, not a measurement)",
    )
    p.add_argument(
        "--runs",
        type=int,
        default=None,
        help="measured repetitions after the warm-up (default 3; --quick 1)",
    )
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    p.add_argument(
        "--trace",
        action="store_true",
        help="latency: also trace every event through the daemon (HOSTD_TRACE) and print "
        "per-stage p50/p99 (driver pipe read, runtime, fan-out, socket write, window read; "
        "store commits)",
    )
    p.add_argument(
        "--probe",
        action="store_true",
        help="latency: the daemon records its GC passes, store batches and event-loop run "
        "stretches (HOSTD_PROBE); per round: GC pauses, and how much longer than its CPU time "
        "the loop took while it had work, during and outside store batches (the GIL)",
    )
    p.add_argument(
        "--scales",
        type=_scales,
        default=(),
        metavar="TxW,...",
        help="latency: the scales to run, topics x windows per topic (default 10x4,100x4); "
        "e.g. 10x4,30x4,50x4,100x4 to find the largest load at which the goal holds",
    )
    p.add_argument(
        "--load-drivers",
        type=_load_drivers,
        default=("bench-load",),
        metavar="NAME,...",
        help="latency: the load driver(s) streaming the chunks (default bench-load, the cheap "
        "one; scripted,bench-load runs both, interleaved, with each one's rows labelled)",
    )
    p.add_argument(
        "--old-peer",
        action="store_true",
        help="acp-ttft: also run @zed-industries/claude-agent-acp 0.23.1 (the package's old "
        "name, CLI 2.1.83) beside the current claude-agent-acp",
    )
    args = p.parse_args(argv)
    unknown = [s for s in args.scenarios if s not in SCENARIOS]
    if unknown:
        p.error(f"unknown scenario(s) {', '.join(unknown)}; known: {', '.join(SCENARIOS)}")
    return args


def _scales(text: str) -> tuple[tuple[int, int], ...]:
    try:
        pairs = tuple(
            (int(t), int(w)) for t, w in (item.lower().split("x") for item in text.split(","))
        )
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected TxW[,TxW...] like 10x4,100x4, got {text!r}"
        ) from None
    if not pairs or any(t < 1 or w < 1 for t, w in pairs):
        raise argparse.ArgumentTypeError(
            f"every scale needs at least 1 topic and 1 window: {text!r}"
        )
    return pairs


LOAD_DRIVERS = ("bench-load", "scripted")


def _load_drivers(text: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    bad = [n for n in names if n not in LOAD_DRIVERS]
    if not names or bad:
        raise argparse.ArgumentTypeError(
            f"load drivers are {', '.join(LOAD_DRIVERS)}; got {text!r}"
        )
    return names


def run_one(name: str, ctx: Context) -> Result:
    module: Any = importlib.import_module(f"hostd_dev.bench.{SCENARIOS[name]}")
    ctx.log(f"== {name}: {module.GOAL}")
    t0 = time.perf_counter()
    try:
        result: Result = module.run(ctx)
    except Exception as exc:  # one broken scenario must not lose the others' numbers
        traceback.print_exc()
        result = Result(name, module.GOAL, skipped=f"failed: {type(exc).__name__}: {exc}")
    result.seconds = time.perf_counter() - t0
    return result


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["ab"]:  # before/after in one run (hostd_dev.bench.ab)
        from hostd_dev.bench import ab

        return ab.main(argv[1:])
    args = parse_args(argv)
    runs = args.runs if args.runs is not None else (1 if args.quick else 3)
    ctx = Context(
        quick=args.quick,
        runs=max(1, runs),
        trace=args.trace,
        probe=args.probe,
        scales=args.scales,
        old_peer=args.old_peer,
        load_drivers=args.load_drivers,
    )
    names = args.scenarios or DEFAULT
    results = []
    for name in names:
        if name in OPTIONAL and ctx.quick and not args.scenarios:
            results.append(Result(name, "", skipped="optional: name it to run it with --quick"))
            continue
        results.append(run_one(name, ctx))
    info = machine()
    render(results, info)
    if args.json:
        doc = {
            "machine": info,
            "quick": args.quick,
            "runs": ctx.runs,
            "results": [r.as_dict() for r in results],
        }
        with open(args.json, "w") as fh:
            json.dump(doc, fh, indent=2)
            fh.write("\n")
    failed = [r.scenario for r in results if r.skipped.startswith("failed")]
    broken = [f"{r.scenario}: {c.name}" for r in results for c in r.checks if not c.passed]
    if failed or broken:
        print(f"bench: failed: {', '.join(failed + broken)}", file=sys.stderr)
        return 1
    return 0
