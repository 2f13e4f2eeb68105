"""The live topic list of one connection (`Client.watch_topics`), so a UI's list never polls.

Rules it guards (the same as the TypeScript client's `TopicWatch`):

- The watch is registered before `WatchTopics` is sent, so a change right behind the reply is
  not lost; the list is then paged whole (`has_more`), and changes that arrived while it was
  paged are older than (or already in) the list: a deletion still applies, a create or rename
  does not overwrite the newer entry the pages hold.
- Each change is applied to `topics()` before it is yielded, as a subscription keeps its
  transcript current before each item.
- The iteration ends when the watch's block exits or the connection closes (the client's
  error, if it closed on one, is raised from the iteration).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import trio

from hostd_protocol.client_messages import TopicInfo, TopicsChanged

if TYPE_CHECKING:
    from collections.abc import Callable

    from hostd_protocol.errors import HostdError

__all__ = ["TopicWatch"]


class TopicWatch:
    """Iterate it (`async for change in watch`) for `TopicsChanged` items; `topics()` is the
    list as of the last item yielded (the daemon's order: created order, new ones last)."""

    def __init__(self, closed_error: Callable[[], HostdError | None]) -> None:
        self._send, self._recv = trio.open_memory_channel[TopicsChanged](math.inf)
        self._by_id: dict[str, TopicInfo] = {}
        self._queued = 0  # pushed and not yet yielded
        self._settled = 0  # how many of those are older than the paged list
        self._closed_error = closed_error

    def topics(self) -> list[TopicInfo]:
        return list(self._by_id.values())

    def _reset(self, topics: list[TopicInfo]) -> None:
        self._by_id = {t.id: t for t in topics}
        self._settled = self._queued

    def _push(self, change: TopicsChanged) -> None:
        try:
            self._send.send_nowait(change)
        except trio.ClosedResourceError:
            return  # the watch ended; a late change has no reader
        self._queued += 1

    def _end(self) -> None:
        self._send.close()

    def __aiter__(self) -> TopicWatch:
        return self

    async def __anext__(self) -> TopicsChanged:
        try:
            change = await self._recv.receive()
        except trio.EndOfChannel:
            error = self._closed_error()
            if error is not None:
                raise error from None
            raise StopAsyncIteration from None
        self._queued -= 1
        older = self._settled > 0
        if older:
            self._settled -= 1
        if change.change == "deleted" or change.topic is None:
            self._by_id.pop(change.topic_id, None)
        elif not older:
            self._by_id[change.topic_id] = change.topic
        return change
