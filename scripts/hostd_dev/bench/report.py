"""What a scenario hands back (rows of metrics, checks, notes) and how the runner shows it.

A row holds one value per measured repetition; the table shows their median with min/max.
A row may carry a goal (`>= 0.7`, `<= 2`), judged on the median. Ratios against the
baseline of the same run are the numbers to trust; absolute numbers are printed for scale.
"""

from __future__ import annotations

import math
import operator
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from hostd_dev.bench.stats import Spread, fmt

_OPS: dict[str, Callable[[float, float], bool]] = {">=": operator.ge, "<=": operator.le}


@dataclass
class Row:
    """One metric of a scenario: a value per repetition."""

    metric: str
    unit: str
    values: list[float] = field(default_factory=list)
    #: ("<=", 2.0): the median must be at most 2.0 (in `unit`).
    goal: tuple[str, float] | None = None
    #: A baseline row (the physical limit the host is compared with).
    baseline: bool = False

    @property
    def spread(self) -> Spread:
        return Spread.of(self.values)

    @property
    def met(self) -> bool | None:
        if self.goal is None:
            return None
        med = self.spread.median
        if math.isnan(med):
            return False
        op, limit = self.goal
        return _OPS[op](med, limit)

    def goal_text(self) -> str:
        if self.goal is None:
            return ""
        op, limit = self.goal
        return f"{op} {fmt(limit, self.unit)}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "unit": self.unit,
            **self.spread.as_dict(),
            "values": self.values,
            "goal": self.goal_text() or None,
            "met": self.met,
            "baseline": self.baseline,
        }


@dataclass
class Check:
    """A correctness check (not a timing): e.g. every window got exactly the driver's text."""

    name: str
    passed: bool
    detail: str = ""


@dataclass
class Result:
    scenario: str
    goal: str
    rows: list[Row] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    skipped: str = ""
    seconds: float = 0.0

    def row(
        self,
        metric: str,
        unit: str,
        *,
        goal: tuple[str, float] | None = None,
        baseline: bool = False,
    ) -> Row:
        """The row named `metric`, created on first use (so repetitions append to it)."""
        for r in self.rows:
            if r.metric == metric:
                return r
        r = Row(metric, unit, goal=goal, baseline=baseline)
        self.rows.append(r)
        return r

    def add(self, metric: str, unit: str, value: float, **kw: Any) -> None:
        self.row(metric, unit, **kw).values.append(value)

    def check(self, name: str, passed: bool, detail: str = "") -> None:
        self.checks.append(Check(name, passed, detail))

    def as_dict(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "goal": self.goal,
            "skipped": self.skipped or None,
            "seconds": round(self.seconds, 2),
            "rows": [r.as_dict() for r in self.rows],
            "checks": [c.__dict__ for c in self.checks],
            "notes": self.notes,
        }


@dataclass
class Context:
    """What every scenario gets from the runner."""

    quick: bool
    runs: int
    #: `--trace`: scenarios that support it add per-stage rows (`hostd_dev.bench.trace`).
    trace: bool = False
    #: `--probe`: latency adds per-round GC-pause and GIL rows (`hostd_dev.bench.probe`).
    probe: bool = False
    #: `--scales`: latency's (topics, windows per topic) pairs instead of its default ones.
    scales: tuple[tuple[int, int], ...] = ()
    #: `--old-peer`: acp-ttft also runs claude-agent-acp 0.23.1 (its old npm name).
    old_peer: bool = False
    #: `--load-drivers`: latency's load driver(s), run one after the other at each scale.
    load_drivers: tuple[str, ...] = ("bench-load",)
    log: Callable[[str], None] = lambda msg: print(msg, file=sys.stderr, flush=True)


def render(results: list[Result], machine: dict[str, Any]) -> None:
    """The rich table of medians with min/max, then checks and notes."""
    from rich.console import Console
    from rich.table import Table

    # Wide enough for the table when piped to a file or a CI log.
    console = Console(width=None if sys.stdout.isatty() else 150)
    table = Table(
        title=f"hostd bench ({machine['cpus']} CPUs, Python {machine['python']})",
        show_lines=False,
    )
    for col, kw in (
        ("scenario", {"style": "bold"}),
        ("metric", {}),
        ("median", {"justify": "right"}),
        ("min", {"justify": "right"}),
        ("max", {"justify": "right"}),
        ("goal", {"justify": "right"}),
        ("", {}),
    ):
        table.add_column(col, **kw)  # type: ignore[arg-type]
    for res in results:
        if res.skipped:
            table.add_row(res.scenario, f"[dim]skipped: {res.skipped}[/dim]", "", "", "", "", "")
            table.add_section()
            continue
        first = True
        for r in res.rows:
            s = r.spread
            met = r.met
            mark = "" if met is None else ("[green]ok[/green]" if met else "[red]MISS[/red]")
            metric = f"[dim]{r.metric}[/dim]" if r.baseline else r.metric
            table.add_row(
                res.scenario if first else "",
                metric,
                fmt(s.median, r.unit),
                fmt(s.min, r.unit),
                fmt(s.max, r.unit),
                r.goal_text(),
                mark,
            )
            first = False
        for c in res.checks:
            mark = "[green]ok[/green]" if c.passed else "[red]FAIL[/red]"
            table.add_row("", f"check: {c.name}", c.detail, "", "", "", mark)
        table.add_section()
    console.print(table)
    for res in results:
        for note in res.notes:
            console.print(f"[bold]{res.scenario}[/bold]: {note}")


def first_missing(requirements: Sequence[tuple[str, str]]) -> str:
    """The reason of the first `(module, reason)` whose module cannot be found, else "".

    Scenarios that need an optional driver or a test helper are skipped with that reason."""
    import importlib.util

    for module, why in requirements:
        try:
            if importlib.util.find_spec(module) is None:
                return why
        except ModuleNotFoundError:
            return why
    return ""
