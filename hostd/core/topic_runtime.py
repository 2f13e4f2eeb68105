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
`hostd.core.transcript`. The runtime's concepts each have a module beside it, mixed in here:
driver events and their table (`hostd.core.runtime_driver_events`), the queue
(`hostd.core.runtime_queue`), rewind / resend / fork (`hostd.core.runtime_rewind`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from hostd.core.effects import (
    Effect,
    SaveTopic,
    SaveTurn,
    StartTurn,
    ToDriver,
)
from hostd.core.rows import LiveRow, attachments_of
from hostd.core.runtime_approvals import APPROVAL_TIMER, ApprovalBook
from hostd.core.runtime_driver_events import DriverEventOps
from hostd.core.runtime_lanes import LaneOps, also_meta, also_of, check_also, steer_refusal
from hostd.core.runtime_outbox import NoticeLevel, Outbox
from hostd.core.runtime_queue import QueueOps
from hostd.core.runtime_rewind import RewindOps, rewind_target
from hostd.core.runtime_rows import UNSENT_STATUSES, RowBook
from hostd.core.runtime_turn import Steer, Turn
from hostd_protocol.client_messages import (
    ApprovalInfo,
    MessageRow,
    Rolled,
    SendDisposition,
    SendResult,
    Snapshot,
    StateChanged,
    TopicChanged,
    TopicInfo,
    TurnEnded,
    TurnStarted,
)
from hostd_protocol.common import (
    AnswerTarget,
    Attachment,
    Capabilities,
    CommandInfo,
    SendIntent,
    TextDelta,
    TopicState,
    TurnStatus,
)
from hostd_protocol.driver_messages import (
    Interrupt,
    Redirect,
    Send,
)
from hostd_protocol.errors import (
    InvalidArgument,
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


class TopicRuntime(RewindOps, QueueOps, DriverEventOps, LaneOps):
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
        #: The commands the driver offers, as last reported (kept in memory: a driver
        #: reports them again when its session starts).
        self._commands: list[CommandInfo] = []
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
            commands=self._commands,
        )

    def row(self, row_id: str) -> MessageRow | None:
        """The current row (for the store writer after `TouchRow`); None if it is gone."""
        live = self._book.get(row_id)
        return None if live is None else live.freeze()

    # --- client requests ------------------------------------------------------------------

    def send(
        self,
        text: str,
        intent: SendIntent,
        now: float,
        *,
        client_msg_id: str = "",
        options: dict[str, Any] | None = None,
        also: Sequence[AnswerTarget] = (),
        attachments: Sequence[Attachment] = (),
    ) -> tuple[SendResult, list[Effect]]:
        """Accept a user message: start a turn, steer the running one, or queue it. `also`
        asks more answers (a multi-answer turn, `hostd.core.runtime_lanes`).

        A resend with a known `client_msg_id` returns the first result and changes nothing.

        Raises:
            InvalidArgument: empty text, unknown intent, a bad `also`, or a steer of (or
                with) a multi-answer turn.
            TopicBusy: intent `start` while a turn runs.
        """
        turn = self._turn
        # A multi-answer turn, or a message asking several answers, is never steered.
        # Nor is one with images (a steer carries text only): it waits for the turn's end.
        multi = bool(also) or bool(attachments) or (turn is not None and bool(turn.lanes))
        if turn is None:
            phase = "waiting" if self.queued_row_ids() else "idle"
        else:
            phase = "steerable" if self._steerable(turn) and not multi else "busy"
        if (phase, intent) not in _SEND:
            raise InvalidArgument(
                f"unknown send intent {intent!r}; use one of start, steer, queue, auto"
            )
        if not text.strip():
            raise InvalidArgument("the message is empty; type some text to send")
        check_also(also)
        if client_msg_id and client_msg_id in self._sent:
            return self._sent[client_msg_id], []
        if attachments and intent == "steer":
            raise InvalidArgument("a message with images cannot steer (a steer is text only); queue it (intent queue or auto)")
        if turn is not None and multi and intent == "steer":
            raise steer_refusal(turn.id)
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
        if also:
            meta["also"] = also_meta(also)
        if attachments:
            meta["attachments"] = [msgspec.to_builtins(a) for a in attachments]
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

    def stop(self, now: float, *, row_id: str = "") -> list[Effect]:
        """Interrupt the running turn, or only its answer `row_id` (`LaneOps.stop_answer`).

        Open approvals are denied (status `cancelled`), queued messages and steers the model
        has not seen become drafts, and the driver gets `Interrupt`. The answer is kept as
        `stopped` when the driver's `TurnEnd` (or `driver_lost`) arrives. A second stop is a
        no-op.

        Raises:
            NothingToStop: no turn is running.
            NotFound, InvalidArgument: `row_id` is not an answer of the running turn.
        """
        if self._turn is None:
            raise NothingToStop(f"topic {self._tid} has no running turn to stop")
        if row_id and self._turn.lanes:
            return self.stop_answer(self._turn, row_id)
        if row_id:
            self._check_answer(self._turn, row_id)  # one answer: stopping it stops the turn
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
        also = also_of(user.base.meta)
        topic = self._topic
        # A multi-answer turn: lane 0 is the topic's own driver, then `also` in order.
        lanes = (
            [AnswerTarget(assistant=topic.assistant, driver=topic.driver, model=topic.model), *also]
            if also
            else []
        )
        self._out.add(SaveTurn(turn_id, None))
        self._out.event(
            TurnStarted,
            turn_id=turn_id,
            driver=topic.driver,
            model=topic.model,
            capabilities=self._caps,
            capabilities_known=self._caps_known,
            lanes=lanes,
        )
        self._open_answer(turn, **({"target": lanes[0]} if lanes else {}))
        options = user.base.meta.get("options")
        attachments = attachments_of(user.base.meta)
        # Capabilities not known yet (the first turn after a daemon restart): the history
        # goes along, and the turn drops it once the opened session says it needs none.
        wants_history = self._caps.needs_history or not self._caps_known
        history = self._book.history_before(user.position) if wants_history else []
        send = Send(
            turn_id=turn_id,
            text=text,
            message_id=user.id,
            history=history,
            options=dict(options) if isinstance(options, dict) else {},
            attachments=attachments,
        )
        self._out.add(StartTurn(turn_id, send))
        if lanes:
            self._open_lanes(turn, lanes, send, user.position)

    def _open_row(self, **fields: Any) -> LiveRow:
        """Create a row (new id, timestamps), store it durably and show it to the windows."""
        ts = self._wall()
        row = MessageRow(
            id=self._new_id("r"), topic_id=self._tid, created_at=ts, updated_at=ts, **fields
        )
        self._out.row_opened(row)
        return self._book.add(row)

    def _open_answer(self, turn: Turn, **fields: Any) -> LiveRow:
        """A new pending assistant row for `turn`, after everything placed so far; every
        chunk of the turn (of its lane 0) goes there from now on."""
        answer = self._open_row(
            role="assistant",
            status="pending",
            position=self._book.place(),
            turn_id=turn.id,
            **fields,
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
        # Lane 0 may have ended already, or been stopped alone (`stop_answer`).
        if not turn.lanes or (turn.lanes[0].status is None and not turn.lanes[0].stopping):
            self._out.add(ToDriver(Interrupt(turn_id=turn.id)))
        self._stop_lanes(turn)

    def _end_turn(self, turn: Turn, status: TurnStatus, error: str, error_code: str) -> None:
        """The one exit of every turn: rows final, approvals closed, record saved, TurnEnded.
        A multi-answer turn ends here once its last lane has ended (`_end_lane`); lanes still
        running end with `status` (`_settle_lanes`)."""
        # Steers the model saw but did not answer in a new message: the model has them, so
        # history shows them after the answer. Steers it never saw stay queued: next turns.
        for steer in turn.take_all():
            if steer.injected:
                self._place_steer(turn, steer)
        if turn.lanes:
            status, error, error_code = self._settle_lanes(turn, status, error, error_code)
        else:
            answer = self._book[turn.row_id]
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

    # --- helpers --------------------------------------------------------------------------

    def _done(self) -> list[Effect]:
        """Announce a state change (once per request, after its other events); hand over."""
        state = self.state
        if state != self._announced:
            self._announced = state
            self._out.event(StateChanged, state=state)
        return self._out.take()
