"""One attached topic, as the client sees it: a `Subscription` yields the snapshot and then
every topic event, hiding replay and resync from the caller.

Rules it guards (the client's; see `hostd.client.async_client`): the transcript is kept
current before each item is yielded; when the host sends `Resync`, or a seq gap shows up, it
re-attaches with `since=<last seq>`, and if the host cannot replay that far it takes a fresh
snapshot, which it yields (a `Snapshot` item) so the caller redraws. A row a snapshot
delivered cut is made whole first (`hostd.client.whole_rows`) unless `whole_rows=False`.
When the connection is lost while the subscription's block is still open (the daemon
stopped or crashed), the iteration raises the connection's error (`ConnectionBroken`, ...),
never a quiet end. It ends quietly after the block, or when this client closed its own
connection (`ConnectionClosed`: the caller ended it, as with the topic watch).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import trio

from hostd.client.whole_rows import complete_cut_rows
from hostd_protocol.client_messages import (
    Attach,
    AttachResult,
    ReplayEnd,
    Resync,
    Snapshot,
    TopicEvent,
)
from hostd_protocol.errors import ConnectionClosed, EventGap

if TYPE_CHECKING:
    from hostd.client.async_client import Client

__all__ = ["Subscription"]


class Subscription:
    """The live view of one attached topic. Iterate it for `Snapshot | TopicEvent` items.

    `transcript` (a `hostd.core.transcript.Transcript`) is kept current before each item is
    yielded; `seq` is the last seq seen.
    """

    def __init__(
        self, client: Client, topic_id: str, max_rows: int, *, whole_rows: bool = True
    ) -> None:
        self._client = client
        self._whole_rows = whole_rows
        self.topic_id = topic_id
        self.max_rows = max_rows
        #: The snapshot taken at attach; `snapshot` is the latest (a resync takes a new one).
        self.first: Snapshot | None = None
        self.snapshot: Snapshot | None = None
        self.transcript: Any = None
        self.seq = 0
        #: How often the host told us to resync, and how often we saw a seq gap ourselves.
        self.resyncs = 0
        self.gaps = 0
        self._replaying = False
        self._send, self._recv = trio.open_memory_channel[TopicEvent](math.inf)
        self._pending: list[Snapshot | TopicEvent] = []
        self.closed = False

    def _reset(self, snapshot: Snapshot) -> None:
        from hostd.core.transcript import Transcript

        if self.first is None:
            self.first = snapshot
        self.snapshot = snapshot
        self.transcript = Transcript(snapshot)
        self.seq = snapshot.seq
        self._pending.append(snapshot)

    async def _attach(self, since: int | None) -> None:
        self._replaying = since is not None
        result = await self._client._request(
            Attach(id=0, topic_id=self.topic_id, since=since, max_rows=self.max_rows)
        )
        assert isinstance(result, AttachResult)
        if result.mode == "snapshot":
            assert result.snapshot is not None
            self._reset(result.snapshot)
            if self._whole_rows:
                # Events arriving meanwhile wait in the channel: they apply after, in order.
                await complete_cut_rows(
                    self._client, self.topic_id, result.snapshot, self.transcript
                )

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> Snapshot | TopicEvent:
        while True:
            if self._pending:
                return self._pending.pop(0)
            if self.closed:
                raise StopAsyncIteration
            try:
                event = await self._recv.receive()
            except trio.EndOfChannel:
                # The connection ended under us (the block did not end): say why, typed, so
                # a lost daemon never reads like a topic that simply went quiet.
                error = self._client._closed
                if error is not None and not self.closed and not isinstance(
                    error, ConnectionClosed
                ):
                    raise error from None
                raise StopAsyncIteration from None
            if isinstance(event, ReplayEnd):
                self._replaying = False
                continue
            if isinstance(event, Resync):
                self.resyncs += 1
                # During a replay: the host no longer has our events, take a new snapshot.
                # Otherwise we fell behind live: try to replay from our seq first.
                await self._attach(None if self._replaying else self.seq)
                continue
            if event.seq <= self.seq:
                continue  # already in the snapshot, or replay overlap
            if event.seq != self.seq + 1:
                self.gaps += 1
                await self._attach(self.seq)
                continue
            if self.transcript is not None:
                try:
                    self.transcript.apply(event)
                except EventGap:
                    self.gaps += 1
                    await self._attach(self.seq)
                    continue
            self.seq = event.seq
            return event
