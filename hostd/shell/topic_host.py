"""The trio shell around one topic's `TopicRuntime`.

A `TopicHost` feeds the runtime (client requests, driver events, timers) and carries out the
effects it returns, in order (see `hostd/core/effects.py`):

- `Emit` goes to the topic's `TopicStream` (replay buffer + windows) synchronously;
- store effects go to the `StoreWriter` (never awaited here, except that a request whose
  effects include a durable save is answered only after the save is committed);
- `StartTurn` starts the turn's machine (`hostd.core.turn.TurnMachine`), whose effects the
  host's `TurnRunner` (`hostd.shell.turns`) executes: config, hooks, session opens, sends;
- `ToDriver` goes, in order with the machine's sends, to the topic's driver task, which
  writes it to the session the machine names (`session_key`: a delegated child's meanwhile);
- `SetTimer` arms the host's one timer task.

Rules this module guards:

- Effects are applied synchronously, in the order given, on the trio thread: between taking a
  snapshot and subscribing a window (`attach`) nothing can run, so no event is missed or
  repeated.
- Driver events are applied in batches (one per pipe read) without awaiting anything, so a
  slow window or a slow disk never slows the driver.
- A driver that cannot be opened, breaks, or is missing when a command is due, and any
  exception while a turn is set up or driven (`turn_failure`, the turn boundary's one map),
  is the running turn machine's `lost` input; it ends the turn. Nothing here decides turn
  outcomes.

The driver side (sessions, the ordered command queue, the event pump) is
`hostd.shell.topic_driver.DriverLink`, mixed in; what the host needs of its runtime is the
`Runtime` protocol (`hostd.shell.runtime_protocol`).
"""

from __future__ import annotations

import logging
import math
import secrets
import time
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

import msgspec
import trio

from hostd.core.effects import (
    DeleteRow,
    Effect,
    Emit,
    ResetSession,
    SaveApproval,
    SaveResumeToken,
    SaveRow,
    SaveTopic,
    SaveTurn,
    SetTimer,
    StartLane,
    StartTurn,
    ToDriver,
    TouchRow,
)
from hostd.core.payload_bounds import fit_rows
from hostd.shell.connection import Connection
from hostd.shell.fanout import DEFAULT_REPLAY_SIZE, TopicStream, encoded_size, too_new_for
from hostd.shell.lanes import Lanes
from hostd.shell.runtime_protocol import Runtime
from hostd.shell.store import store as st
from hostd.shell.topic_driver import DriverLink
from hostd.shell.turns import TurnRunner
from hostd_protocol.client_messages import (
    AttachResult,
    ReplayEnd,
    Resync,
    SendResult,
    Snapshot,
    TopicDeleted,
    TopicEvent,
    TopicInfo,
    TurnEnded,
)
from hostd_protocol.common import AnswerTarget, Attachment, SendIntent, SessionSource
from hostd_protocol.driver_messages import (
    DriverEvent,
    HostCommand,
    Redirect,
    Send,
    TurnEnd,
)
from hostd_protocol.errors import DriverCrashed, HostdError, TopicClosed
from hostd_protocol.limits import MAX_REPLY_BYTES

if TYPE_CHECKING:
    from hostd.core.options import SessionOptions
    from hostd.shell.drivers.supervisor import DriverSession, Supervisor
    from hostd.shell.tracing import Tracing
    from hostd.shell.turns import TurnServices

log = logging.getLogger(__name__)


def new_id(prefix: str) -> str:
    """Ids that sort by creation time (ms) and do not collide: `r18c9f...-a1b2c3d4e5f6`."""
    return f"{prefix}{int(time.time() * 1000):x}{secrets.token_hex(6)}"


class TopicHost(DriverLink):
    """One live topic. Create, `await nursery.start(host.run)`, and `aclose()` to stop."""

    def __init__(
        self,
        info: TopicInfo,
        runtime: Runtime,
        *,
        writer: st.StoreWriter,
        supervisor: Supervisor,
        services: TurnServices,
        resume_token: str | None = None,
        replay_size: int = DEFAULT_REPLAY_SIZE,
        observe: Callable[[str, TopicEvent], None] | None = None,
        interrupt_grace: float = 3.0,
        tracing: Tracing | None = None,
    ) -> None:
        self.topic_id = info.id
        self.info = info
        self.runtime = runtime
        self.stream = TopicStream(info.id, runtime.seq, replay_size)
        self._writer = writer
        self._supervisor = supervisor
        self._services = services
        self._resume_token = resume_token
        #: A vendor session the topic's next session may start from (a fork's source, a
        #: rewind's checkpoint) while the topic has no resume token of its own.
        self._fork_from: SessionSource | None = None
        # Every emitted event (usage accounting, tracing).
        self._observe = observe
        #: The daemon's tracing observer (None: off): driver events, trace context.
        self.tracing = tracing
        #: Executes the running turn machine's effects (hostd.shell.turns).
        self.turns = TurnRunner(self, services)
        #: The extra lanes of a multi-answer turn (hostd.shell.lanes).
        self.lanes = Lanes(self)
        self._interrupt_grace = interrupt_grace
        self._ops_send, self._ops_recv = trio.open_memory_channel[
            tuple[str, HostCommand] | ResetSession
        ](math.inf)
        self._session: DriverSession | None = None
        #: The options the topic's session was last opened with: a driver that died between
        #: turns is replaced with these (`DriverLink._send_turn`).
        self._session_opts: SessionOptions | None = None
        #: The open session started without a resume token nor a vendor copy, and has had no
        #: turn yet: the vendor knows nothing of this topic, so its first turn is fed the
        #: stored history (`hostd.core.vendor_session.feeds_history`).
        self._fresh_session = False
        #: `ResetSession`s queued but not yet done: the next turn's session waits for them.
        self._resets_pending = 0
        self._resets_done = trio.Event()
        #: The turn whose Send each session (by key) was last given, and steers that came
        #: before it: a steer sent as a topic's first turn starts (its driver still opening)
        #: waits for that Send instead of failing the turn.
        self._sent_turn: dict[str, str] = {}
        self._early_steers: list[tuple[str, Redirect]] = []
        self._timers: dict[str, float] = {}
        self._timers_changed = trio.Event()
        self._idle = trio.Event()
        # Set (and replaced) whenever the running turn changes, chained turns included.
        self._turn_changed = trio.Event()
        self._last_turn = runtime.active_turn_id
        self._nursery: trio.Nursery | None = None
        self.closed = False
        if runtime.active_turn_id is None:
            self._idle.set()

    # --- lifetime -------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The host's tasks (driver commands, event pumps, timers) live here until aclose."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(self._driver_loop)
            task_status.started()
            # In this task, not a task of its own: one long-lived task fewer per topic for
            # every full GC pass to walk (it never returns; `aclose` cancels the nursery).
            await self._timer_loop()

    async def aclose(self) -> None:
        """Stop the host's tasks and close its driver session."""
        self.closed = True
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()
        with trio.CancelScope(shield=True):
            await self.lanes.aclose()
        session, self._session = self._session, None
        if session is not None:
            with trio.CancelScope(shield=True):
                try:
                    await self._supervisor.close(self.topic_id)
                except HostdError as exc:
                    log.warning("topic %s: closing the driver failed: %s", self.topic_id, exc)

    @property
    def active(self) -> bool:
        return self.runtime.active_turn_id is not None

    async def wait_idle(self) -> None:
        """Until no turn is running."""
        while self.runtime.active_turn_id is not None:
            await self._idle.wait()

    async def wait_turn_over(self, turn_id: str | None) -> None:
        """Until `turn_id` is no longer the running turn (it ended; another may have
        chained in)."""
        while turn_id is not None and self.runtime.active_turn_id == turn_id:
            await self._turn_changed.wait()

    def topic_info(self) -> TopicInfo:
        """The topic as clients see it now (state and seq are live)."""
        from msgspec import structs

        return structs.replace(self.info, state=self.runtime.state, seq=self.runtime.seq)

    # --- effects --------------------------------------------------------------------------

    def apply(self, effects: list[Effect]) -> int:
        """Carry out effects in order; returns the store generation a reply must wait for
        (0 when nothing durable was queued)."""
        if self.closed:
            # Deleted (or shut down): a late driver event or a queued command's failure must
            # not reach the windows (`topic-deleted` was their last event) nor the store
            # (the topic's rows are gone).
            return 0
        durable_gen = 0
        writer = self._writer
        tid = self.topic_id
        for eff in effects:
            if isinstance(eff, Emit):
                event = eff.event
                self.stream.publish(event)
                if self._observe is not None:
                    self._observe(tid, event)
                writer.put(st.PutSeq(tid, event.seq))
                if isinstance(event, TurnEnded):
                    machine = self.turns.machine
                    if machine is not None and machine.turn_id == event.turn_id:
                        self.turns.feed(
                            machine,
                            partial(
                                machine.turn_ended, event.status, event.error, event.error_code
                            ),
                        )
                    if self.lanes.by_lane:
                        self.lanes.end_all(event.status, event.error, event.error_code)
            elif isinstance(eff, TouchRow):
                writer.put(eff)  # a store op as it is (`store.ops`)
            elif isinstance(eff, SaveRow):
                gen = writer.put(st.PutRow(eff.row), durable=eff.durable)
                if eff.durable:
                    durable_gen = gen
            elif isinstance(eff, SaveTopic):
                self.info = eff.topic
                durable_gen = writer.put(st.PutTopic(eff.topic), durable=True)
            elif isinstance(eff, DeleteRow):
                durable_gen = writer.put(st.DeleteRow(eff.row_id), durable=True)
            elif isinstance(eff, SaveApproval):
                durable_gen = writer.put(st.PutApproval(eff.approval), durable=True)
            elif isinstance(eff, SaveResumeToken):
                self._resume_token = eff.token
                self._fork_from = None  # the topic has its own vendor session now
                durable_gen = writer.put(
                    st.PutResumeToken(tid, eff.token, time.time()), durable=True
                )
            elif isinstance(eff, SaveTurn):
                durable_gen = writer.put(
                    st.PutTurn(
                        tid,
                        eff.turn_id,
                        eff.status,
                        eff.error,
                        eff.error_code,
                        eff.resume_text,
                        time.time(),
                    ),
                    durable=True,
                )
            elif isinstance(eff, StartTurn):
                self._start_turn(eff.send)
            elif isinstance(eff, ToDriver) and eff.lane:
                lane_key = self.lanes.key_of(eff.lane)
                if lane_key is not None:  # else that lane is over: nothing listens
                    self._ops_send.send_nowait((lane_key, eff.command))
            elif isinstance(eff, StartLane):
                self.lanes.start(eff)
            elif isinstance(eff, ToDriver):
                machine = self.turns.machine
                key = machine.session_key if machine is not None and not machine.over else tid
                self._ops_send.send_nowait((key, eff.command))
            elif isinstance(eff, ResetSession):
                # The token goes now (a restart must not resume the cut conversation); the
                # session closes in order with the driver commands, before the next turn.
                self._resume_token = None
                self._fork_from = SessionSource(token=eff.resume_at) if eff.resume_at else None
                durable_gen = writer.put(st.PutResumeToken(tid, "", time.time()), durable=True)
                self._resets_pending += 1
                self._ops_send.send_nowait(eff)
            elif isinstance(eff, SetTimer):
                if eff.deadline is None:
                    self._timers.pop(eff.name, None)
                else:
                    self._timers[eff.name] = eff.deadline
                self._timers_changed.set()
            else:  # pragma: no cover - a new effect kind nobody taught the shell
                log.error("topic %s: unknown effect %r ignored", tid, eff)
        active = self.runtime.active_turn_id
        if active is None:
            self._idle.set()
        elif self._idle.is_set():
            self._idle = trio.Event()
        if active != self._last_turn:
            self._last_turn = active
            self._turn_changed.set()
            self._turn_changed = trio.Event()
        return durable_gen

    async def _commit(self, gen: int) -> None:
        if gen:
            await self._writer.wait_committed(gen)

    # --- client requests ------------------------------------------------------------------

    def _check_open(self) -> None:
        if self.closed:
            raise TopicClosed(f"topic {self.topic_id} is closed")

    async def send(
        self,
        text: str,
        intent: SendIntent,
        *,
        client_msg_id: str = "",
        options: dict[str, Any] | None = None,
        also: Sequence[AnswerTarget] = (),
        attachments: Sequence[Attachment] = (),
    ) -> SendResult:
        """Accept a user message; answered only once it is committed to the store."""
        self._check_open()
        result, effects = self.runtime.send(
            text,
            intent,
            trio.current_time(),
            client_msg_id=client_msg_id,
            options=options,
            also=also,
            attachments=attachments,
        )
        gen = self.apply(effects)
        # Even when the runtime marked nothing durable, the row must be on disk before the
        # client hears "sent".
        await self._writer.wait_committed(gen or None)
        return result

    async def _request(self, effects_of: Callable[[float], list[Effect]]) -> None:
        """A runtime request that only returns effects; answered once they are committed.
        A stop (or send-now) of the running turn also reaches its machine: a running hook
        is cancelled."""
        self._check_open()
        gen = self.apply(effects_of(trio.current_time()))
        self._stop_machine()
        await self._commit(gen)

    async def stop(self, row_id: str = "") -> None:
        """Stop the running turn, or only its answer `row_id` (that lane's machine hears it;
        the others go on)."""
        if not row_id:
            await self._request(self.runtime.stop)
            return
        self._check_open()
        gen = self.apply(self.runtime.stop(trio.current_time(), row_id=row_id))
        row = self.runtime.row(row_id)
        if row is not None and row.lane and not self.runtime.stopping:
            self.lanes.stop(row.lane)
        else:
            self._stop_machine(lane0=True)  # lane 0's answer, or the turn's one answer
        await self._commit(gen)

    async def answer_approval(
        self, approval_id: str, allow: bool, *, by: str = "", reason: str = "", option_id: str = ""
    ) -> None:
        answer = partial(
            self.runtime.answer_approval, approval_id, allow, by=by, reason=reason,
            option_id=option_id,
        )
        await self._request(answer)

    async def edit_queued(self, row_id: str, text: str) -> None:
        await self._request(partial(self.runtime.edit_queued, row_id, text))

    async def discard_queued(self, row_id: str) -> None:
        await self._request(partial(self.runtime.discard_queued, row_id))

    async def send_now(self, row_id: str) -> None:
        await self._request(partial(self.runtime.send_now, row_id))

    async def choose_answer(self, row_id: str) -> None:
        await self._request(partial(self.runtime.choose_answer, row_id))

    async def rename(self, title: str) -> None:
        await self._request(partial(self.runtime.rename, title))

    async def resume_queue(self) -> None:
        await self._request(self.runtime.resume_queue)

    async def _answer(self, result_and_effects: Callable[[float], tuple[Any, list[Effect]]]) -> Any:
        """A runtime request that returns `(result, effects)` (rewind, regenerate, resend);
        answered with the result once its effects are committed. A stop it asked for also
        reaches the running turn machine."""
        self._check_open()
        result, effects = result_and_effects(trio.current_time())
        gen = self.apply(effects)
        self._stop_machine()
        await self._writer.wait_committed(gen or None)
        return result

    def _stop_machine(self, *, lane0: bool = False) -> None:
        """After a request that asked the running turn (or `lane0`: its lane 0 answer alone)
        to stop: its machine hears it at once, before anything can await (a session closed
        meanwhile ends it `stopped`, not `error`), and a running hook is cancelled."""
        machine = self.turns.machine
        if machine is not None and not machine.over and (self.runtime.stopping or lane0):
            self.turns.feed(machine, machine.stop)
        if self.runtime.stopping:
            self.lanes.stop()  # also when lane 0 has ended and other lanes still run

    async def rewind(self, row_id: str, *, include: bool = False, stop: bool = False) -> list[str]:
        cut: list[str] = await self._answer(
            partial(self.runtime.rewind, row_id, include=include, stop=stop)
        )
        return cut

    async def regenerate(self, *, stop: bool = False, client_msg_id: str = "") -> SendResult:
        result: SendResult = await self._answer(
            partial(self.runtime.regenerate, stop=stop, client_msg_id=client_msg_id)
        )
        return result

    async def resend(
        self, row_id: str, text: str, *, stop: bool = False, client_msg_id: str = ""
    ) -> SendResult:
        result: SendResult = await self._answer(
            partial(self.runtime.resend, row_id, text, stop=stop, client_msg_id=client_msg_id)
        )
        return result

    def attach(self, conn: Connection, request_id: int, since: int | None, max_rows: int) -> None:
        """Reply to `Attach` and subscribe `conn`, in one synchronous step (no gap, no dup)."""
        self._check_open()
        self.stream.unsubscribe(conn)
        conn.attached.pop(self.topic_id, None)
        if since is None:
            snap: Snapshot = self.runtime.snapshot(max_rows)
            # Bounded in bytes (the newest rows that fit, the newest always, cut if needed),
            # so every topic can be attached however big its rows grew.
            rows, dropped = fit_rows(snap.rows, MAX_REPLY_BYTES, encoded_size(conn.encoding))
            if dropped or rows != snap.rows:
                snap = msgspec.structs.replace(snap, rows=rows, truncated=snap.truncated or dropped)
            result = AttachResult(topic_id=self.topic_id, mode="snapshot", snapshot=snap)
            if not conn.reply(request_id, result):
                return  # not subscribed: the window got an error reply instead
        else:
            conn.reply(request_id, AttachResult(topic_id=self.topic_id, mode="replay"))
            missed = self.stream.replay_since(since)
            reason = ""
            if missed is None and since > self.stream.last_seq:
                # Not a seq this topic handed out (yet): another topic's, or one lost with
                # the last flush interval when the daemon was killed. What the window holds
                # may not exist here.
                reason = (
                    f"seq {since} is ahead of this topic's last event (seq "
                    f"{self.stream.last_seq}): it is not from this topic, or the daemon lost "
                    "it in a crash; attach without since for a fresh snapshot"
                )
            elif missed is None:
                reason = (
                    f"events after seq {since} are no longer kept (the replay buffer reaches "
                    f"back to {self.stream.buffer.floor}); attach without since for a fresh "
                    "snapshot"
                )
            # A client too old for one of them (rows-removed) takes a snapshot instead.
            elif not (reason := too_new_for(conn, missed)) and not conn.push_events(missed):
                reason = (
                    f"the {len(missed)} events after seq {since} exceed this window's send "
                    "queue; attach without since for a fresh snapshot"
                )
            if reason:
                conn.send_message(
                    Resync(topic_id=self.topic_id, seq=self.stream.last_seq, reason=reason)
                )
                return
            conn.send_message(ReplayEnd(topic_id=self.topic_id, seq=self.stream.last_seq))
        self.stream.subscribe(conn)
        conn.attached[self.topic_id] = self.stream

    def detach(self, conn: Connection) -> None:
        self.stream.unsubscribe(conn)
        conn.attached.pop(self.topic_id, None)

    async def delete(self) -> None:
        """Stop any turn, tell the windows, forget the topic (store included)."""
        if self.runtime.active_turn_id is not None:
            try:
                self.apply(self.runtime.stop(trio.current_time()))
            except HostdError:
                pass
            # The turn ends here, as stopped (its driver is closed with the topic): windows
            # and observers get its one turn-end before topic-deleted, and nothing keeps
            # the finished topic alive waiting for it.
            self.apply(
                self.runtime.driver_lost(
                    DriverCrashed("the topic was deleted", driver=self.info.driver),
                    trio.current_time(),
                )
            )
        self.closed = True
        event = TopicDeleted(topic_id=self.topic_id, seq=self.runtime.seq + 1)
        self.stream.publish(event)
        for sub in self.stream.subscribers():
            self.stream.unsubscribe(sub)
            if isinstance(sub, Connection):
                sub.attached.pop(self.topic_id, None)
        gen = self._writer.put(st.DeleteTopic(self.topic_id), durable=True)
        await self.aclose()
        await self._writer.wait_committed(gen)

    # --- what the turn runner uses ----------------------------------------------------------

    def _start_turn(self, send: Send) -> None:
        from hostd.core.turn import TurnMachine

        services = self._services
        machine = TurnMachine(
            topic=self.info,
            send=send,
            workspaces=str(services.workspaces),
            now=time.time(),
            transcript=services.take_transcript(self.topic_id, self.runtime.row(send.message_id)),
            ask_retry=bool(services.observers.observers),
            prepare=services.observers.prepares,
        )
        self.turns.begin(machine)

    def start_soon(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> None:
        """Run a task in this host's nursery (it ends with the host)."""
        assert self._nursery is not None
        self._nursery.start_soon(fn, *args)

    def end_turn(self, end: TurnEnd) -> None:
        """Feed the machine's end of the turn to the runtime (it emits the one TurnEnded)."""
        if self.closed or self.runtime.active_turn_id != end.turn_id:
            return
        self.apply(self.runtime.driver_event(end, trio.current_time()))
        if self.runtime.active_turn_id is None:
            self._supervisor.mark_idle(self.topic_id)

    def feed_runtime(self, events: list[DriverEvent]) -> None:
        now = trio.current_time()
        for event in events:
            self.apply(self.runtime.driver_event(event, now))

    # --- timers ---------------------------------------------------------------------------

    async def _timer_loop(self) -> None:
        while True:
            changed = self._timers_changed = trio.Event()
            deadline = min(self._timers.values(), default=math.inf)
            with trio.move_on_at(deadline):
                await changed.wait()
                continue
            now = trio.current_time()
            self._timers = {k: v for k, v in self._timers.items() if v > now}
            self.apply(self.runtime.tick(now))


__all__ = ["Runtime", "TopicHost", "new_id"]
