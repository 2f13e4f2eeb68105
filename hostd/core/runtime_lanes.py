"""Multi-answer turns: several drivers or models answering one message, each in its own lane.

Rules it guards:

- A send's `also` names the extra answerers (at most `MAX_ALSO`, each naming someone). Its
  turn gets lanes: lane 0 is the topic's own driver (its own session; its row is
  `Turn.row_id`), lanes 1.. each answer in a row of their own, opened when the turn starts at
  the positions right after lane 0's, and run in a fresh session each (`StartLane`) that is
  fed the topic's visible history.
- Each lane ends once, by its own end (its driver's `TurnEnd` or `DriverFatal`, or the shell
  losing its session): its row gets its final status, error and usage, its approvals close.
  A lane's end never ends another lane. The turn ends (`TopicRuntime._end_turn`, still its
  one exit) when the last lane has ended; a turn-wide end (the topic deleted, the topic's
  driver lost without a turn machine) ends every lane still running with that status.
- The turn's status: `success` when any lane succeeded; else `stopped` when it was stopped;
  else the first failing lane's error.
- Exactly one answer of a multi-answer turn is chosen; the others are alternatives
  (`alternative=True`), which the history later turns see leaves out
  (`RowBook.history_before`). Extra lanes' rows open as alternatives (lane 0 is the choice
  until one is made, so a turn cut short by a daemon crash still has one). The choice is
  settled before `TurnEnded`: a window's pick during the turn, else the first lane that
  succeeded, else lane 0. The topic's own session wrote
  lane 0's answer: when the turn ends with another answer chosen, or the choice changes
  after its turn ended, that session is replaced (`ResetSession`), so the next turn's model
  sees the chosen answer and not the one it wrote.
- A multi-answer turn is never steered (`steer_refusal`); a stop reaches every lane.
- A stop of one answer (`stop_answer`, protocol 1.2) interrupts that lane only (lane 0: the
  topic's own session) and cancels its approvals; the lane ends `stopped` at its own end
  (also when its session is lost, or the turn ends around it), the others go on, queued
  messages stay queued. An answer that already ended is not stopped again. A row that is
  not an answer of the running turn is refused, the turn unchanged.
- An extra lane's approvals get ids unique in the topic (`runtime_approvals.lane_approval_id`)
  and their answers go to that lane's session.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from hostd.core.effects import Effect, ResetSession, StartLane, ToDriver
from hostd.core.rows import LiveRow
from hostd.core.runtime_approvals import ApprovalBook, lane_approval_id
from hostd.core.runtime_outbox import Outbox
from hostd.core.runtime_rows import RowBook
from hostd.core.runtime_turn import Lane, Turn
from hostd_protocol.client_messages import (
    ApprovalInfo,
    TopicInfo,
    UsageUpdated,
)
from hostd_protocol.common import AnswerTarget, Chunk, TurnStatus, Usage, sum_usage
from hostd_protocol.driver_messages import (
    ApiRetry,
    ApprovalRequest,
    ApprovalWithdrawn,
    ChunkEvent,
    DriverEvent,
    DriverFatal,
    Interrupt,
    Notice,
    Send,
    TurnEnd,
    UsageEvent,
)
from hostd_protocol.errors import (
    DriverTurnError,
    HostdError,
    InvalidArgument,
    NotFound,
    TopicBusy,
)

__all__ = [
    "MAX_ALSO",
    "LaneOps",
    "also_meta",
    "also_of",
    "check_also",
    "lane_label",
    "lane_topic",
    "steer_refusal",
    "sum_usage",
]

#: Extra answers one message may ask for (8 answers in all).
MAX_ALSO = 7


def check_also(also: Sequence[AnswerTarget]) -> None:
    """Raises `InvalidArgument` for too many targets, or one that names nobody."""
    if len(also) > MAX_ALSO:
        raise InvalidArgument(
            f"a message can ask at most {MAX_ALSO} more answers (also); it asked {len(also)}"
        )
    for i, target in enumerate(also):
        if not (target.assistant or target.driver or target.model):
            raise InvalidArgument(f"also[{i}] names nobody: set its assistant, driver or model")


def also_meta(also: Sequence[AnswerTarget]) -> list[Any]:
    """`also` as kept in the user row's meta (so a queued or resent message keeps it)."""
    return [msgspec.to_builtins(t) for t in also]


def also_of(meta: Mapping[str, Any]) -> list[AnswerTarget]:
    """The extra answerers a user row asked for (none when its meta has no valid `also`)."""
    raw = meta.get("also")
    if not isinstance(raw, list) or not raw:
        return []
    try:
        return msgspec.convert(raw, list[AnswerTarget])
    except msgspec.ValidationError:
        return []


def lane_topic(topic: TopicInfo, target: AnswerTarget) -> TopicInfo:
    """The topic as the turn machine of a lane answering as `target` sees it (the fields the
    target leaves empty fall back to the topic's; see `AnswerTarget`)."""
    replace = msgspec.structs.replace
    if target.assistant:
        return replace(topic, assistant=target.assistant, driver=target.driver, model=target.model)
    if target.driver:
        return replace(topic, driver=target.driver, model=target.model)
    return replace(topic, model=target.model)


def lane_label(target: AnswerTarget | None) -> str:
    """A short name for an answerer: `driver/model`, `@assistant`, or `the topic's driver`."""
    if target is None:
        return "the topic's driver"
    if target.assistant:
        name = f"@{target.assistant}"
        return f"{name} ({target.driver}/{target.model})" if target.driver else name
    driver = target.driver or "the topic's driver"
    return f"{driver}/{target.model}" if target.model else driver


def steer_refusal(turn_id: str) -> InvalidArgument:
    return InvalidArgument(
        f"turn {turn_id} is answered by several models and cannot be steered (a steer would "
        "change each answer differently); queue the message (intent queue or auto) or stop "
        "the turn"
    )




class LaneOps:
    """The lanes of `TopicRuntime`'s multi-answer turns (a mixin, like `RewindOps`). Same
    contract as every runtime input: effects out, or a typed error having changed nothing."""

    _tid: str
    _topic: TopicInfo
    _wall: Callable[[], float]
    _book: RowBook
    _out: Outbox
    _turn: Turn | None
    _approvals: ApprovalBook

    if TYPE_CHECKING:  # provided by TopicRuntime

        def _open_row(self, **fields: Any) -> LiveRow: ...

        def _end_turn(
            self, turn: Turn, status: TurnStatus, error: str, error_code: str
        ) -> None: ...

        def _done(self) -> list[Effect]: ...

        def _append_chunk(self, turn: Turn, row_id: str, chunk: Chunk) -> None: ...

    # --- inputs ---------------------------------------------------------------------------

    def lane_event(self, lane: int, event: DriverEvent, now: float) -> list[Effect]:
        """One event of lane `lane`'s (> 0) session. Events of a lane that ended, of another
        turn, or that only matter to the topic's own session (resume tokens, capabilities,
        steering, compaction) are ignored."""
        turn = self._turn
        if turn is None or not 0 < lane < len(turn.lanes) or turn.lanes[lane].status:
            return self._done()
        ln = turn.lanes[lane]
        # Like the topic's own events (runtime_driver_events): these must name the turn.
        ours = getattr(event, "turn_id", "") == turn.id
        if isinstance(event, ChunkEvent) and ours:
            self._lane_chunk(turn, ln, event)
        elif isinstance(event, UsageEvent) and ours:
            self._lane_usage(turn, lane, event.usage)
        elif isinstance(event, ApprovalRequest) and ours:
            self._lane_approval(turn, ln, event, now)
        elif isinstance(event, ApprovalWithdrawn) and ours:
            self._approvals.withdraw(
                lane_approval_id(ln.index, event.approval_id), event.reason, self._out
            )
        elif isinstance(event, TurnEnd) and ours:
            self._end_lane(turn, lane, event.status, event.error, event.error_code)
        elif isinstance(event, DriverFatal):
            status: TurnStatus = "stopped" if self.lane_stopping(turn, lane) else "error"
            self._end_lane(turn, lane, status, event.message, event.code)
        elif isinstance(event, Notice | ApiRetry):
            what = event.message if isinstance(event, Notice) else "the model API request failed"
            code = event.code if isinstance(event, Notice) else "api_retry"
            self._out.notice(code, f"answer {lane} ({lane_label(ln.target)}): {what}", "warning")
        return self._done()

    def lane_lost(self, lane: int, error: HostdError, now: float) -> list[Effect]:
        """Lane `lane`'s session could not open or broke: that answer ends (`error`, or
        `stopped` after a stop); the others go on."""
        turn = self._turn
        if turn is not None and 0 <= lane < len(turn.lanes):
            status: TurnStatus = "stopped" if self.lane_stopping(turn, lane) else "error"
            self._end_lane(turn, lane, status, str(error), error.code)
        return self._done()

    def choose_answer(self, row_id: str, now: float) -> list[Effect]:
        """Pick the answer the conversation continues from (see the module rules).

        Raises:
            NotFound: no such row in the visible history.
            InvalidArgument: the row is not an answer of a multi-answer turn.
            TopicBusy: a later turn is running.
        """
        live = self._book.get(row_id)
        if live is None:
            raise NotFound(f"row {row_id} is not in the visible history of topic {self._tid}")
        if live.base.role != "assistant" or live.base.target is None:
            raise InvalidArgument(
                f"row {row_id} is not an answer of a multi-answer turn; only those can be "
                "chosen (send with also to get several answers)"
            )
        turn = self._turn
        if turn is not None and turn.id != live.base.turn_id:
            raise TopicBusy(
                f"topic {self._tid} is answering (turn {turn.id}); choose an answer of an "
                "earlier turn once it has ended"
            )
        if turn is not None:
            # Marked now; the topic's session is replaced at the turn's end if need be.
            turn.chosen = row_id
            self._mark_choice(turn.id, row_id)
        elif self._mark_choice(live.base.turn_id, row_id):
            self._out.add(ResetSession())  # the history changed under the topic's session
        return self._done()

    def stop_answer(self, turn: Turn, row_id: str) -> list[Effect]:
        """Stop one answer of the running multi-answer turn (see the module rules).

        Raises:
            NotFound: no such row in the visible history.
            InvalidArgument: the row is not an answer of the running turn.
        """
        ln = self._check_answer(turn, row_id)
        if ln is not None and ln.status is None and not ln.stopping and not turn.stopping:
            ln.stopping = True
            self._approvals.close_turn(
                turn.id, "the answer was stopped", self._out, tell_driver=True, lane=ln.index
            )
            self._out.add(ToDriver(Interrupt(turn_id=turn.id), lane=ln.index))
        return self._done()

    def _check_answer(self, turn: Turn, row_id: str) -> Lane | None:
        """The lane answering in `row_id` (None: the answer of a turn without lanes)."""
        if self._book.get(row_id) is None:
            raise NotFound(f"row {row_id} is not in the visible history of topic {self._tid}")
        for ln in turn.lanes:
            if ln.row_id == row_id:
                return ln
        if not turn.lanes and row_id == turn.row_id:
            return None
        raise InvalidArgument(
            f"row {row_id} is not an answer of the running turn {turn.id}; stop names one "
            "of its answers, or no row to stop the whole turn"
        )

    def lane_stopping(self, turn: Turn, lane: int) -> bool:
        """Whether lane `lane`'s end is a stop's: the turn's, or its answer's alone."""
        return turn.stopping or (lane < len(turn.lanes) and turn.lanes[lane].stopping)

    # --- used by the runtime ----------------------------------------------------------------

    def _open_lanes(
        self, turn: Turn, targets: list[AnswerTarget], send: Send, user_position: int
    ) -> None:
        """After lane 0's row and `StartTurn`: a row and a `StartLane` for each extra lane.
        Extra lanes run in fresh sessions: they always get the visible history."""
        turn.lanes = [Lane(0, turn.row_id, targets[0])]
        for index, target in enumerate(targets[1:], 1):
            row = self._open_row(
                role="assistant",
                status="pending",
                position=self._book.place(),
                turn_id=turn.id,
                lane=index,
                target=target,
                alternative=True,
            )
            turn.lanes.append(Lane(index, row.id, target))
        history = self._book.history_before(user_position)
        lane_send = msgspec.structs.replace(send, history=history)
        for ln in turn.lanes[1:]:
            self._out.add(StartLane(turn.id, ln.index, ln.target, lane_send))

    def _stop_lanes(self, turn: Turn) -> None:
        for ln in turn.lanes[1:]:
            if ln.status is None and not ln.stopping:  # not interrupted twice
                self._out.add(ToDriver(Interrupt(turn_id=turn.id), lane=ln.index))

    def _end_lane(
        self, turn: Turn, lane: int, status: TurnStatus, error: str, error_code: str
    ) -> None:
        """A lane's end; the turn's end when it was the last (or the turn has one lane)."""
        if not turn.lanes:
            self._end_turn(turn, status, error, error_code)
            return
        ln = turn.lanes[lane]
        if ln.status is not None:
            return
        self._close_lane(turn, ln, status, error, error_code)
        if all(other.status is not None for other in turn.lanes):
            self._end_turn(turn, status, error, error_code)

    def _settle_lanes(
        self, turn: Turn, status: TurnStatus, error: str, error_code: str
    ) -> tuple[TurnStatus, str, str]:
        """At the turn's end: lanes still running end with this status, the choice is
        settled; returns the turn's status, error and code (see the module rules)."""
        for ln in turn.lanes:
            if ln.status is None:
                if ln.stopping:  # its own stop, whatever ended the turn around it
                    self._close_lane(turn, ln, "stopped", "", "")
                else:
                    self._close_lane(turn, ln, status, error, error_code)
        chosen = turn.chosen
        if chosen is None:
            ok = [ln for ln in turn.lanes if ln.status == "success"]
            chosen = (ok[0] if ok else turn.lanes[0]).row_id
        self._mark_choice(turn.id, chosen)
        if chosen != turn.lanes[0].row_id:
            self._out.add(ResetSession())
        if any(ln.status == "success" for ln in turn.lanes):
            return "success", "", ""
        failed = next((ln for ln in turn.lanes if ln.status == "error"), None)
        if turn.stopping or failed is None:
            return "stopped", "", ""
        return "error", failed.error, failed.error_code

    def _lane_usage(self, turn: Turn, lane: int, usage: Usage) -> None:
        turn.lanes[lane].usage = usage
        total = sum_usage([ln.usage for ln in turn.lanes])
        self._out.event(UsageUpdated, turn_id=turn.id, usage=total, lane=lane, lane_usage=usage)

    # --- helpers ----------------------------------------------------------------------------

    def _lane_chunk(self, turn: Turn, ln: Lane, event: ChunkEvent) -> None:
        self._append_chunk(turn, ln.row_id, event.chunk)

    def _lane_approval(self, turn: Turn, ln: Lane, ev: ApprovalRequest, now: float) -> None:
        approval_id = lane_approval_id(ln.index, ev.approval_id)
        if approval_id in self._approvals:
            return  # a duplicate request
        info = ApprovalInfo(
            id=approval_id,
            topic_id=self._tid,
            turn_id=turn.id,
            tool=ev.tool,
            input=ev.input,
            description=ev.description,
            created_at=self._wall(),
            options=list(ev.options),
            lane=ln.index,
        )
        if turn.stopping or ln.stopping:
            self._approvals.refuse(info, "the answer was stopped", self._out)
        else:
            self._approvals.request(info, now, self._out)

    def _close_lane(
        self, turn: Turn, ln: Lane, status: TurnStatus, error: str, error_code: str
    ) -> None:
        if status == "error":
            # Never a bare "error": say whose answer failed and where to look.
            error = error or (
                f"{lane_label(ln.target)} ended its answer with an error but gave no reason; "
                "see the daemon log"
            )
            error_code = error_code or DriverTurnError.code
        ln.status, ln.error, ln.error_code = status, error, error_code
        live = self._book[ln.row_id]
        self._out.row_changed(
            live,
            status=status,
            error=error or None,
            error_code=error_code or None,
            empty=True if not live.parts else None,
            usage=ln.usage,
        )
        self._approvals.close_turn(
            turn.id, "the answer ended", self._out, tell_driver=False, lane=ln.index
        )

    def _mark_choice(self, turn_id: str, chosen: str) -> bool:
        """Every answer row of the turn: `alternative` unless it is `chosen` (changed rows
        only get a `RowUpdated`); whether any changed."""
        changed = False
        for live in list(self._book):
            base = live.base
            if base.turn_id == turn_id and base.role == "assistant" and base.target is not None:
                alternative = live.id != chosen
                if base.alternative != alternative:
                    self._out.row_changed(live, alternative=alternative)
                    changed = True
        return changed
