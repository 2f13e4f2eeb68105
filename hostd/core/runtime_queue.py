"""The queue of `TopicRuntime`: messages that wait (queued, draft) and how they run.

Rules it guards (numbers as in `hostd.core.topic_runtime`):

4. (part) A queued row runs as a next turn in acceptance order; a steer in flight is not
   queued (it is the driver's until it leaves the turn), so it cannot be edited or discarded.
5. The queue runs by itself after a turn that succeeded or that a user stopped; after an error
   or a crash it waits, with a notice, for the next successful turn, `send_now` or
   `resume_queue`, so one failure does not burn through every queued message.

`_next_up` is the row `send_now` picked: it runs first when the current turn has ended.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hostd.core.effects import DeleteRow, Effect
from hostd.core.rows import LiveRow
from hostd.core.runtime_outbox import Outbox
from hostd.core.runtime_rows import UNSENT_STATUSES, RowBook
from hostd.core.runtime_turn import Turn
from hostd_protocol.client_messages import RowRemoved
from hostd_protocol.common import Chunk, TextDelta, TurnStatus
from hostd_protocol.errors import InvalidArgument, NotFound

__all__ = ["QueueOps"]


class QueueOps:
    """The queue operations of `TopicRuntime` (a mixin: one concept, kept beside its rules).

    Same contract as every runtime request: effects out, or a typed error having changed
    nothing.
    """

    _tid: str
    _out: Outbox
    _book: RowBook
    _turn: Turn | None
    #: The row `send_now` picked to run when the current turn has ended.
    _next_up: str | None

    if TYPE_CHECKING:  # provided by TopicRuntime

        def _start_turn(self, user: LiveRow, turn_id: str = "") -> None: ...

        def _begin_stop(self, turn: Turn) -> None: ...

        def _done(self) -> list[Effect]: ...

    def queued_row_ids(self) -> list[str]:
        """Queued rows in the order they will run (steers in flight and drafts excluded)."""
        steering = self._steer_rows()
        return [r.id for r in self._book.queued() if r.id not in steering]

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
        # A user's stop, of the turn or of answers of it (`stop_answer`: the others did not
        # succeed): the queue goes on as after a stop.
        answers_stopped = status == "stopped" and any(ln.stopping for ln in ended.lanes)
        if status == "success" or ended.stopping or answers_stopped:
            self._start_turn(self._book[queued[0]])
            return
        self._out.notice(
            "queue_paused",
            f"{len(queued)} queued message(s) wait because the last turn ended with "
            f"{status}; they run after the next turn that succeeds, or use send-now",
            "warning",
        )

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
