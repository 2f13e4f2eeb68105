"""The topic runtime: what happens to one topic while users send, steer, stop and approve and
a driver streams. A pure, synchronous state machine (sans-IO): inputs are client requests,
driver events and time (`now`, monotonic seconds); outputs are `hostd.core.effects.Effect`
values that the trio shell carries out in list order. DESIGN.md invariants 1-7 are its spec.

Rules this file guards:

1. Every `Emit` carries the next `seq` (see `hostd.core.runtime_outbox`). A request that raises
   changed nothing: all checks come before the first change.
2. A turn has exactly one `TurnStarted` and one `TurnEnded`, whatever ends it (driver
   `TurnEnd`, `DriverFatal`, `driver_lost`): `_end_turn` is its only exit. `SaveTurn` is
   written at both ends; `resume_text` only when the turn did not succeed. A turn with no
   output at all ends with `empty=True`.
3. Sending names its intent; the `_SEND` table says what each intent does in each phase.
4. Every accepted message is exactly one row; none is lost, duplicated or reordered. A steer
   is placed into history at its boundary (A1a, U2, A2), or after the answer when the turn
   ends after the model saw it; otherwise its row stays `queued` and runs as a next turn in
   acceptance order. Stop turns every unsent message into a draft.
5. The queue runs by itself after a turn that succeeded or that a user stopped; after an error
   or a crash it waits, with a notice, for the next successful turn, `send_now` or
   `resume_queue`, so one failure does not burn through every queued message.
6. `compacting` never outlives its turn; compaction events without a running turn are ignored.
7. Approvals are open only while their turn runs (see `hostd.core.runtime_approvals`).
8. Driver events for a turn that is not running are ignored (no effects), never an error.

Positions are explained in `hostd.core.runtime_rows`; the rules windows rebuild rows by in
`hostd.core.transcript`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import msgspec

from hostd.core.effects import (
    DeleteRow,
    Effect,
    Emit,
    SaveResumeToken,
    SaveTopic,
    SaveTurn,
    StartTurn,
    ToDriver,
    TouchRow,
)
from hostd.core.rows import LiveRow
from hostd.core.runtime_approvals import APPROVAL_TIMER, ApprovalBook
from hostd.core.runtime_outbox import NoticeLevel, Outbox
from hostd.core.runtime_rewind import RewindOps, rewind_target
from hostd.core.runtime_rows import UNSENT_STATUSES, RowBook
from hostd.core.runtime_turn import Steer, Turn
from hostd_protocol.client_messages import (
    ApprovalInfo,
    DriverReady,
    MessageRow,
    Rolled,
    RowAppended,
    RowRemoved,
    SendDisposition,
    SendResult,
    Snapshot,
    StateChanged,
    TopicChanged,
    TopicInfo,
    TurnEnded,
    TurnStarted,
    UsageUpdated,
)
from hostd_protocol.common import (
    Capabilities,
    Chunk,
    SendIntent,
    TextDelta,
    TopicState,
    TurnStatus,
)
from hostd_protocol.driver_messages import (
    ApiRetry,
    ApprovalRequest,
    ChunkEvent,
    CompactionComplete,
    CompactionError,
    CompactionStart,
    DriverEvent,
    DriverFatal,
    Interrupt,
    Log,
    Notice,
    Ready,
    Redirect,
    ResumeToken,
    Send,
    SteerBoundary,
    SteerInjected,
    SteerUndelivered,
    TurnEnd,
    UsageEvent,
    Warmed,
)
from hostd_protocol.errors import (
    DriverTurnError,
    HostdError,
    InvalidArgument,
    NotFound,
    NothingToStop,
    TopicBusy,
)

__all__ = ["APPROVAL_TIMER", "TopicRuntime"]

# What a send does, by the topic's phase and the send's intent (None: refused, TopicBusy).
#   idle       no turn runs and no queued row waits
#   waiting    no turn runs, queued rows wait (after a restart, or a paused queue)
#   steerable  a turn runs and takes steers (driver injects; not stopping, not compacting)
#   busy       a turn runs and cannot take a steer now
_SEND: dict[tuple[str, str], SendDisposition | None] = {
    ("idle", "start"): "started",
    ("idle", "steer"): "started",  # the turn it was meant for just ended: run it
    ("idle", "queue"): "started",
    ("idle", "auto"): "started",
    ("waiting", "start"): "started",
    ("waiting", "steer"): "started",
    ("waiting", "queue"): "queued",
    ("waiting", "auto"): "started",
    ("steerable", "start"): None,
    ("steerable", "steer"): "steered",
    ("steerable", "queue"): "queued",
    ("steerable", "auto"): "steered",
    ("busy", "start"): None,
    ("busy", "steer"): "queued",
    ("busy", "queue"): "queued",
    ("busy", "auto"): "queued",
}


# Which turn a driver event must name to be applied: "none" (any time), "match" (the running
# turn), "match-or-blank" (the running turn; a blank turn_id means the running one).
_TurnRule = Literal["none", "match", "match-or-blank"]


class TopicRuntime(RewindOps):
    """Everything that happens to one topic, as a pure synchronous state machine.

    Every method returns the effects to carry out, in order, or raises a typed
    `hostd_protocol.errors` error (TopicBusy, NothingToStop, NotFound, AlreadyAnswered,
    InvalidArgument) having changed nothing.

    Args:
        topic: The topic record.
        rows: Stored rows after reconcile (no `pending` rows), queued and draft rows included.
        approvals: Stored approvals. Open ones belong to a turn that no longer runs, so the
            runtime treats them as cancelled (reconcile should have stored that).
        last_seq: The topic's last event seq; the first event emitted gets `last_seq + 1`.
        new_id: Makes unique ids from a prefix ("r" rows, "t" turns, "s" steers).
        wall: Wall-clock seconds for `created_at` / `updated_at`.
        capabilities: The driver's, if already known (else from `driver_ready` / `Ready`).
        approval_timeout: Seconds an approval may stay unanswered before it is denied.
    """

    def __init__(
        self,
        topic: TopicInfo,
        rows: list[MessageRow],
        approvals: list[ApprovalInfo],
        last_seq: int,
        *,
        new_id: Callable[[str], str],
        wall: Callable[[], float],
        capabilities: Capabilities | None = None,
        approval_timeout: float = 600.0,
    ) -> None:
        self._topic = topic
        self._tid = topic.id
        self._new_id = new_id
        self._wall = wall
        self._caps = capabilities or Capabilities()
        #: False until a driver handshake said what it can do (`TurnStarted` tells windows).
        self._caps_known = capabilities is not None
        self._out = Outbox(topic.id, last_seq, wall)
        self._book = RowBook(rows)
        self._approvals = ApprovalBook(topic.id, approvals, approval_timeout)
        self._turn: Turn | None = None
        #: The row `send_now` picked to run when the current turn has ended.
        self._next_up: str | None = None
        self._announced: TopicState = "idle"
        self.last_rewound: list[str] = []
        #: Results by client_msg_id, so a resend is not stored twice.
        self._sent: dict[str, SendResult] = {}
        for row in rows:
            key = row.meta.get("client_msg_id")
            if isinstance(key, str) and key:
                self._sent[key] = SendResult(
                    row_id=row.id,
                    disposition="queued" if row.status in UNSENT_STATUSES else "started",
                    turn_id=row.turn_id,
                    position=row.position,
                )

    # --- queries --------------------------------------------------------------------------

    @property
    def state(self) -> TopicState:
        if self._turn is None:
            return "idle"
        return "compacting" if self._turn.compacting else "answering"

    @property
    def active_turn_id(self) -> str | None:
        return None if self._turn is None else self._turn.id

    @property
    def stopping(self) -> bool:
        """A user asked to stop the running turn (it ends at the driver's TurnEnd)."""
        return self._turn is not None and self._turn.stopping

    @property
    def seq(self) -> int:
        return self._out.seq

    @property
    def capabilities(self) -> Capabilities:
        return self._caps

    def topic_info(self) -> TopicInfo:
        """The topic record with the current state and seq."""
        return msgspec.structs.replace(self._topic, state=self.state, seq=self._out.seq)

    def snapshot(self, max_rows: int = 500) -> Snapshot:
        """Rows (newest `max_rows`, by position), open approvals, state, seq: consistent."""
        ordered = self._book.ordered()
        truncated = len(ordered) > max_rows
        if truncated:
            ordered = ordered[len(ordered) - max_rows :]
        return Snapshot(
            topic=self.topic_info(),
            seq=self._out.seq,
            rows=[r.freeze() for r in ordered],
            approvals=self._approvals.open(),
            active_turn_id=self._turn.id if self._turn else "",
            truncated=truncated,
        )

    def row(self, row_id: str) -> MessageRow | None:
        """The current row (for the store writer after `TouchRow`); None if it is gone."""
        live = self._book.get(row_id)
        return None if live is None else live.freeze()

    def queued_row_ids(self) -> list[str]:
        """Queued rows in the order they will run (steers in flight and drafts excluded)."""
        steering = self._steer_rows()
        return [r.id for r in self._book.queued() if r.id not in steering]

    # --- client requests ------------------------------------------------------------------

    def send(
        self,
        text: str,
        intent: SendIntent,
        now: float,
        *,
        client_msg_id: str = "",
        options: dict[str, Any] | None = None,
    ) -> tuple[SendResult, list[Effect]]:
        """Accept a user message: start a turn, steer the running one, or queue it.

        A resend with a known `client_msg_id` returns the first result and changes nothing.

        Raises:
            InvalidArgument: empty text or unknown intent.
            TopicBusy: intent `start` while a turn runs.
        """
        turn = self._turn
        if turn is None:
            phase = "waiting" if self.queued_row_ids() else "idle"
        else:
            phase = "steerable" if self._steerable(turn) else "busy"
        if (phase, intent) not in _SEND:
            raise InvalidArgument(
                f"unknown send intent {intent!r}; use one of start, steer, queue, auto"
            )
        if not text.strip():
            raise InvalidArgument("the message is empty; type some text to send")
        if client_msg_id and client_msg_id in self._sent:
            return self._sent[client_msg_id], []
        disposition = _SEND[phase, intent]
        if disposition is None:
            assert turn is not None
            raise TopicBusy(
                f"topic {self._tid} is answering (turn {turn.id}); send with intent "
                "steer, queue or auto, or stop the turn first"
            )

        meta: dict[str, Any] = {}
        if client_msg_id:
            meta["client_msg_id"] = client_msg_id
        if options:
            meta["options"] = dict(options)
        # A message that starts a turn goes straight into history; any other waits unsent.
        starting = disposition == "started"
        turn_id = self._new_id("t") if starting else ""
        live = self._open_row(
            role="user",
            status="success" if starting else "queued",
            position=self._book.place() if starting else self._book.unsent_position(),
            turn_id=turn_id,
            parts=[TextDelta(text=text)],
            meta=meta,
        )
        if starting:
            self._start_turn(live, turn_id)
        elif disposition == "steered":
            assert turn is not None
            steer = Steer(steer_id=self._new_id("s"), row_id=live.id)
            turn.steers.append(steer)
            self._out.add(ToDriver(Redirect(turn_id=turn.id, steer_id=steer.steer_id, text=text)))
        result = SendResult(
            row_id=live.id, disposition=disposition, turn_id=turn_id, position=live.position
        )
        if client_msg_id:
            self._sent[client_msg_id] = result
        return result, self._done()

    def stop(self, now: float) -> list[Effect]:
        """Interrupt the running turn.

        Open approvals are denied (status `cancelled`), queued messages and steers the model
        has not seen become drafts, and the driver gets `Interrupt`. The answer is kept as
        `stopped` when the driver's `TurnEnd` (or `driver_lost`) arrives. A second stop is a
        no-op.

        Raises:
            NothingToStop: no turn is running.
        """
        if self._turn is None:
            raise NothingToStop(f"topic {self._tid} has no running turn to stop")
        if not self._turn.stopping:
            self._begin_stop(self._turn)
        return self._done()

    def answer_approval(
        self,
        approval_id: str,
        allow: bool,
        now: float,
        *,
        by: str = "",
        reason: str = "",
        option_id: str = "",
    ) -> list[Effect]:
        """Answer an open approval; the first answer wins.

        Raises:
            NotFound: no such approval in this topic.
            AlreadyAnswered: it was answered, timed out or cancelled before.
            InvalidArgument: `option_id` is not one of its options, or its kind contradicts
                `allow`.
        """
        info = self._approvals.check_answerable(approval_id)
        if option_id:
            option = next((o for o in info.options if o.id == option_id), None)
            if option is None:
                offered = ", ".join(o.id for o in info.options) or "none"
                raise InvalidArgument(
                    f"approval {approval_id} has no option {option_id!r} (options: {offered})"
                )
            if option.allows != allow:
                raise InvalidArgument(
                    f"option {option_id!r} ({option.kind or 'no kind'}) does not "
                    f"{'allow' if allow else 'deny'}"
                )
        self._approvals.resolve(
            approval_id,
            "allowed" if allow else "denied",
            self._out,
            by=by,
            reason=reason,
            option_id=option_id,
        )
        self._approvals.arm(self._out)
        return self._done()

    def edit_queued(self, row_id: str, text: str, now: float) -> list[Effect]:
        """Replace the text of a queued or draft row.

        Raises:
            NotFound: no such row.
            InvalidArgument: the row was sent already, or the text is empty.
        """
        live = self._unsent_row(row_id, "edited")
        if not text.strip():
            raise InvalidArgument("the new text is empty; discard the message instead")
        parts: list[Chunk] = [TextDelta(text=text)]
        self._out.row_changed(live, parts=parts)
        return self._done()

    def discard_queued(self, row_id: str, now: float) -> list[Effect]:
        """Remove a queued or draft row.

        Raises:
            NotFound: no such row.
            InvalidArgument: the row was sent already.
        """
        self._unsent_row(row_id, "discarded")
        self._book.remove(row_id)
        if self._next_up == row_id:
            self._next_up = None
        self._out.add(DeleteRow(row_id))
        self._out.event(RowRemoved, row_id=row_id)
        return self._done()

    def send_now(self, row_id: str, now: float) -> list[Effect]:
        """Run a queued or draft row next: at once when idle, else stop the running turn and
        run the row when that turn has ended (never lost on the way: it stays `queued`).

        Raises:
            NotFound: no such row.
            InvalidArgument: the row was sent already.
        """
        live = self._unsent_row(row_id, "sent now")
        turn = self._turn
        if turn is None:
            self._start_turn(live)
        else:
            if live.status == "draft":
                self._out.row_changed(live, status="queued")
            self._next_up = row_id
            if not turn.stopping:
                self._begin_stop(turn)
        return self._done()

    def resume_queue(self, now: float) -> list[Effect]:
        """Start the oldest queued row if no turn runs (after a restart, or a paused queue)."""
        queued = self.queued_row_ids()
        if self._turn is None and queued:
            self._start_turn(self._book[queued[0]])
        return self._done()

    def notice(
        self, code: str, message: str, level: NoticeLevel = "info", now: float = 0.0
    ) -> list[Effect]:
        """Tell the windows something about the topic that is not part of the answer (the
        shell's own news, e.g. the store failing); changes nothing else."""
        self._out.notice(code, message, level)
        return self._done()

    def rename(self, title: str, now: float) -> list[Effect]:
        """Change the topic title."""
        self._topic = msgspec.structs.replace(self._topic, title=title, updated_at=self._wall())
        self._out.add(SaveTopic(self._topic))
        topic = msgspec.structs.replace(self._topic, state=self.state, seq=self._out.seq + 1)
        self._out.event(TopicChanged, topic=topic)
        return self._done()

    # --- driver side ----------------------------------------------------------------------

    def driver_ready(self, capabilities: Capabilities, now: float) -> list[Effect]:
        """A driver session for this topic (re)started with these capabilities."""
        self._set_capabilities(capabilities)
        return self._done()

    def _set_capabilities(self, capabilities: Capabilities) -> None:
        # Windows learn them from `DriverReady` when they were unknown or changed: a topic's
        # first turn starts before its driver is up.
        if self._caps_known and capabilities == self._caps:
            return
        self._caps = capabilities
        self._caps_known = True
        self._out.event(DriverReady, capabilities=capabilities)

    def driver_event(self, event: DriverEvent, now: float) -> list[Effect]:
        """Apply one driver event. Events for a turn that is not running are ignored."""
        entry = _DRIVER_TABLE.get(type(event))
        if entry is None:
            return self._done()
        handler, rule = entry
        turn = self._turn
        if rule != "none":
            named: str = getattr(event, "turn_id", "")
            if turn is None or not (named == turn.id or (rule == "match-or-blank" and not named)):
                return self._done()  # a stray event of an ended (or never started) turn
        handler(self, event, turn, now)
        return self._done()

    def driver_lost(self, error: HostdError, now: float) -> list[Effect]:
        """The driver crashed or could not be opened, or the shell failed to set the turn up.

        A running turn ends as `error` with `str(error)` (which includes the stderr tail), or as
        `stopped` if a stop was already asked for; the partial answer is kept either way.
        """
        turn = self._turn
        if turn is not None:
            if turn.stopping:
                self._end_turn(turn, "stopped", "", "")
            else:
                self._end_turn(turn, "error", str(error), error.code)
        return self._done()

    def tick(self, now: float) -> list[Effect]:
        """Timers: deny every approval whose deadline has passed."""
        self._approvals.expire(now, self._out)
        return self._done()

    # --- driver event handlers (see _DRIVER_TABLE) ----------------------------------------

    def _on_ready(self, ev: Ready, turn: Turn | None, now: float) -> None:
        self._set_capabilities(ev.capabilities)

    def _on_chunk(self, ev: ChunkEvent, turn: Turn, now: float) -> None:
        # The hot path: no row copy, no store write; the store reads the row at flush time.
        live = self._book[turn.row_id]
        if live.append(ev.chunk):
            turn.output = True
            out = self._out
            out.seq += 1
            out.effects.append(
                Emit(RowAppended(topic_id=self._tid, seq=out.seq, row_id=live.id, chunk=ev.chunk))
            )
            out.effects.append(TouchRow(live.id))

    def _on_injected(self, ev: SteerInjected, turn: Turn, now: float) -> None:
        turn.mark_injected(ev.steer_id)

    def _on_boundary(self, ev: SteerBoundary, turn: Turn, now: float) -> None:
        rolling = turn.take_rolling(set(ev.steer_ids))
        if rolling:
            self._roll(turn, rolling)

    def _on_undelivered(self, ev: SteerUndelivered, turn: Turn, now: float) -> None:
        for steer in turn.take_named(set(ev.steer_ids)):
            # Its row is already `queued` at its acceptance position, so it runs as a next
            # turn. After a stop it goes back to the windows instead, like every unsent steer.
            if turn.stopping:
                self._out.row_changed(self._book[steer.row_id], status="draft")

    def _on_compaction_start(self, ev: CompactionStart, turn: Turn, now: float) -> None:
        turn.compacting = True

    def _on_compaction_complete(self, ev: CompactionComplete, turn: Turn, now: float) -> None:
        anchor = ev.anchor
        if not turn.finish_compaction(anchor):
            return  # no boundary details, or a repeated completion
        self._open_row(
            role="marker",
            status="success",
            position=self._book.place(),
            turn_id=turn.id,
            anchor=anchor,
        )
        answer = self._book[turn.row_id]
        if not answer.parts:
            # Compaction before the answer said anything: the answer reads after the marker.
            self._out.row_changed(answer, position=self._book.place())

    def _on_compaction_error(self, ev: CompactionError, turn: Turn, now: float) -> None:
        if turn.compacting:  # else a duplicate: the first one already told the windows
            turn.compacting = False
            reason = ev.message or "the driver gave no reason"
            self._out.notice("compaction_failed", f"compaction failed: {reason}", "error")

    def _on_approval(self, ev: ApprovalRequest, turn: Turn, now: float) -> None:
        if ev.approval_id in self._approvals:
            return  # a duplicate request: the first one is open or answered
        info = ApprovalInfo(
            id=ev.approval_id,
            topic_id=self._tid,
            turn_id=turn.id,
            tool=ev.tool,
            input=ev.input,
            description=ev.description,
            created_at=self._wall(),
            options=list(ev.options),
        )
        if turn.stopping:
            # Deny at once so the driver is not left waiting while it stops.
            self._approvals.refuse(info, "the turn was stopped", self._out)
        else:
            self._approvals.request(info, now, self._out)

    def _on_usage(self, ev: UsageEvent, turn: Turn, now: float) -> None:
        self._out.event(UsageUpdated, turn_id=turn.id, usage=ev.usage)

    def _on_resume_token(self, ev: ResumeToken, turn: Turn | None, now: float) -> None:
        self._out.add(SaveResumeToken(ev.token))

    def _on_api_retry(self, ev: ApiRetry, turn: Turn | None, now: float) -> None:
        status = f" (HTTP {ev.error_status})" if ev.error_status is not None else ""
        message = (
            f"the model API request failed{status}; retry {ev.attempt} of {ev.max_retries} "
            f"in {ev.retry_delay_ms / 1000:g} s"
        )
        self._out.notice("api_retry", message, "warning")

    def _on_notice(self, ev: Notice, turn: Turn | None, now: float) -> None:
        self._out.notice(ev.code, ev.message, "warning")

    def _on_turn_end(self, ev: TurnEnd, turn: Turn, now: float) -> None:
        error, code = ev.error, ev.error_code
        if ev.status == "error":
            # Never a bare "error": the user must see that it failed and where to look.
            error = error or (
                f"the {self._topic.driver or 'topic'} driver ended the turn with an error but "
                "gave no reason; see the daemon log"
            )
            code = code or DriverTurnError.code
        self._end_turn(turn, ev.status, error, code)

    def _on_fatal(self, ev: DriverFatal, turn: Turn | None, now: float) -> None:
        if turn is not None:
            self._end_turn(turn, "stopped" if turn.stopping else "error", ev.message, ev.code)

    def _on_nothing(self, ev: object, turn: Turn | None, now: float) -> None:
        pass

    # --- transitions ----------------------------------------------------------------------

    def _steerable(self, turn: Turn) -> bool:
        # Before the driver's Ready (a topic's first turn) its capabilities are unknown: the
        # steer goes to the driver all the same. One that cannot inject hands it back as
        # undelivered at the turn's end and it runs as the next turn, which is what "queued"
        # would have done; one that can inject gets it mid-turn, as promised (DESIGN inv. 4).
        can_inject = self._caps.inject_steering or not self._caps_known
        return can_inject and not turn.stopping and not turn.compacting

    def _start_turn(self, user: LiveRow, turn_id: str = "") -> None:
        """Start a turn answering `user`, placing it into history first if it is unsent."""
        if self._next_up == user.id:
            self._next_up = None
        if user.status in UNSENT_STATUSES:
            turn_id = self._new_id("t")
            position = self._book.place()
            self._out.row_changed(user, status="success", position=position, turn_id=turn_id)
        text = user.parts.text()
        turn = self._turn = Turn(id=turn_id, row_id="", texts=[text])
        self._out.add(SaveTurn(turn_id, None))
        self._out.event(
            TurnStarted,
            turn_id=turn_id,
            driver=self._topic.driver,
            model=self._topic.model,
            capabilities=self._caps,
            capabilities_known=self._caps_known,
        )
        self._open_answer(turn)
        options = user.base.meta.get("options")
        history = self._book.history_before(user.position) if self._caps.needs_history else []
        send = Send(
            turn_id=turn_id,
            text=text,
            message_id=user.id,
            history=history,
            options=dict(options) if isinstance(options, dict) else {},
        )
        self._out.add(StartTurn(turn_id, send))

    def _open_row(self, **fields: Any) -> LiveRow:
        """Create a row (new id, timestamps), store it durably and show it to the windows."""
        ts = self._wall()
        row = MessageRow(
            id=self._new_id("r"), topic_id=self._tid, created_at=ts, updated_at=ts, **fields
        )
        self._out.row_opened(row)
        return self._book.add(row)

    def _open_answer(self, turn: Turn) -> LiveRow:
        """A new pending assistant row for `turn`, after everything placed so far; every
        chunk of the turn goes there from now on."""
        answer = self._open_row(
            role="assistant", status="pending", position=self._book.place(), turn_id=turn.id
        )
        turn.row_id = answer.id
        return answer

    def _place_steer(self, turn: Turn, steer: Steer) -> None:
        user = self._book[steer.row_id]
        position = self._book.place()
        self._out.row_changed(user, status="success", position=position, turn_id=turn.id)
        turn.texts.append(user.parts.text())

    def _roll(self, turn: Turn, steers: list[Steer]) -> None:
        """Close the answer so far (A1a), place the steers (U2 ...), open A2 for the rest.
        The steers have left flight already (`Turn.take_rolling`)."""
        closed = self._book[turn.row_id]
        self._out.row_changed(closed, status="success", empty=True if not closed.parts else None)
        for steer in steers:
            self._place_steer(turn, steer)
        answer = self._open_answer(turn)
        self._out.event(
            Rolled,
            turn_id=turn.id,
            closed_row_id=closed.id,
            steer_row_ids=[s.row_id for s in steers],
            new_row_id=answer.id,
        )

    def _begin_stop(self, turn: Turn) -> None:
        turn.stopping = True
        self._approvals.close_turn(turn.id, "the turn was stopped", self._out, tell_driver=True)
        # Steers the model has not seen, and queued messages, go back to the windows.
        for steer in turn.take_unseen():
            self._out.row_changed(self._book[steer.row_id], status="draft")
        for row_id in self.queued_row_ids():
            if row_id != self._next_up:
                self._out.row_changed(self._book[row_id], status="draft")
        self._out.add(ToDriver(Interrupt(turn_id=turn.id)))

    def _end_turn(self, turn: Turn, status: TurnStatus, error: str, error_code: str) -> None:
        """The one exit of every turn: rows final, approvals closed, record saved, TurnEnded."""
        answer = self._book[turn.row_id]
        # Steers the model saw but did not answer in a new message: the model has them, so
        # history shows them after the answer. Steers it never saw stay queued: next turns.
        for steer in turn.take_all():
            if steer.injected:
                self._place_steer(turn, steer)
        self._out.row_changed(
            answer,
            status=status,
            error=error or None,
            error_code=error_code or None,
            empty=True if not answer.parts else None,
        )
        self._approvals.close_turn(turn.id, "the turn ended", self._out, tell_driver=False)
        resume = "\n\n".join(t for t in turn.texts if t) if status != "success" else ""
        self._out.add(SaveTurn(turn.id, status, error, error_code, resume))
        self._out.event(
            TurnEnded,
            turn_id=turn.id,
            status=status,
            error=error,
            error_code=error_code,
            empty=not turn.output,
        )
        self._turn = None
        if turn.rewind_to is not None:
            row_id, include = turn.rewind_to
            if row_id in self._book:
                self._cut(rewind_target(self._book, self._tid, row_id, include))
        self._chain(turn, status)

    def _chain(self, ended: Turn, status: TurnStatus) -> None:
        """Start the next turn: the `send_now` pick, else the queue head when allowed."""
        pick = self._book.get(self._next_up) if self._next_up else None
        self._next_up = None
        if pick is not None and pick.status in UNSENT_STATUSES:
            self._start_turn(pick)
            return
        queued = self.queued_row_ids()
        if not queued:
            return
        if status == "success" or ended.stopping:
            self._start_turn(self._book[queued[0]])
            return
        self._out.notice(
            "queue_paused",
            f"{len(queued)} queued message(s) wait because the last turn ended with "
            f"{status}; they run after the next turn that succeeds, or use send-now",
            "warning",
        )

    # --- helpers --------------------------------------------------------------------------

    def _done(self) -> list[Effect]:
        """Announce a state change (once per request, after its other events); hand over."""
        state = self.state
        if state != self._announced:
            self._announced = state
            self._out.event(StateChanged, state=state)
        return self._out.take()

    def _steer_rows(self) -> set[str]:
        return self._turn.steer_rows() if self._turn else set()

    def _unsent_row(self, row_id: str, verb: str) -> LiveRow:
        live = self._book.get(row_id)
        if live is None:
            raise NotFound(f"row {row_id} does not exist in topic {self._tid}")
        if row_id in self._steer_rows():
            raise InvalidArgument(
                f"row {row_id} was already handed to the driver as a steer and cannot be "
                f"{verb}; it joins the answer or runs as the next turn"
            )
        if live.status not in UNSENT_STATUSES:
            raise InvalidArgument(
                f"row {row_id} is {live.status}; only queued or draft messages can be {verb}"
            )
        return live


_Handler = Callable[[TopicRuntime, Any, Any, float], None]

#: The driver-event transition table: event type -> (handler, which turn it must name).
_DRIVER_TABLE: dict[type[Any], tuple[_Handler, _TurnRule]] = {
    Ready: (TopicRuntime._on_ready, "none"),
    Warmed: (TopicRuntime._on_nothing, "none"),
    Log: (TopicRuntime._on_nothing, "none"),
    ResumeToken: (TopicRuntime._on_resume_token, "none"),
    ApiRetry: (TopicRuntime._on_api_retry, "none"),
    Notice: (TopicRuntime._on_notice, "none"),
    DriverFatal: (TopicRuntime._on_fatal, "none"),
    ChunkEvent: (TopicRuntime._on_chunk, "match"),
    SteerInjected: (TopicRuntime._on_injected, "match"),
    SteerBoundary: (TopicRuntime._on_boundary, "match"),
    SteerUndelivered: (TopicRuntime._on_undelivered, "match"),
    ApprovalRequest: (TopicRuntime._on_approval, "match"),
    UsageEvent: (TopicRuntime._on_usage, "match"),
    TurnEnd: (TopicRuntime._on_turn_end, "match"),
    CompactionStart: (TopicRuntime._on_compaction_start, "match-or-blank"),
    CompactionComplete: (TopicRuntime._on_compaction_complete, "match-or-blank"),
    CompactionError: (TopicRuntime._on_compaction_error, "match-or-blank"),
}
