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

Thresholds stay at CPython's defaults on purpose: a large generation-0 threshold (e.g.
50,000) makes each young pass walk up to that many objects, 10-14 ms measured, which is
worse for the tail than many small passes. A generation-2 threshold of 100 kept full passes
out of the bench's rounds, but the p99 of rounds without any full pass stayed 2.9-8.0 ms, so
it is not shown to help and is not set.

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

#: The GIL switch interval `hostd serve` sets, in seconds (CPython's default is 0.005).
SERVE_SWITCH_INTERVAL = 0.001


def freeze_startup_heap() -> int:
    """Collect what start-up left as garbage, then freeze everything still alive.

    Collect first so no cyclic garbage is frozen (frozen objects are never collected; they
    are still freed by reference counting, so memory does not grow from this). Returns how
    many objects are frozen now.
    """
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


def set_switch_interval(seconds: float) -> None:
    """Make a thread holding the GIL hand it over after `seconds` when another one waits.

    Raises:
        ValueError: `seconds` is not positive (the interpreter refuses it too).
    """
    if not seconds > 0:
        raise ValueError(f"switch interval must be > 0 seconds, not {seconds!r}")
    sys.setswitchinterval(seconds)
