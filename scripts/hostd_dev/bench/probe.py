"""`scripts/bench latency --probe`: per round, what stopped or slowed the daemon's event loop
besides its own work, from the daemon's `HOSTD_PROBE` record (`hostd.shell.probe`): the
cyclic GC's passes (each holds the GIL: the loop stands still) and the loop's run stretches
that took longer than their CPU time, inside and outside the store writer's batches. Inside
a batch the writer's worker thread competes for the GIL; outside, only the run queue
(the loop thread's own run-queue wait is a row of the round already) and the collector
can hold the loop up. So "during batches" well above "outside" is the GIL.
"""

from __future__ import annotations

import bisect
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class Record:
    gc: list[tuple[int, int, int]]  # generation, start, wall (ns)
    batches: list[tuple[int, int, int]]  # start, end, worker CPU (ns)
    stretches: list[tuple[int, int, int]]  # start, wall, CPU (ns)


def load(path: Path) -> Record | None:
    """The daemon's record, or None if it wrote none (a daemon without the probe)."""
    try:
        raw: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None

    def triples(xs: list[int]) -> list[tuple[int, int, int]]:
        return [(xs[i], xs[i + 1], xs[i + 2]) for i in range(0, len(xs) - 2, 3)]

    return Record(
        triples(raw.get("gc", [])), triples(raw.get("batches", [])), triples(raw.get("stretches", []))
    )


def round_rows(rec: Record, start: int, end: int) -> dict[str, float]:
    """The figures of one round, [start, end) on CLOCK_MONOTONIC (ns)."""
    ms = 1e6
    rows: dict[str, float] = {}
    passes = [(g, s, w) for g, s, w in rec.gc if start <= s < end]
    rows["GC pauses, longest (ms)"] = max((w for _, _, w in passes), default=0) / ms
    rows["GC pauses, total (ms)"] = sum(w for _, _, w in passes) / ms
    for gen in (1, 2):
        rows[f"GC generation-{gen} passes"] = sum(1 for g, _, _ in passes if g == gen)
    batches = sorted((s, e) for s, e, _ in rec.batches if e > start and s < end)
    rows["store batches"] = len(batches)
    rows["store batch, longest (ms)"] = max((e - s for s, e in batches), default=0) / ms
    rows["store batches, worker CPU (ms)"] = (
        sum(c for s, e, c in rec.batches if e > start and s < end) / ms
    )
    starts = [s for s, _ in batches]
    wall = {True: 0, False: 0}
    cpu = {True: 0, False: 0}
    longest = (0, 0)
    for s, w, c in rec.stretches:
        if not start <= s < end:
            continue
        longest = max(longest, (w, c))
        i = bisect.bisect_right(starts, s + w) - 1  # the last batch starting before it ends
        during = i >= 0 and batches[i][1] > s
        wall[during] += w
        cpu[during] += c
    for during, name in ((True, "during store batches"), (False, "outside store batches")):
        rows[f"loop not running while it had work, {name} (ms)"] = (wall[during] - cpu[during]) / ms
        # wall / CPU of the loop's run stretches: 1.0 = it ran whenever it had work.
        rows[f"loop wall / CPU while it had work, {name}"] = (
            round(wall[during] / cpu[during], 2) if cpu[during] else 0.0
        )
    # The loop's longest run without waiting for I/O, and its CPU: a stall of the daemon
    # itself shows here (a round's max latency far above this was not the daemon's loop).
    rows["loop's longest run stretch (ms)"] = longest[0] / ms
    rows["loop's longest run stretch, its CPU (ms)"] = longest[1] / ms
    return rows
