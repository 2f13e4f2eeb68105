"""Where the event loop's time goes besides the work itself, for `scripts/bench latency
--probe` (issue 35: the host-added tail at 100 topics x 4 windows).

Off unless the daemon starts with `HOSTD_PROBE=<file>` in its environment; then `hostd serve`
runs trio with `instruments()` and the store writer times its batches. Off, nothing is
installed and the writer pays one module-attribute test per batch. On, it records:

- every cyclic GC pass, in any thread (`gc.callbacks`): generation, start, wall time. A pass
  holds the GIL, so it stops the event loop for its whole length;
- every store batch: start and end on the loop's side, and the worker thread's CPU time;
- every *run stretch* of the event loop: from trio's `after_io_wait` (the loop has the GIL
  back and events to handle) to its next `before_io_wait`, its wall and its thread CPU time.
  Wall minus CPU is the time the loop had work but did not run: it was waiting for the GIL
  (another thread held it: the store writer's worker) or for a CPU (the run queue; the bench
  reads the loop thread's own run-queue wait beside it, so the two can be told apart).

Records go into `array`s of integers (monotonic ns): no object per record, so the probe does
not feed the collector it measures. They are written to `<file>` as one JSON object when the
process exits (`hostd serve` returns normally on SIGTERM).
"""

from __future__ import annotations

import atexit
import gc
import json
import os
from array import array
from time import monotonic_ns, thread_time_ns
from typing import Any

import trio

#: The file the probe goes to at exit, or "" (off).
PATH = os.environ.get("HOSTD_PROBE", "")
ENABLED = bool(PATH)

#: generation, start, wall per GC pass.
gc_passes = array("q")
#: start, end, worker CPU per store batch.
batches = array("q")
#: start, wall, CPU per run stretch of the event loop.
stretches = array("q")

_gc_started = 0


def _on_gc(phase: str, info: dict[str, Any]) -> None:
    global _gc_started
    now = monotonic_ns()
    if phase == "start":
        _gc_started = now
    elif _gc_started:
        gc_passes.extend((info["generation"], _gc_started, now - _gc_started))


class _Stretches(trio.abc.Instrument):
    """Times each run stretch of the loop (its thread only: trio calls these on it)."""

    def __init__(self) -> None:
        self._wall = 0
        self._cpu = 0

    def after_io_wait(self, timeout: float) -> None:
        self._wall = monotonic_ns()
        self._cpu = thread_time_ns()

    def before_io_wait(self, timeout: float) -> None:
        if self._wall:
            now = monotonic_ns()
            stretches.extend((self._wall, now - self._wall, thread_time_ns() - self._cpu))


def instruments() -> list[trio.abc.Instrument]:
    """What `trio.run` gets in the daemon's process: nothing when the probe is off. Also
    starts timing the GC passes."""
    if not ENABLED:
        return []
    if _on_gc not in gc.callbacks:
        gc.callbacks.append(_on_gc)
    return [_Stretches()]


def timed_batch(apply: Any) -> Any:
    """`apply` (the store's batch write, run on the worker thread) timed into `batches`."""

    def run(*args: Any) -> Any:
        start, cpu = monotonic_ns(), thread_time_ns()
        try:
            return apply(*args)
        finally:
            batches.extend((start, monotonic_ns(), thread_time_ns() - cpu))

    return run


def dump(path: str) -> None:
    """Write what was recorded to `path` (only when something was: a child process that
    inherits the environment must not clobber the daemon's file)."""
    if not (gc_passes or stretches):
        return
    with open(path, "w", encoding="utf-8") as f:
        json.dump(
            {
                "pid": os.getpid(),
                "gc": gc_passes.tolist(),
                "batches": batches.tolist(),
                "stretches": stretches.tolist(),
            },
            f,
        )


if ENABLED:
    atexit.register(dump, PATH)
