"""The daemon's cyclic garbage collector, tuned for a long-lived process with a hot stream.

CPython's full (generation 2) collection walks every tracked container object, and a large
part of them is the daemon's start-up heap: modules, classes, functions, the protocol's
tables, the loaded topic records. None of that ever becomes garbage, yet each full pass
visited all of it while the event loop stood still. `gc.freeze()` after start-up moves those
objects to the permanent generation, which no collection visits: at 100 topics x 4 windows
the tracked objects go 50,258 -> 13,402 and the full pass inside a streaming round 34-38 ->
23-32 ms of CPU (docs/benchmarks.md, "Finding 1, session 5 (gcp)"). RSS is unchanged (1,000
idle topics 55.8 -> 55.9 MiB).

Thresholds stay at CPython's defaults on purpose: a large generation-0 threshold (e.g.
50,000) makes each young pass walk up to that many objects, 10-14 ms measured, which is
worse for the tail than many small passes. A generation-2 threshold of 100 kept full passes
out of the bench's rounds, but the p99 of rounds without any full pass stayed 2.9-8.0 ms, so
it is not shown to help and is not set.
"""

from __future__ import annotations

import gc


def freeze_startup_heap() -> int:
    """Collect what start-up left as garbage, then freeze everything still alive.

    Collect first so no cyclic garbage is frozen (frozen objects are never collected; they
    are still freed by reference counting, so memory does not grow from this). Returns how
    many objects are frozen now.
    """
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
