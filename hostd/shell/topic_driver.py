"""The driver side of a `TopicHost`: its sessions, the ordered command queue, the event pump.

Rules it guards (see `hostd.shell.topic_host` for the host's own):

- Commands reach the driver in the order the runtime and the turn machine issued them: one
  task (`_driver_loop`) writes them, `ResetSession`s included, so a rewind's session closes
  before the next turn's `Send`.
- A steer that arrives before its turn's `Send` was written (a topic's first turn, its driver
  still opening) is held and written right after that `Send`, never dropped.
- Driver events are taken in batches (those waiting when the pump starts, merged; then each
  pipe read straight from the session's reader, `DriverSession.take_batch`), coalesced
  (`coalesce_deltas`) and applied without awaiting anything, so a slow window or disk never
  slows the driver.
- A session that ends during a turn (one whose `Send` it got), a command with no session to
  go to, and any exception while writing (`turn_failure`) are the host's `_lost`: the running
  turn machine's `lost` input (or the runtime's `driver_lost` when no machine runs). A
  session replaced on purpose (a rewind) or closed with the host is no failure.
- A session that died between turns fails nothing: the next turn's `Send` goes to a new
  process that resumes the vendor session (the topic's resume token), once; also when that
  `Send` was already on its way to the dead one (`DriverSession.send`: it never got it).
"""

from __future__ import annotations

import logging
from functools import partial
from typing import TYPE_CHECKING, Any

import msgspec
import trio

from hostd.core.delta_merge import coalesce_deltas
from hostd.core.effects import Effect, ResetSession
from hostd.core.vendor_session import feeds_history
from hostd.shell import trace
from hostd.shell.turns import TurnRunner, turn_failure
from hostd_protocol.common import SessionSource
from hostd_protocol.driver_messages import (
    ChunkEvent,
    DriverEvent,
    HostCommand,
    Interrupt,
    Redirect,
    Send,
    TurnEnd,
)
from hostd_protocol.errors import DriverCrashed, DriverError, HostdError

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from hostd.core.options import SessionOptions
    from hostd.shell.drivers.supervisor import DriverSession, Supervisor
    from hostd.shell.fanout import TopicStream
    from hostd.shell.lanes import LaneHost, Lanes
    from hostd.shell.runtime_protocol import Runtime
    from hostd.shell.tracing import Tracing
    from hostd_protocol.client_messages import TopicInfo

__all__ = ["DriverLink", "coalesce_deltas", "route_events"]

log = logging.getLogger(__name__)


def route_events(
    batch: list[DriverEvent], turns: TurnRunner, to_runtime: Callable[[DriverEvent], object]
) -> None:
    """One pipe read of a session's events, merged (`coalesce_deltas`), each where it belongs:
    the running turn's `TurnEnd` goes to its machine instead of the runtime (a next hook or a
    retry may follow); its chunks go to both (the machine records tool steps and the answer a
    next hook reads); everything else to the runtime. The topic's own session and each extra
    answer's lane route the same way, each with its own runner."""
    for event in coalesce_deltas(batch):
        machine = turns.machine
        ours = (
            machine is not None
            and not machine.over
            and isinstance(event, TurnEnd | ChunkEvent)
            and event.turn_id == machine.turn_id
        )
        if ours and isinstance(event, TurnEnd):
            assert machine is not None
            turns.feed(machine, partial(machine.driver_end, event))
            continue
        to_runtime(event)
        if ours and isinstance(event, ChunkEvent):
            assert machine is not None
            turns.feed(machine, partial(machine.chunk, event.chunk))


class DriverLink:
    """The driver side of `TopicHost` (a mixin: one concept, kept beside its rules). The
    host creates the command channel and the session state in its `__init__` and starts
    `_driver_loop` in its nursery."""

    topic_id: str
    info: TopicInfo
    runtime: Runtime
    turns: TurnRunner
    closed: bool
    _supervisor: Supervisor
    _resume_token: str | None
    _fork_from: SessionSource | None
    _interrupt_grace: float
    _ops_send: trio.MemorySendChannel[tuple[str, HostCommand] | ResetSession]
    _ops_recv: trio.MemoryReceiveChannel[tuple[str, HostCommand] | ResetSession]
    _session: DriverSession | None
    _session_opts: SessionOptions | None
    _fresh_session: bool
    _resets_pending: int
    _resets_done: trio.Event
    _sent_turn: dict[str, str]
    _early_steers: list[tuple[str, Redirect]]
    stream: TopicStream
    lanes: Lanes
    tracing: Tracing | None

    if TYPE_CHECKING:  # provided by TopicHost

        def apply(self, effects: list[Effect]) -> int: ...

        def start_soon(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> None: ...

    @property
    def session(self) -> DriverSession | None:
        """The topic's own driver session, if one is open."""
        return self._session

    def queue_command(self, key: str, cmd: HostCommand) -> None:
        """Write `cmd` to session `key` in order with every other command."""
        self._ops_send.send_nowait((key, cmd))

    def detach_session(self) -> None:
        """Forget the topic's session so that its end is no failure: the next
        `open_session` replaces it (a turn-scoped standalone workspace is a new working dir
        each turn)."""
        self._session = None

    async def wait_resets(self) -> None:
        """Until every queued `ResetSession` has closed its session."""
        while self._resets_pending:
            await self._resets_done.wait()

    @property
    def resume_token(self) -> str | None:
        """The topic's vendor session token (None: the next session starts fresh)."""
        return self._resume_token

    @property
    def pending_source(self) -> SessionSource | None:
        """The vendor session the topic's next session is offered to copy, if any."""
        return None if self._resume_token else self._fork_from

    def start_from(self, source: SessionSource | None) -> None:
        """Offer `source` (a fork's origin) to the topic's next session, which the driver
        may start as a copy of it (`hostd.core.vendor_session`)."""
        if not self._resume_token:
            self._fork_from = source

    async def open_session(self, opts: SessionOptions) -> DriverSession:
        """Open the topic's own session (resuming with its token, else from the offered
        vendor source) and start its pump."""
        token = self._resume_token
        session = await self._supervisor.open(
            self.topic_id, opts, token, fork_from=self.pending_source
        )
        self._session = session
        self._session_opts = opts
        self._fresh_session = feeds_history(
            resumed=bool(token),
            offered=session.fork_from is not None,
            capabilities=session.capabilities,
        )
        self.apply(self.runtime.driver_ready(session.capabilities, trio.current_time()))
        self.start_soon(self._pump, session)
        return session

    def _lost(self, error: HostdError) -> None:
        if self.closed:
            return  # deleted or shutting down: its session was closed on purpose
        log.warning("topic %s: driver lost: %s", self.topic_id, error)
        machine = self.turns.machine
        if machine is not None and not machine.over:
            self.turns.feed(machine, partial(machine.lost, error))
        else:
            self.apply(self.runtime.driver_lost(error, trio.current_time()))

    async def _driver_loop(self) -> None:
        async for op in self._ops_recv:
            try:
                if isinstance(op, ResetSession):
                    try:
                        # Rewind / fork: the vendor session goes, in order with the commands.
                        session, self._session = self._session, None
                        if session is not None:
                            await self._supervisor.close(self.topic_id)
                    finally:
                        self._resets_pending -= 1
                        if not self._resets_pending:
                            self._resets_done.set()
                            self._resets_done = trio.Event()
                    continue
                await self._write(*op)
            except Exception as exc:  # the turn boundary's map: see turn_failure
                self._lost(turn_failure(exc, self.topic_id))

    async def _write(self, key: str, cmd: HostCommand) -> None:
        if isinstance(cmd, Interrupt) and cmd.turn_id != self.runtime.active_turn_id:
            return  # its turn already ended (e.g. stopped while a hook ran)
        lane = self.lanes.owner_of(key) if key != self.topic_id else None
        if lane is not None:
            await self._write_lane(lane, key, cmd)
            return
        session = self._session if key == self.topic_id else self.turns.session_for(key)
        if isinstance(cmd, Redirect) and self._sent_turn.get(key) != cmd.turn_id:
            if cmd.turn_id == self.runtime.active_turn_id:
                self._early_steers.append((key, cmd))
            # Else its turn ended before it started: the runtime hands the steer back.
            return
        if isinstance(cmd, Send) and key == self.topic_id:
            await self._send_turn(session, cmd)
            return
        if session is None:
            self._lost(
                DriverCrashed(
                    f"no driver session is open for {type(cmd).__name__}",
                    driver=self.info.driver,
                )
            )
            return
        if isinstance(cmd, Interrupt):
            # interrupt() waits for the turn end (or kills): do not hold up later commands.
            self.start_soon(self._interrupt, session, cmd.turn_id)
            return
        try:
            await session.send(cmd)
            if isinstance(cmd, Send):
                await self._send_early_steers(key, session, cmd.turn_id)
        except DriverError as exc:
            self._lost(exc)

    async def _send_turn(self, session: DriverSession | None, cmd: Send) -> None:
        """The topic's own `Send`. A session that died between turns (known gone, or gone
        before this Send reached it) is replaced once, by a new process that resumes the
        topic's vendor session; a second failure, or a death after the Send got through,
        fails the turn (the session's pump reports that one)."""
        self._supervisor.mark_busy(self.topic_id)
        if self.tracing is not None:
            cmd = msgspec.structs.replace(cmd, traceparent=self.tracing.traceparent(cmd.turn_id))
        for attempt in (1, 2):
            if session is None:
                session = await self._reopen()  # a failure here fails the turn (_driver_loop)
            sent = cmd
            if self._fresh_session:
                # A new vendor session (rewind, fork, lost resume token) that is no vendor
                # copy: it gets the host's history, so the model sees what the windows see.
                sent = msgspec.structs.replace(cmd, history=self.runtime.history_for(cmd.message_id))
            try:
                await session.send(sent)
            except DriverCrashed as exc:  # gone before the Send reached it: the turn never ran
                if attempt == 2:
                    self._lost(exc)
                    return
                log.info("topic %s: the driver was gone before turn %s reached it (%s); "
                         "starting a new one", self.topic_id, cmd.turn_id, exc.message)
                session = None
                continue
            except DriverError as exc:
                self._lost(exc)
                return
            break
        assert session is not None
        self._fresh_session = False
        if trace.ENABLED:
            # Here, not in the session: a prewarmed spare's session has no topic id.
            trace.send_out(self.topic_id)
        try:
            # After the Send got through: a failure now is the turn's (never a second Send).
            await self._send_early_steers(self.topic_id, session, cmd.turn_id)
        except DriverError as exc:
            self._lost(exc)

    async def _reopen(self) -> DriverSession:
        """A new session for the topic in place of its dead one, with the options the dead one
        had and the topic's resume token (`open_session`)."""
        opts = self._session_opts
        if opts is None:
            raise DriverCrashed("no driver session is open for Send", driver=self.info.driver)
        dead, self._session = self._session, None  # its end is no failure now
        if dead is not None and not dead.ended.is_set():
            await dead.aclose()  # dead or dying: quick, and the supervisor drops it
        return await self.open_session(opts)

    async def _write_lane(self, lane: LaneHost, key: str, cmd: HostCommand) -> None:
        """A command for a multi-answer turn's extra lane: a lane whose session is gone has
        ended (nothing to tell it); a write that fails ends that lane, not the topic's."""
        session = lane.session_for(key)
        if session is None:
            return
        if isinstance(cmd, Interrupt):
            self.start_soon(self._interrupt, session, cmd.turn_id)
            return
        try:
            await session.send(cmd)
        except DriverError as exc:
            lane.lost(exc)

    async def _send_early_steers(self, key: str, session: DriverSession, turn_id: str) -> None:
        self._sent_turn[key] = turn_id
        early, self._early_steers = self._early_steers, []
        for held_key, steer in early:
            if held_key == key and steer.turn_id == turn_id:
                await session.send(steer)
            elif steer.turn_id == self.runtime.active_turn_id:
                self._early_steers.append((held_key, steer))

    async def _interrupt(self, session: DriverSession, turn_id: str) -> None:
        try:
            await session.interrupt(turn_id, self._interrupt_grace)
        except DriverError as exc:
            log.info("topic %s: interrupt: %s", self.topic_id, exc)

    async def _pump(self, session: DriverSession) -> None:
        """Apply the session's batches until it ends. Batches waiting in `session.events`
        are taken together, merged (a pump that fell behind catches up with fewer, longer
        deltas, never with other text). Once nothing waits, the session's reader hands each
        batch over itself (`take_batch`): a pipe read reaches the windows without a task
        switch, and the channel is left with the `SessionEnded` (and the batches of a
        session that does not hand over)."""
        from hostd.shell.drivers.supervisor import SessionEnded

        events_in = session.events
        ended: SessionEnded | None = None
        item: list[DriverEvent] | None = None
        try:
            while True:
                batch: list[DriverEvent] = []
                if item:
                    if trace.ENABLED:
                        trace.batch_taken(item, first=True)
                    batch.extend(item)
                while True:  # synchronously: no batch can overtake these
                    try:
                        waiting = events_in.receive_nowait()
                    except trio.WouldBlock:
                        break
                    except (trio.EndOfChannel, trio.ClosedResourceError):
                        waiting = SessionEnded()
                    if isinstance(waiting, SessionEnded):
                        ended = waiting
                        break
                    if trace.ENABLED:
                        trace.batch_taken(waiting, first=not batch)
                    batch.extend(waiting)
                if batch:
                    self._apply_batch(batch)
                if ended is not None:
                    break
                session.take_batch = self._take_batch
                try:
                    received = await events_in.receive()
                except (trio.EndOfChannel, trio.ClosedResourceError):
                    break
                if isinstance(received, SessionEnded):
                    ended = received
                    break
                item = received
        finally:
            session.take_batch = None
        if self._session is not session:
            return  # replaced on purpose (a rewind) or closed with the host: not a failure
        self._session = None
        error = ended.error if ended is not None else None
        if session.running_turn is None:
            # Between turns (or before a turn's Send got through): no turn failed; the next
            # Send opens a new process, which resumes the vendor session.
            if error is not None:
                log.info("topic %s: driver ended between turns: %s", self.topic_id, error.message)
            return
        self._lost(
            error or DriverCrashed("the driver session ended during a turn", driver=self.info.driver)
        )

    def _take_batch(self, batch: list[DriverEvent]) -> None:
        if self.closed:
            return  # deleted or shut down: its pump is being cancelled, the rest is moot
        if trace.ENABLED:
            trace.batch_taken(batch, first=True)
        self._apply_batch(batch)

    def _apply_batch(self, batch: list[DriverEvent]) -> None:
        # Every window that got frames from this batch writes them in one go, now.
        with self.stream.held():
            self.feed(batch, trio.current_time())
        if trace.ENABLED:
            trace.batch_done()
        if self.runtime.active_turn_id is None:
            self._supervisor.mark_idle(self.topic_id)

    def feed(self, batch: list[DriverEvent], now: float) -> None:
        """One pipe read of driver events into the runtime (see `route_events`)."""
        tracing = self.tracing
        if tracing is None:
            route_events(
                batch, self.turns, lambda event: self.apply(self.runtime.driver_event(event, now))
            )
            return

        def traced(event: DriverEvent) -> None:
            # After the runtime: spans see the driver's events and the topic events they
            # caused in one order (a tool's result closes its span before the next model
            # call of the same read opens one).
            self.apply(self.runtime.driver_event(event, now))
            tracing.driver_event(event)

        route_events(batch, self.turns, traced)
