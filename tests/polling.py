"""Waiting for another process's state: the one place where tests poll.

What these helpers wait for is not an event of ours: a process's start or end, a file another
process writes, a worker thread trio retires after its idle timeout, a count the daemon keeps
for another process's connections. There is nothing to block on, so they ask again every
`every` seconds until the condition holds or `within` seconds passed, and return whether it
held (the caller says what did not happen). Our own code's steps are awaited on events,
never through these.
"""

from __future__ import annotations

import inspect
import threading
import time
from collections.abc import Awaitable, Callable

import trio

#: How often to ask again: short against the waits (seconds), long against a /proc scan.
POLL_S = 0.02


def holds_within(cond: Callable[[], object], within: float, every: float = POLL_S) -> bool:
    """Blocking: True once `cond()` is truthy, False if it is not within `within` seconds."""
    deadline = time.monotonic() + within
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(every)
    return True


async def eventually(
    cond: Callable[[], object | Awaitable[object]], within: float, every: float = POLL_S
) -> bool:
    """`holds_within` for trio tests: True once `cond()` (awaited if it returns an
    awaitable) is truthy, False after `within`."""
    deadline = trio.current_time() + within
    while True:
        held = cond()
        if inspect.isawaitable(held):
            held = await held
        if held:
            return True
        if trio.current_time() > deadline:
            return False
        await trio.sleep(every)


async def thread_retired(ident: int, within: float = 10.0) -> None:
    """Until the thread `ident` has ended (trio retires an idle worker thread on its own)."""
    assert await eventually(lambda: all(t.ident != ident for t in threading.enumerate()), within), (
        f"thread {ident} did not end within {within} s"
    )
