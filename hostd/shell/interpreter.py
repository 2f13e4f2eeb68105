"""The interpreter settings of a process that is the daemon (`hostd serve`), in one place.

Two of CPython's process-wide defaults are tuned for batch programs, not for a long-lived
process whose event loop must answer in well under a millisecond while a worker thread (the
store writer) does heavy work. `hostd serve` owns its interpreter and applies both once
start-up is done (`DaemonConfig.freeze_startup_heap`, `DaemonConfig.switch_interval`); a
process that embeds the daemon (the tests) keeps its own settings: they are process-wide.

**The cyclic GC.** A full (generation 2) collection walks every tracked container object,
and a large part of them is the daemon's start-up heap: modules, classes, functions, the
protocol's tables, the loaded topic records. None of that ever becomes garbage, yet each full
pass visited all of it while the event loop stood still. `gc.freeze()` after start-up moves
those objects to the permanent generation, which no collection visits: at 100 topics x 4
windows the tracked objects go 50,258 -> 13,402 and the full pass inside a streaming round
34-38 -> 23-32 ms of CPU (docs/benchmarks.md, "Finding 1, session 5 (gcp)"). RSS is
unchanged (1,000 idle topics 55.8 -> 55.9 MiB).

The young generations keep CPython's thresholds: a large generation-0 threshold (e.g.
50,000) makes each young pass walk up to that many objects, 10-14 ms measured, which is
worse for the tail than many small passes.

**Full passes at quiet moments.** What the freeze cannot cover is what start-up did not make:
the trio tasks, connections and rows of the topics and windows that came later. At 100 topics
x 4 windows a full pass walks ~60,000 of them and stops the event loop for 40-55 ms, and
CPython starts one every ~10 s of streaming (when the objects promoted since the last one pass
a quarter of the long-lived ones): ~200 chunks late by up to that much in whatever second it
lands, one round in two of the bench. Streaming makes almost no cyclic garbage (~200 objects
per full pass), so that pass buys nothing while it stalls the stream. `hostd serve` therefore
moves the full pass to a quiet moment (`collect_when_quiet`: the process used under
`QUIET_CPU_SHARE` of a core in each of the last `QUIET_LOOKS` periods of `QUIET_CHECK_PERIOD`) and lets CPython start one by
itself only after `FULL_PASS_AFTER` generation-1 passes without a quiet moment (its default:
10), which bounds the garbage a daemon that never rests can hold (docs/benchmarks.md, "Tail
latency (session 10, tail)").

**The GIL switch interval.** When a second thread wants the GIL, the holder keeps it until
it blocks or until the switch interval (CPython: 5 ms) has passed. The store writer's worker
thread encodes a flush batch in Python for milliseconds at a time; with the default the event
loop, woken by a driver's pipe, could wait up to 5 ms for the GIL before it reads a chunk. A
shorter interval bounds that wait. The cost is more GIL hand-offs while both threads are
busy, which only happens during a flush. The value and its measured effect are in
docs/benchmarks.md, "Finding 1, session 6 (lat3)".
"""

from __future__ import annotations

import gc
import sys
import time
from collections.abc import Callable

import trio

#: The GIL switch interval `hostd serve` sets, in seconds (CPython's default is 0.005).
SERVE_SWITCH_INTERVAL = 0.001
#: Generation-1 passes after which CPython may start a full pass by itself (its default: 10;
#: ~1 generation-1 pass per second at 100 topics x 4 windows streaming: ~10 minutes).
FULL_PASS_AFTER = 600
#: A quiet moment: the whole process (every thread) used less than this share of one core...
QUIET_CPU_SHARE = 0.05
#: ... over this many seconds (also how often `collect_when_quiet` looks)...
QUIET_CHECK_PERIOD = 1.0
#: ... this many times in a row.
QUIET_LOOKS = 2


def freeze_startup_heap() -> int:
    """Collect what start-up left as garbage, then freeze everything still alive.

    Collect first so no cyclic garbage is frozen (frozen objects are never collected; they
    are still freed by reference counting, so memory does not grow from this). Returns how
    many objects are frozen now.
    """
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


class QuietCollector:
    """When to run a full collection: after `looks` quiet looks in a row, and only if a
    generation-1 pass happened since the last full one (otherwise nothing new can have
    reached generation 2). One quiet look is not enough: a daemon whose turns wait for a
    slow disk uses little CPU for a second, and then streams.

    Fed with the process's CPU seconds and the clock at each look; no clock of its own.
    """

    def __init__(self, *, share: float = QUIET_CPU_SHARE, looks: int = QUIET_LOOKS) -> None:
        self.share = share
        self.looks = looks
        self._last: tuple[float, float] | None = None
        self._quiet = 0

    def due(self, now: float, cpu: float, young_passes: int) -> bool:
        """Whether to collect now. `young_passes`: generation-1 passes since the last full
        one (`gc.get_count()[2]`)."""
        last, self._last = self._last, (now, cpu)
        if last is None or now <= last[0]:
            return False
        quiet = (cpu - last[1]) / (now - last[0]) < self.share
        self._quiet = self._quiet + 1 if quiet else 0
        if self._quiet >= self.looks and young_passes > 0:
            self._quiet = 0
            return True
        return False


async def collect_when_quiet(
    period: float = QUIET_CHECK_PERIOD,
    *,
    full_pass_after: int | None = FULL_PASS_AFTER,
    collect: Callable[[], object] = gc.collect,
    cpu: Callable[[], float] = time.process_time,
    young_passes: Callable[[], int] = lambda: gc.get_count()[2],
) -> None:
    """Run the process's full collections at its quiet moments, until cancelled.

    With `full_pass_after` (the default) CPython's own full passes wait for that many
    generation-1 passes: the bound for a process that is never quiet. That sets a
    process-wide threshold: only for the process that owns its interpreter (`hostd serve`).
    """
    if full_pass_after is not None:
        young, middle, _ = gc.get_threshold()
        gc.set_threshold(young, middle, full_pass_after)
    pacer = QuietCollector()
    while True:
        if pacer.due(trio.current_time(), cpu(), young_passes()):
            collect()
        await trio.sleep(period)


def set_switch_interval(seconds: float) -> None:
    """Make a thread holding the GIL hand it over after `seconds` when another one waits.

    Raises:
        ValueError: `seconds` is not positive (the interpreter refuses it too).
    """
    if not seconds > 0:
        raise ValueError(f"switch interval must be > 0 seconds, not {seconds!r}")
    sys.setswitchinterval(seconds)
