"""The bench's control connection: create topics and start turns through the client library.

Blocking wrappers (each opens one connection in its own `trio.run`), so scenarios read top to
bottom. The windows that measure are elsewhere (`hostd_dev.bench.windows`, another process).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import trio

from hostd_dev.bench.procs import DaemonProc

T = TypeVar("T")

#: Requests in flight at once when creating many topics (one connection each).
PARALLEL = 8


def with_client(daemon: DaemonProc, fn: Callable[[Any], Awaitable[T]]) -> T:
    from hostd.client import open_client

    async def go() -> T:
        async with open_client(daemon.paths, client_name="bench-control") as client:
            return await fn(client)

    return trio.run(go)


def create_topics(
    daemon: DaemonProc,
    n: int,
    options: dict[str, Any] | None = None,
    driver: str = "scripted",
) -> list[str]:
    """`n` topics of `driver` (scripted unless said), created over a few parallel connections."""
    from hostd.client import open_client

    ids: list[str] = []

    async def worker(count: int) -> None:
        async with open_client(daemon.paths, client_name="bench-control") as client:
            for _ in range(count):
                t = await client.create_topic(
                    title="bench", driver=driver, options=options or {}
                )
                ids.append(t.id)

    async def go() -> None:
        async with trio.open_nursery() as nursery:
            per, extra = divmod(n, PARALLEL)
            for i in range(PARALLEL):
                count = per + (1 if i < extra else 0)
                if count:
                    nursery.start_soon(worker, count)

    trio.run(go)
    return ids


def send_all(daemon: DaemonProc, topic_ids: list[str], text: str) -> None:
    """Start one turn on every topic (in order, one connection); returns once all are sent."""

    async def go(client: Any) -> None:
        for tid in topic_ids:
            await client.send(tid, text, "start")

    with_client(daemon, go)
