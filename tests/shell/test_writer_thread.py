"""The store writer's own thread (`hostd.shell.store.writer_thread`): jobs in order on one
thread, nicer than the event loop's, exceptions back to the caller, a started job finished
even when its caller is cancelled."""

from __future__ import annotations

import os
import sys
import threading

import pytest
import trio

from hostd.shell.store.writer_thread import WriterThread


def _nice() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


async def test_jobs_run_in_order_on_one_nicer_thread() -> None:
    worker = WriterThread(nice_delta=5)
    try:
        with trio.fail_after(10):
            seen = [await worker.run(lambda i=i: (i, threading.get_ident(), _nice())) for i in range(3)]
    finally:
        worker.close()
    assert [i for i, _, _ in seen] == [0, 1, 2]
    assert len({t for _, t, _ in seen}) == 1 and seen[0][1] != threading.get_ident()
    if sys.platform == "linux":  # a thread's own nice value; the loop's is untouched
        assert seen[0][2] == min(19, _nice() + 5)


async def test_an_exception_reaches_the_caller_and_the_thread_goes_on() -> None:
    worker = WriterThread()
    try:
        with trio.fail_after(10):
            with pytest.raises(ValueError, match="bad batch"):
                await worker.run(lambda: (_ for _ in ()).throw(ValueError("bad batch")))
            assert await worker.run(lambda: 42) == 42
    finally:
        worker.close()


async def test_a_started_job_finishes_when_its_caller_is_cancelled() -> None:
    worker = WriterThread()
    started, release, finished = threading.Event(), threading.Event(), threading.Event()

    def job() -> None:
        started.set()
        release.wait(10)
        finished.set()

    try:
        with trio.fail_after(10):
            with trio.CancelScope() as scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(worker.run, job)
                    await trio.to_thread.run_sync(started.wait)
                    scope.cancel()
                    release.set()
            assert finished.is_set()  # the shielded wait saw the job through
    finally:
        worker.close()
