"""`scripts/bench ab --before REV [SCENARIO ...] [--runs N] [--json PATH] [scenario options]`.

A before/after comparison in one run. The "before" side is REV's daemon and drivers (a
cached git worktree with its own venv, `before_tree`); the "after" side is this checkout's.
Each round runs every named scenario once per side, the sides alternating in an ABBA order
(before, after, after, before, ...) so a drift of the machine's load falls on both. Each
scenario run is this checkout's bench in a subprocess (`python -m hostd_dev.bench SCENARIO
--runs 1 --json ...`) with `HOSTD_BENCH_PYTHON` naming the side's interpreter: the same
instrument (harness, windows process, clients, the CPU and run-queue rows) measures both
sides; only the daemon and the drivers differ. The table shows each row's median (min-max)
per side and after / before; a row with a goal says in how many runs each side met it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from hostd_dev.bench import before_tree
from hostd_dev.bench.procs import PRODUCT_PYTHON_ENV
from hostd_dev.bench.stats import Spread, fmt

#: Scenarios whose measured processes all start through `procs` (DaemonProc, BareDriver), so
#: `HOSTD_BENCH_PYTHON` swaps every one of them; the others start their own.
AB_SCENARIOS = ("latency", "store", "throughput", "ttft")
SIDES = ("before", "after")


def parse_ab_args(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    """ab's own options, and the rest passed to every scenario run (checked here, so a typo
    fails before a 20-minute run starts)."""
    from hostd_dev.bench.runner import parse_args

    p = argparse.ArgumentParser(
        prog="scripts/bench ab",
        description="Before/after in one run: REV's daemon and drivers against this "
        "checkout's, alternating per round (ABBA), measured by this checkout's bench.",
        epilog="Other options (--scales, --load-drivers, --quick, --trace) go to every run.",
    )
    p.add_argument("--before", metavar="REV", help="the commit to compare against")
    p.add_argument(
        "--before-python",
        metavar="PATH",
        help="an interpreter whose venv holds the before code (instead of making REV's tree)",
    )
    p.add_argument(
        "--runs",
        type=int,
        default=3,
        help="rounds; each runs every scenario once per side (default 3)",
    )
    p.add_argument(
        "--load-driver",
        choices=("this", "each"),
        default="this",
        help="bench-load on the before side: this checkout's, as on the after side (default: "
        "the daemons differ, the load does not), or each tree's own (to compare load drivers)",
    )
    p.add_argument("--json", metavar="PATH", help="also write both sides' rows as JSON")
    p.add_argument(
        "--markdown", metavar="PATH", help="also write the table as markdown (for the docs)"
    )
    p.add_argument(
        "--rows",
        metavar="REGEX",
        type=_regex,
        help="show only the rows whose metric matches (the JSON keeps every row)",
    )
    args, rest = p.parse_known_args(list(argv))
    if not args.before and not args.before_python:
        p.error("name the before side: --before REV (or --before-python PATH)")
    if args.runs < 1:
        p.error("--runs must be at least 1")
    inner = parse_args(rest)
    scenarios = inner.scenarios or list(AB_SCENARIOS)
    other = [s for s in scenarios if s not in AB_SCENARIOS]
    if other:
        p.error(f"ab runs {', '.join(AB_SCENARIOS)}; not {', '.join(other)}")
    if not inner.scenarios:
        rest = [*scenarios, *rest]
    return args, rest


def _regex(text: str) -> re.Pattern[str]:
    try:
        return re.compile(text)
    except re.error as exc:
        raise argparse.ArgumentTypeError(f"not a regular expression: {text!r} ({exc})") from None


def schedule(runs: int) -> list[tuple[int, str]]:
    """(round, side) in the order they run: ABBA, so each side goes first every other round."""
    order: list[tuple[int, str]] = []
    for k in range(runs):
        sides = SIDES if k % 2 == 0 else SIDES[::-1]
        order.extend((k + 1, side) for side in sides)
    return order


def run_side(python: str | None, passthrough: Sequence[str], json_path: Path) -> int:
    """One run of every scenario on one side: this checkout's bench, the side's daemon."""
    env = {k: v for k, v in os.environ.items() if k != PRODUCT_PYTHON_ENV}
    if python:
        env[PRODUCT_PYTHON_ENV] = python
    argv = [sys.executable, "-m", "hostd_dev.bench", *passthrough, "--runs", "1"]
    argv += ["--json", str(json_path)]
    # Each run's own table is in its JSON; its progress lines (stderr) show as it goes.
    return subprocess.run(argv, stdout=subprocess.DEVNULL, env=env, check=False).returncode


def merge(docs: Sequence[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Each scenario's rows with every run's values per side, in first-seen order.

    `docs` is (side, one run's JSON) in run order. A row with a goal keeps, per side, in how
    many runs it was met (each run is one measured repetition)."""
    scenarios: dict[str, dict[str, Any]] = {}
    for side, doc in docs:
        for res in doc.get("results", []):
            sc = scenarios.setdefault(
                res["scenario"],
                {
                    "scenario": res["scenario"],
                    "goal": res.get("goal", ""),
                    "rows": {},
                    "checks": {s: [] for s in SIDES},
                    "skipped": {s: [] for s in SIDES},
                    "notes": [],
                },
            )
            if res.get("skipped"):
                sc["skipped"][side].append(res["skipped"])
            for c in res.get("checks", []):
                sc["checks"][side].append(c)
            for note in res.get("notes", []):
                if note not in sc["notes"]:
                    sc["notes"].append(note)
            for row in res.get("rows", []):
                r = sc["rows"].setdefault(
                    row["metric"],
                    {
                        "metric": row["metric"],
                        "unit": row["unit"],
                        "goal": row.get("goal"),
                        "baseline": row.get("baseline", False),
                        **{s: {"values": [], "met": 0, "judged": 0} for s in SIDES},
                    },
                )
                r[side]["values"].extend(v for v in row["values"] if v is not None)
                if row.get("met") is not None:
                    r[side]["judged"] += 1
                    r[side]["met"] += bool(row["met"])
    out = []
    for sc in scenarios.values():
        rows = []
        for r in sc["rows"].values():
            for s in SIDES:
                r[s].update(Spread.of(r[s]["values"]).as_dict())
            rows.append(r)
        out.append({**sc, "rows": rows})
    return out


def change(before: float | None, after: float | None) -> str:
    """after / before, where both are positive numbers; '' otherwise."""
    if before is None or after is None or before <= 0 or after < 0:
        return ""
    return f"{after / before:.2f}x"


def cell(side: dict[str, Any], unit: str) -> str:
    if not side.get("n"):
        return "-"
    nan = float("nan")
    med, lo, hi = (side.get(k) for k in ("median", "min", "max"))
    text = fmt(med if med is not None else nan, unit)
    if side["n"] > 1:
        text += f" ({fmt(lo if lo is not None else nan, unit)}..{fmt(hi if hi is not None else nan, unit)})"
    return text


def met_text(side: dict[str, Any]) -> str:
    return f"{side['met']}/{side['judged']}" if side["judged"] else ""


def render(
    results: list[dict[str, Any]], head: dict[str, Any], rows: re.Pattern[str] | None = None
) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 200)
    table = Table(
        title=f"hostd bench ab: before {head['before']['rev']} / after {head['after']['rev']}"
    )
    for col in ("scenario", "metric", "before", "after", "after/before", "goal", "met b", "met a"):
        table.add_column(col, justify="left" if col in ("scenario", "metric") else "right")
    for sc in results:
        first = True
        for r in sc["rows"]:
            if rows is not None and not rows.search(r["metric"]):
                continue
            metric = f"[dim]{r['metric']}[/dim]" if r["baseline"] else r["metric"]
            table.add_row(
                sc["scenario"] if first else "",
                metric,
                cell(r["before"], r["unit"]),
                cell(r["after"], r["unit"]),
                change(r["before"].get("median"), r["after"].get("median")),
                r["goal"] or "",
                met_text(r["before"]),
                met_text(r["after"]),
            )
            first = False
        marks = []
        for side in SIDES:
            checks = sc["checks"][side]
            failed = [c["name"] for c in checks if not c["passed"]]
            ok = f"[green]{len(checks)} ok[/green]"
            marks.append(f"[red]FAIL: {failed[0]}[/red]" if failed else ok if checks else "-")
            for why in sc["skipped"][side]:
                table.add_row("", f"[red]{side}: {why}[/red]", "", "", "", "", "", "")
        table.add_row("", "checks (correctness, every run)", *marks, "", "", "", "")
        table.add_section()
    console.print(table)
    for sc in results:
        for note in sc["notes"]:
            console.print(f"[bold]{sc['scenario']}[/bold]: {note}")


def markdown(
    results: list[dict[str, Any]], head: dict[str, Any], rows: re.Pattern[str] | None = None
) -> str:
    """The table of `render` as markdown: one table per scenario."""
    b, a = head["before"], head["after"]
    lines = [
        f"before: {b['rev']} ({b.get('load_driver', '')}), after: {a['rev']}"
        + (" + uncommitted changes" if a.get("dirty") else "")
        + f"; order {' '.join(head.get('order', []))}; {head['machine']['time']}",
    ]
    for sc in results:
        lines += ["", f"**{sc['scenario']}** ({sc['goal']})", ""]
        lines += [
            "| metric | before | after | after / before | goal | met (before) | met (after) |"
        ]
        lines += ["|---|---|---|---|---|---|---|"]
        for r in sc["rows"]:
            if rows is not None and not rows.search(r["metric"]):
                continue
            cells = [cell(r["before"], r["unit"]), cell(r["after"], r["unit"])]
            ratio = change(r["before"].get("median"), r["after"].get("median"))
            cells += [ratio, r["goal"] or "", met_text(r["before"]), met_text(r["after"])]
            lines.append(f"| {r['metric']} | " + " | ".join(cells) + " |")
        for side in SIDES:
            failed = [c["name"] for c in sc["checks"][side] if not c["passed"]]
            if failed or sc["skipped"][side]:
                lines.append(f"\n{side}: FAILED {', '.join(failed + sc['skipped'][side])}")
    return "\n".join(lines) + "\n"


def describe_after() -> dict[str, Any]:
    """This checkout's commit, and whether its work tree differs from it."""
    root = before_tree.repo_root()

    def git(*a: str) -> str:
        return subprocess.run(
            ["git", "-C", str(root), *a], capture_output=True, text=True, check=False
        ).stdout.strip()

    return {
        "rev": git("rev-parse", "--short=12", "HEAD"),
        "dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
        "python": sys.executable,
    }


def main(argv: Sequence[str], log: Callable[[str], None] | None = None) -> int:
    from hostd_dev.bench.runner import machine

    say = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    args, passthrough = parse_ab_args(argv)
    try:
        if args.before_python:
            python = str(Path(args.before_python).absolute())
            before = {"rev": args.before or "(given interpreter)", "python": python}
        else:
            tree_python = before_tree.prepare(args.before, log=say)
            sha = before_tree.resolve(args.before, before_tree.repo_root())
            python = str(tree_python)
            load = before_tree.use_load_driver(
                tree_python.parents[2], tree_python, mine=args.load_driver == "this"
            )
            before = {"rev": sha[:12], "python": python, "load_driver": load}
    except before_tree.BeforeTreeError as exc:
        print(exc, file=sys.stderr)
        return 1
    head: dict[str, Any] = {"before": before, "after": describe_after(), "machine": machine()}
    docs: list[tuple[str, dict[str, Any]]] = []
    failed: list[str] = []
    with tempfile.TemporaryDirectory(prefix="hostd-bench-ab-") as tmp:
        for k, side in schedule(args.runs):
            out = Path(tmp) / f"{k}-{side}.json"
            say(f"ab: round {k}/{args.runs}, {side}: {' '.join(passthrough)}")
            t0, started = time.perf_counter(), time.strftime("%H:%M:%S", time.gmtime())
            code = run_side(python if side == "before" else None, passthrough, out)
            took = time.perf_counter() - t0
            say(f"ab: round {k}/{args.runs}, {side}: {took:.0f} s")
            head.setdefault("runs_at", []).append(f"{k}{side[0]} {started} UTC, {took:.0f} s")
            if code != 0:
                failed.append(f"round {k} {side} (exit {code})")
            if out.exists():
                doc = json.loads(out.read_text())
                docs.append((side, doc))
                # Which interpreter ran that side's daemon, as the run itself saw it.
                seen = head.setdefault("product_python", {s: [] for s in SIDES})[side]
                if doc["machine"].get("product_python") not in seen:
                    seen.append(doc["machine"].get("product_python"))
    results = merge(docs)
    head["order"] = [f"{k}{side[0]}" for k, side in schedule(args.runs)]
    render(results, head, args.rows)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({**head, "runs": args.runs, "results": results}, fh, indent=2)
            fh.write("\n")
    if args.markdown:
        Path(args.markdown).write_text(markdown(results, head, args.rows))
    if failed:
        print(f"bench ab: failed or missed a check: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0
