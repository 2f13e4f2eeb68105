"""The driver side of `TopicRuntime`: one handler per driver event, picked from a table.

Rules it guards (numbers as in `hostd.core.topic_runtime`):

6. `compacting` never outlives its turn; compaction events without a running turn are ignored.
8. Driver events for a turn that is not running are ignored (no effects), never an error.

`_DRIVER_TABLE` is the transition table: event type -> (handler, which turn the event must
name). A handler changes the running turn's rows through the runtime's transitions
(`_roll`, `_end_turn`, `_open_row`); it never returns effects itself (`_done` hands them over).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from hostd.core.effects import Effect, Emit, SaveResumeToken, TouchRow
from hostd.core.rows import LiveRow
from hostd.core.runtime_approvals import ApprovalBook
from hostd.core.runtime_outbox import Outbox
from hostd.core.runtime_rows import RowBook
from hostd.core.runtime_turn import Steer, Turn
from hostd.core.vendor_session import with_checkpoint
from hostd_protocol.client_messages import (
    ApprovalInfo,
    CommandsChanged,
    DriverReady,
    RowAppended,
    TopicInfo,
    UsageUpdated,
)
from hostd_protocol.common import Capabilities, Chunk, CommandInfo, TurnStatus, Usage
from hostd_protocol.driver_messages import (
    ApiRetry,
    ApprovalRequest,
    ApprovalWithdrawn,
    Checkpoint,
    ChunkEvent,
    CommandsEvent,
    CompactionComplete,
    CompactionError,
    CompactionStart,
    DriverEvent,
    DriverFatal,
    Log,
    Notice,
    Ready,
    ResumeToken,
    SteerBoundary,
    SteerInjected,
    SteerUndelivered,
    TurnEnd,
    UsageEvent,
    Warmed,
)
from hostd_protocol.errors import DriverTurnError, HostdError

__all__ = ["DriverEventOps"]

# Which turn a driver event must name to be applied: "none" (any time), "match" (the running
# turn), "match-or-blank" (the running turn; a blank turn_id means the running one).
_TurnRule = Literal["none", "match", "match-or-blank"]


class DriverEventOps:
    """The driver-facing inputs of `TopicRuntime` (a mixin: one concept, kept beside its
    table). Same contract as every runtime input: effects out, in order."""

    _topic: TopicInfo
    _tid: str
    _wall: Callable[[], float]
    _caps: Capabilities
    _caps_known: bool
    _out: Outbox
    _book: RowBook
    _approvals: ApprovalBook
    _turn: Turn | None
    _commands: list[CommandInfo]

    if TYPE_CHECKING:  # provided by TopicRuntime

        def _open_row(self, **fields: Any) -> LiveRow: ...

        def _roll(self, turn: Turn, steers: list[Steer]) -> None: ...

        def _end_turn(
            self, turn: Turn, status: TurnStatus, error: str, error_code: str
        ) -> None: ...

        def _end_lane(
            self, turn: Turn, lane: int, status: TurnStatus, error: str, error_code: str
        ) -> None: ...

        def _lane_usage(self, turn: Turn, lane: int, usage: Usage) -> None: ...

        def lane_stopping(self, turn: Turn, lane: int) -> bool: ...

        def _done(self) -> list[Effect]: ...

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
        self._append_chunk(turn, turn.row_id, ev.chunk)

    def _append_chunk(self, turn: Turn, row_id: str, chunk: Chunk) -> None:
        """A chunk of one of the turn's answers (lane 0's row, or an extra lane's). The hot
        path: no row copy, no store write; the store builds the newest snapshot of the row at
        its flush."""
        live = self._book[row_id]
        if live.append(chunk):
            turn.output = True
            out = self._out
            out.seq += 1
            out.effects.append(
                Emit(RowAppended(topic_id=self._tid, seq=out.seq, row_id=live.id, chunk=chunk))
            )
            out.effects.append(TouchRow(live.snapshot()))

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
        if self.lane_stopping(turn, 0):
            # Deny at once so the driver is not left waiting while it stops.
            self._approvals.refuse(info, "the turn was stopped", self._out)
        else:
            self._approvals.request(info, now, self._out)

    def _on_withdrawn(self, ev: ApprovalWithdrawn, turn: Turn, now: float) -> None:
        self._approvals.withdraw(ev.approval_id, ev.reason, self._out)

    def _on_usage(self, ev: UsageEvent, turn: Turn, now: float) -> None:
        if turn.lanes:
            self._lane_usage(turn, 0, ev.usage)  # the turn's figure sums its lanes
            return
        self._out.event(UsageUpdated, turn_id=turn.id, usage=ev.usage)

    def _on_resume_token(self, ev: ResumeToken, turn: Turn | None, now: float) -> None:
        self._out.add(SaveResumeToken(ev.token))

    def _on_checkpoint(self, ev: Checkpoint, turn: Turn, now: float) -> None:
        live = self._book[turn.row_id]  # a later rewind's or fork's source
        self._out.row_changed(live, meta=with_checkpoint(live, ev.token))

    def _on_api_retry(self, ev: ApiRetry, turn: Turn | None, now: float) -> None:
        status = f" (HTTP {ev.error_status})" if ev.error_status is not None else ""
        message = (
            f"the model API request failed{status}; retry {ev.attempt} of {ev.max_retries} "
            f"in {ev.retry_delay_ms / 1000:g} s"
        )
        self._out.notice("api_retry", message, "warning")

    def _on_notice(self, ev: Notice, turn: Turn | None, now: float) -> None:
        self._out.notice(ev.code, ev.message, "warning")

    def _on_commands(self, ev: CommandsEvent, turn: Turn | None, now: float) -> None:
        if ev.commands == self._commands:
            return  # agents repeat the list (every session start): windows hear of changes
        self._commands = list(ev.commands)
        self._out.event(CommandsChanged, commands=self._commands)

    def _on_turn_end(self, ev: TurnEnd, turn: Turn, now: float) -> None:
        error, code = ev.error, ev.error_code
        if ev.status == "error":
            # Never a bare "error": the user must see that it failed and where to look.
            error = error or (
                f"the {self._topic.driver or 'topic'} driver ended the turn with an error but "
                "gave no reason; see the daemon log"
            )
            code = code or DriverTurnError.code
        self._end_lane(turn, 0, ev.status, error, code)

    def _on_fatal(self, ev: DriverFatal, turn: Turn | None, now: float) -> None:
        if turn is not None:
            status: TurnStatus = "stopped" if self.lane_stopping(turn, 0) else "error"
            self._end_lane(turn, 0, status, ev.message, ev.code)

    def _on_nothing(self, ev: object, turn: Turn | None, now: float) -> None:
        pass


_Handler = Callable[[DriverEventOps, Any, Any, float], None]

#: The driver-event transition table: event type -> (handler, which turn it must name).
_DRIVER_TABLE: dict[type[Any], tuple[_Handler, _TurnRule]] = {
    Ready: (DriverEventOps._on_ready, "none"),
    Warmed: (DriverEventOps._on_nothing, "none"),
    Log: (DriverEventOps._on_nothing, "none"),
    ResumeToken: (DriverEventOps._on_resume_token, "none"),
    Checkpoint: (DriverEventOps._on_checkpoint, "match"),
    ApiRetry: (DriverEventOps._on_api_retry, "none"),
    Notice: (DriverEventOps._on_notice, "none"),
    CommandsEvent: (DriverEventOps._on_commands, "none"),
    DriverFatal: (DriverEventOps._on_fatal, "none"),
    ChunkEvent: (DriverEventOps._on_chunk, "match"),
    SteerInjected: (DriverEventOps._on_injected, "match"),
    SteerBoundary: (DriverEventOps._on_boundary, "match"),
    SteerUndelivered: (DriverEventOps._on_undelivered, "match"),
    ApprovalRequest: (DriverEventOps._on_approval, "match"),
    ApprovalWithdrawn: (DriverEventOps._on_withdrawn, "match"),
    UsageEvent: (DriverEventOps._on_usage, "match"),
    TurnEnd: (DriverEventOps._on_turn_end, "match"),
    CompactionStart: (DriverEventOps._on_compaction_start, "match-or-blank"),
    CompactionComplete: (DriverEventOps._on_compaction_complete, "match-or-blank"),
    CompactionError: (DriverEventOps._on_compaction_error, "match-or-blank"),
}
