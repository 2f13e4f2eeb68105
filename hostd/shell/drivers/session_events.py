"""What a driver session does with what its driver wrote: frames to events (bounded,
redacted), the events about the process consumed, the rest handed to the owner in order, one
batch per pipe read: to its synchronous taker (`take_batch`) or through `events`.

The event half of `DriverSession` (`hostd.shell.drivers.session`), mixed in; its rules are
the session's (see there). `_hub_ready` is the same read, decode and hand-over made by a
`PipeHub` in its own task step while the pipe is quiet (`pipe_hub`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

import trio

from hostd.core.delta_merge import coalesce_deltas
from hostd.core.payload_bounds import bound_driver_events
from hostd.core.redaction import Redactor
from hostd.shell import trace
from hostd.shell.drivers.pipe_hub import STAY
from hostd.shell.drivers.pipe_reader import PipeReader
from hostd.shell.drivers.session_end import SessionEnded
from hostd_protocol.driver_messages import (
    ChunkEvent,
    DriverEvent,
    DriverFatal,
    Ready,
    ResumeToken,
    TurnEnd,
    Warmed,
)
from hostd_protocol.errors import InvalidMessage, ProtocolError
from hostd_protocol.framing import MessageReader

if TYPE_CHECKING:
    pass

__all__ = ["EventBatch", "SessionEvents"]

EventBatch = list[DriverEvent]


class SessionEvents:
    """The event side of `DriverSession` (a mixin: one concept, kept beside its rules)."""

    driver: str
    resume_token: str | None
    warmed: trio.Event
    take_batch: Callable[[EventBatch], None] | None
    _reader: MessageReader[DriverEvent]
    _redactor: Redactor
    _log: logging.LoggerAdapter  # type: ignore[type-arg]
    _fatal: DriverFatal | None
    _send_events: trio.MemorySendChannel[EventBatch | SessionEnded]

    if TYPE_CHECKING:  # provided by DriverSession

        def _turn_ended(self, turn_id: str) -> None: ...

    def _decode(self, data: bytes | bytearray) -> list[DriverEvent | InvalidMessage]:
        """Frames to events, each redacted and within its size limits (`payload_bounds`): the
        driver boundary every event crosses."""
        out: list[DriverEvent | InvalidMessage] = []
        run: list[DriverEvent] = []
        for item in self._reader.feed(data):
            if isinstance(item, InvalidMessage):
                out.extend(self._bounded(run))
                run = []
                out.append(item)
            else:
                run.append(item)
        out.extend(self._bounded(run))
        return out

    def _bounded(self, events: list[DriverEvent]) -> list[DriverEvent]:
        # A topic's batch taker merges a read's deltas anyway (`coalesce_deltas`): for it they
        # are merged first, since bounds, redaction and everything after cost per event and a
        # read holds up to hundreds of a streaming driver's deltas (the merged text is also
        # redacted whole, so a secret split across two deltas is caught). A reader of
        # `events` (tests, the conformance suite) gets the deltas as the driver sent them.
        if self.take_batch is not None:
            events = coalesce_deltas(events)
        redactor = self._redactor
        # No secrets to hide (most sessions): the events as they are, no call per event.
        return bound_driver_events(map(redactor.value, events) if redactor else events)

    def _hub_ready(self, pipe: PipeReader) -> object:
        """The hub saw stdout readable: read, decode and hand the batch to `take_batch`
        here, in the hub's task step. Wakes the reader task (returns) with b"" at the end of
        the pipe, with a framing error, with the events when the owner stopped taking batches
        (they go through `events`), and with [] when the pipe turned hot (paced reads are the
        task's, `pipe_reader`)."""
        data = pipe.read_ready()
        if data is None:
            return STAY
        if not data:
            return data
        try:
            items = self._decode(data)
        except ProtocolError as exc:
            return exc
        taker = self.take_batch
        if taker is None:
            return items
        batch = self._sort(items)
        if batch:
            if trace.ENABLED:
                trace.batch_read(batch)
            taker(batch)
        return STAY if pipe.quiet else []

    def _sort(self, items: list[DriverEvent | InvalidMessage]) -> EventBatch:
        """The events for the owner; `Ready`, `Warmed`, skipped events consumed here."""
        batch: EventBatch = []
        for item in items:
            if type(item) is ChunkEvent:  # the stream's bulk: none of the checks below
                batch.append(item)
                continue
            if isinstance(item, InvalidMessage):
                self._log.warning("driver %s: skipped event: %s", self.driver, item)
                continue
            if isinstance(item, Warmed):
                self.warmed.set()
                continue
            if isinstance(item, Ready):
                self._log.warning("driver %s sent a second ready; ignored", self.driver)
                continue
            if isinstance(item, TurnEnd):
                self._turn_ended(item.turn_id)
            elif isinstance(item, ResumeToken):
                self.resume_token = item.token
            elif isinstance(item, DriverFatal):
                self._fatal = item
            batch.append(item)
        return batch

    async def _dispatch(self, items: list[DriverEvent | InvalidMessage]) -> None:
        batch = self._sort(items)
        if batch:
            if trace.ENABLED:
                trace.batch_read(batch)
            if self.take_batch is not None:
                self.take_batch(batch)
                return
            try:
                # Without a checkpoint when there is room (the usual case): handing the batch
                # over is not a reason to go round the scheduler once more.
                self._send_events.send_nowait(batch)
            except trio.WouldBlock:
                try:
                    await self._send_events.send(batch)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    pass
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                # Nobody listens any more; keep draining so the driver never blocks on us.
                pass
