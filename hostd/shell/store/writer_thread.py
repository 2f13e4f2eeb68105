"""The store writer's own worker thread, at a lower CPU priority than the event loop.

Why a thread of its own, and why lower: on a 2-core machine streaming 100 topics to 4
windows each, the event loop waited for a CPU 6 % of each round, and while a store batch ran
its run stretches took 1.4-2.2x their CPU time against 1.05x outside batches (`scripts/bench
latency --probe`, docs/benchmarks.md "Tail latency (session 10, tail)"): the batch's SQLite
work took the core the loop woke up for. The loop's wake-ups are what every window waits on;
a batch may finish a few milliseconds later without anyone noticing (the flush interval is
100 ms). On Linux a thread has a nice value of its own, so this thread runs
`WRITER_NICE_DELTA` above the daemon's and the scheduler lets the loop in first. trio's
shared thread cache (`trio.to_thread`) cannot carry a priority: any later `to_thread` call
would inherit it and a thread cannot lower its nice value back without privileges.

A job that started always finishes, even if the awaiting task is cancelled (a batch is
never left half written).
"""

from __future__ import annotations

import os
import queue
import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import outcome
import trio

T = TypeVar("T")

#: How much nicer than the daemon the writer's thread runs (Linux only; elsewhere nothing).
WRITER_NICE_DELTA = 10

_STOP = object()


class WriterThread:
    """One thread running the jobs handed to `run`, one at a time, in order."""

    def __init__(self, *, nice_delta: int = WRITER_NICE_DELTA, name: str = "hostd store") -> None:
        self.nice_delta = nice_delta
        self.name = name
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` on the thread; its result or its exception. Waits for it to finish
        even when cancelled (shielded), like `trio.to_thread.run_sync` does by default."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._serve, name=self.name, daemon=True)
            self._thread.start()
        token = trio.lowlevel.current_trio_token()
        done = trio.Event()
        result: list[outcome.Outcome[T]] = []

        def job() -> None:
            result.append(outcome.capture(fn, *args))
            try:
                token.run_sync_soon(done.set)
            except trio.RunFinishedError:
                pass  # the loop is gone (the process is exiting): nobody waits any more

        self._jobs.put(job)
        with trio.CancelScope(shield=True):
            await done.wait()
        return result[0].unwrap()

    def close(self) -> None:
        """End the thread once its current job is done (a later `run` starts a new one)."""
        if self._thread is not None:
            self._jobs.put(_STOP)
            self._thread = None

    def _serve(self) -> None:
        lower_own_priority(self.nice_delta)
        while (job := self._jobs.get()) is not _STOP:
            job()


def lower_own_priority(delta: int) -> bool:
    """Make the calling thread `delta` nicer than it is (Linux: a thread's own nice value);
    False where that is not possible (another OS, a limit), which changes nothing else."""
    if sys.platform != "linux" or delta <= 0:
        return False
    tid = threading.get_native_id()
    try:
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + delta))
    except OSError:
        return False
    return True
