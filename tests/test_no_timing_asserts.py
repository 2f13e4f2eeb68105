"""No test asserts how fast something was (issue 35, "Must show"; docs/benchmarks.md,
"Timing checks moved out of the tests").

A wall-clock bound in a test is a speed target checked on whatever machine runs the suite:
on a slow or loaded CI box it fails a correct program. A test asserts behaviour (what
happened, in which order) under a deadline that only ends a hang (`trio.fail_after`, a
polling helper's `within`); the figures are `scripts/bench` rows.

This scans every test module (tests/ and the conformance suite in hostd/testing/) and fails
with file:line for an assertion that compares a measured time:
- an ordering comparison (`<`, `<=`, `>`, `>=`) or an `== pytest.approx(...)` whose operand
  reads a wall clock (`time.monotonic()`, `perf_counter`, `time.time`, `trio.current_time()`
  ...), uses a name assigned from such a reading (followed through assignments), or names a
  duration (`elapsed`, `latency`, `seconds`, `gaps`, `*_s`, `*_ms`, `*_at` ...);
- inside an `assert`, or inside an `if` whose body raises or calls `pytest.fail`;
- or a clock reading passed into a call inside an `assert` (a clock-derived wait bound:
  `assert await until(cond, 3.0 - (time.monotonic() - start))`).

Not flagged (they assert nothing about speed):
- a comparison with the literal 0 (`x > 0`: a figure was measured);
- `a <= stamp <= b` where `a` and `b` are bare clock readings (a stamp is on our clock);
- tests on trio's virtual clock (an `autojump_clock`/`mock_clock` parameter): its time is
  deterministic, so its asserts are behaviour;
- deadlines that are not assertions: `fail_after`, `move_on_after`, a polling loop that
  gives up at a deadline (tests/polling.py). They are not comparisons in an assert, so the
  scan needs no allowlist: a new exception would be a new rule here, with its reason.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCANNED = [ROOT / "tests", ROOT / "hostd" / "testing"]

#: Functions that read a wall clock (matched on the called name's last part).
CLOCKS = {
    "monotonic", "monotonic_ns", "perf_counter", "perf_counter_ns", "time", "time_ns",
    "current_time", "process_time", "clock_gettime", "clock_gettime_ns",
}
#: Names (variables, attributes) that hold a duration, and ones that hold a moment.
DURATION = re.compile(
    r"(^|_)(elapsed|latency|latencies|duration|durations|took|seconds|secs|ttft|gap|gaps)($|_)"
    r"|_(s|ms|us)$"
)
MOMENT = re.compile(r"_(at|ns)$")
#: Parameters that put a test on trio's virtual clock.
VIRTUAL_CLOCK = {"autojump_clock", "mock_clock"}
ORDERING = (ast.Lt, ast.LtE, ast.Gt, ast.GtE)


def _last_name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _is_clock_call(node: ast.AST, clocks: set[str] = CLOCKS) -> bool:
    return isinstance(node, ast.Call) and _last_name(node.func) in clocks and not node.args


def _clock_wrappers(tree: ast.Module) -> set[str]:
    """CLOCKS plus the module's own functions that return a clock reading (`def now():
    return time.monotonic()`), followed until no new one is found."""
    clocks = set(CLOCKS)
    functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    changed = True
    while changed:
        changed = False
        for fn in functions:
            if fn.name in clocks:
                continue
            returns = [n.value for n in ast.walk(fn) if isinstance(n, ast.Return) and n.value]
            if any(_is_clock_call(sub, clocks) for r in returns for sub in ast.walk(r)):
                clocks.add(fn.name)
                changed = True
    return clocks


class _Scope:
    """One function (or the module body): the names assigned from a clock reading."""

    def __init__(self, body: list[ast.stmt], clocks: set[str] = CLOCKS) -> None:
        self.clocks = clocks
        self.tainted: set[str] = set()
        self.bare: set[str] = set()  # assigned exactly `= clock()`
        assigns = [
            n for stmt in body for n in _walk_scope(stmt)
            if isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.NamedExpr))
        ]
        for n in assigns:
            if isinstance(n, ast.Assign) and _is_clock_call(n.value, self.clocks):
                self.bare |= {t.id for t in n.targets if isinstance(t, ast.Name)}
        changed = True
        while changed:  # follow `a = clock(); b = a - 1; c = b * 2`
            changed = False
            for n in assigns:
                value = n.value
                if value is None or not self.measures(value, names_only=True):
                    continue
                targets = n.targets if isinstance(n, ast.Assign) else [n.target]
                for t in targets:
                    for name in ast.walk(t):
                        if isinstance(name, ast.Name) and name.id not in self.tainted:
                            self.tainted.add(name.id)
                            changed = True

    def measures(self, node: ast.AST, *, names_only: bool = False) -> bool:
        """Whether `node` reads a clock, uses a clock-derived name, or (unless `names_only`)
        names a duration or a moment."""
        return any(
            _is_clock_call(sub, self.clocks)
            or (isinstance(sub, ast.Name) and sub.id in self.tainted)
            or (not names_only and (_named(sub, DURATION) or _named(sub, MOMENT)))
            for sub in ast.walk(node)
        )

    def moment(self, node: ast.expr) -> bool:
        """A point in time as read: a clock call, `t = clock()`, or a `*_at`/`*_ns` name."""
        return (
            _is_clock_call(node, self.clocks)
            or (isinstance(node, ast.Name) and node.id in self.bare)
            or _named(node, MOMENT)
        )

    def duration(self, node: ast.expr) -> bool:
        """Time measured: arithmetic on moments, a name derived from a clock (not a bare
        reading), or a duration's name."""
        if self.moment(node):
            return False
        return self.measures(node)


def _named(node: ast.AST, pattern: re.Pattern[str]) -> bool:
    """`node` is a name/attribute matching `pattern` (CONSTANTS and CPU-time counters are
    not wall-clock figures: `FLUSH_AT`, `cpu_seconds`)."""
    if not isinstance(node, (ast.Name, ast.Attribute)):
        return False
    name = _last_name(node)
    if name.isupper() or "cpu" in name.lower():
        return False
    return bool(pattern.search(name))


def _walk_scope(node: ast.AST) -> Iterator[ast.AST]:
    """`ast.walk` that does not enter nested functions (their own scope)."""
    yield node
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        yield from _walk_scope(child)


def _is_zero(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value == 0 and not isinstance(node.value, bool)


def _is_approx(node: ast.expr) -> bool:
    return isinstance(node, ast.Call) and _last_name(node.func) == "approx"


def _timed_compare(cmp: ast.Compare, scope: _Scope) -> bool:
    """An ordering of a measured time against a bound (or another measured time), or a
    duration `== pytest.approx(...)`. Two moments in order (`a.ended_at <= b.started_at`,
    `before <= stamp <= clock()`) say what happened first, not how fast: not flagged."""
    operands = [cmp.left, *cmp.comparators]
    for op, a, b in zip(cmp.ops, operands, operands[1:], strict=False):
        if isinstance(op, ORDERING):
            if _is_zero(a) or _is_zero(b):
                continue  # a figure was measured at all
            if scope.duration(a) or scope.duration(b):
                return True
            if scope.moment(a) != scope.moment(b) and not _bracketed(cmp, scope):
                return True  # a moment against a bound
        elif isinstance(op, (ast.Eq, ast.NotEq)) and (_is_approx(a) or _is_approx(b)):
            a, b = (_approximated(x) for x in (a, b))
            if scope.duration(a) or scope.duration(b):
                return True
    return False


def _approximated(node: ast.expr) -> ast.expr:
    """`pytest.approx(x, ...)` -> x."""
    if _is_approx(node) and isinstance(node, ast.Call) and node.args:
        return node.args[0]
    return node


def _bracketed(cmp: ast.Compare, scope: _Scope) -> bool:
    """`before <= x <= after`, both ends bare clock readings: x is a stamp on our clock."""
    operands = [cmp.left, *cmp.comparators]
    return (
        len(cmp.ops) == 2
        and all(isinstance(op, (ast.Lt, ast.LtE)) for op in cmp.ops)
        and scope.moment(operands[0]) and scope.moment(operands[2])
        and not scope.duration(operands[1])
    )


def _raises(body: list[ast.stmt]) -> bool:
    for stmt in body:
        for n in ast.walk(stmt):
            if isinstance(n, (ast.Raise, ast.Assert)):
                return True
            if isinstance(n, ast.Call) and _last_name(n.func) == "fail":
                return True
    return False


def _findings(source: str, rel: str) -> Iterator[int]:
    tree = ast.parse(source, filename=rel)
    clocks = _clock_wrappers(tree)
    scopes: list[tuple[ast.AST, list[ast.stmt]]] = [(tree, tree.body)]
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            params = {a.arg for a in (*node.args.args, *node.args.kwonlyargs)}
            if params & VIRTUAL_CLOCK:
                continue
            scopes.append((node, node.body))
    for _owner, body in scopes:
        scope = _Scope(body, clocks)
        for stmt in body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue  # its own scope
            for n in _walk_scope(stmt):
                checked: ast.expr | None = None
                if isinstance(n, ast.Assert):
                    checked = n.test
                elif isinstance(n, ast.If) and _raises(n.body):
                    checked = n.test
                if checked is None:
                    continue
                for sub in ast.walk(checked):
                    if isinstance(sub, ast.Compare) and _timed_compare(sub, scope):
                        yield n.lineno
                        break
                    if isinstance(sub, ast.Call) and not _is_clock_call(sub, clocks) and any(
                        scope.measures(arg, names_only=True) for arg in sub.args
                    ):
                        yield n.lineno
                        break


def timing_asserts(paths: list[Path]) -> list[str]:
    found = []
    for path in paths:
        rel = path.relative_to(ROOT).as_posix()
        source = path.read_text()
        for lineno in sorted(set(_findings(source, rel))):
            found.append(f"{rel}:{lineno}: {source.splitlines()[lineno - 1].strip()}")
    return found


def _modules() -> list[Path]:
    return sorted(p for d in SCANNED for p in d.rglob("*.py") if "node_modules" not in p.parts)


def test_no_test_asserts_a_wall_clock_time() -> None:
    found = timing_asserts(_modules())
    assert not found, (
        "timing asserts in tests (assert the behaviour, order of events, under a fail_after; "
        "move the figure to scripts/bench):\n" + "\n".join(found)
    )


# --- the scan itself: what it must flag, and what it must leave alone -----------------------

FLAGGED = {
    "elapsed": "t = time.monotonic()\nwork()\nassert time.monotonic() - t < 1.0",
    "through names": "t0 = trio.current_time()\nend = trio.current_time()\nd = end - t0\n"
                     "ok = d\nassert ok < 5",
    "a bound by if/raise": "t = perf_counter()\nif perf_counter() - t > 2:\n    raise AssertionError",
    "pytest.fail": "t = time.time()\nif time.time() - t >= 3:\n    pytest.fail('slow')",
    "a figure's name": "assert report.latency_p99_s < 0.002",
    "two speeds": "assert warm.open_s < cold.open_s",
    "gaps": "assert max(gaps) < 1.0",
    "stamps apart": "assert result.ended_at - killed_at[0] < 1.0",
    "a stamp bound": "assert outcome.ended_at < deadline",
    "approx": "t = time.monotonic()\nassert time.monotonic() - t == pytest.approx(30, abs=1)",
    "a clock-derived wait bound": "start = time.monotonic()\n"
                                  "assert until(gone, 3.0 - (time.monotonic() - start))",
    "in a method": "class T:\n    def test(self):\n        assert self.took_s <= 2",
    "a clock behind a helper": "def now():\n    return time.monotonic()\n"
                               "def test():\n    t = now()\n    assert now() - t < 1",
}
LEFT_ALONE = {
    "a deadline": "with trio.fail_after(60):\n    await work()",
    "a polling loop": "deadline = time.monotonic() + 5\nwhile time.monotonic() < deadline:\n"
                      "    step()",
    "measured at all": "assert report.ttft_s > 0 and 0 <= report.gap_ms",
    "events in order": "assert a.ended_at <= b.started_at",
    "a stamp on our clock": "before = time.monotonic_ns()\nstamp = parse(x)\n"
                            "assert before <= stamp <= time.monotonic_ns()",
    "virtual time": "async def test(autojump_clock):\n    t = trio.current_time()\n"
                    "    assert trio.current_time() - t == pytest.approx(30)",
    "counts": "assert len(chunks) < 1000 and FLUSH_AT > 3",
    "CPU accounting": "assert others_cpu_seconds() - before_cpu >= used - tick",
    "a stored stamp shown": "assert shown == pytest.approx(row.created_at, abs=0.001)",
}


@pytest.mark.parametrize("source", FLAGGED.values(), ids=FLAGGED.keys())
def test_the_scan_flags(source: str) -> None:
    assert list(_findings(source, "tests/x.py")), source


@pytest.mark.parametrize("source", LEFT_ALONE.values(), ids=LEFT_ALONE.keys())
def test_the_scan_leaves_alone(source: str) -> None:
    assert not list(_findings(source, "tests/x.py")), source
