"""Rewind, regenerate, edit-and-resend and fork: which rows a topic operation cuts or copies.

Rules it guards:

- Only history rows (placed: not `queued`, not `draft`) are cut or copied. Unsent rows sit
  after the whole history and keep waiting (a rewind never drops a message the user queued).
- A rewind keeps every row up to its target (and the target unless `include`); every history
  row after the cut leaves the runtime's book, is saved once more with `superseded=True` (the
  store keeps it, `History(all=True)` shows it) and is named in one `RowsRemoved` event, so a
  window and a late attach agree. The vendor session is replaced (`ResetSession`) whenever a
  row left, because it remembers what was cut; the new one starts from the vendor checkpoint
  of the last kept row when there is one (`hostd.core.vendor_session`), else fresh.
- A fork copies the rows up to and including its target; the target must be finished (not
  `pending`), so the copy never holds half an answer.
- Positions never go back: rows placed after a rewind take new, higher positions, so the
  stored history (superseded rows included) still reads in the order things happened.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from hostd.core.effects import Effect, ResetSession, SaveRow
from hostd.core.runtime_lanes import also_meta, also_of
from hostd.core.runtime_outbox import Outbox
from hostd.core.runtime_rows import UNSENT_STATUSES, RowBook
from hostd.core.runtime_turn import Turn
from hostd.core.transcript import LiveRow
from hostd.core.vendor_session import fork_source_token, rewind_source_token
from hostd_protocol.client_messages import MessageRow, RowsRemoved, SendResult
from hostd_protocol.common import AnswerTarget, HistoryMessage, SendIntent, TextDelta
from hostd_protocol.errors import InvalidArgument, NotFound, TopicBusy

__all__ = ["RewindOps", "fork_rows", "last_user_row", "rewind_target", "supersede_after"]


def _placed(book: RowBook, topic_id: str, row_id: str, verb: str) -> LiveRow:
    live = book.get(row_id)
    if live is None:
        raise NotFound(f"row {row_id} is not in the visible history of topic {topic_id}")
    if live.status in UNSENT_STATUSES:
        raise InvalidArgument(
            f"row {row_id} is {live.status}, not part of the history yet; cannot {verb} at it "
            "(edit or discard the queued message instead)"
        )
    return live


def rewind_target(book: RowBook, topic_id: str, row_id: str, include: bool) -> int:
    """Check a rewind's target; the first position that leaves the history.

    Raises:
        NotFound: no such row (or it was superseded already).
        InvalidArgument: the row is queued or a draft.
    """
    live = _placed(book, topic_id, row_id, "rewind")
    return live.position if include else live.position + 1


def supersede_after(book: RowBook, out: Outbox, cut: int) -> list[str]:
    """Cut every history row at or after position `cut`; returns their ids (position order)."""
    gone = [
        live
        for live in book.ordered()
        if live.position >= cut and live.status not in UNSENT_STATUSES
    ]
    if not gone:
        return []
    resume_at = rewind_source_token(book, cut) or ""
    at = out.wall()
    for live in gone:
        row = msgspec.structs.replace(live.freeze(), superseded=True, updated_at=at)
        out.add(SaveRow(row, durable=True))
        book.remove(live.id)
    ids = [live.id for live in gone]
    out.event(RowsRemoved, row_ids=ids, reason="rewind")
    out.add(ResetSession(resume_at=resume_at))
    return ids


def last_user_row(book: RowBook, topic_id: str) -> LiveRow:
    """The last user message in the history (what regenerate answers again).

    Raises:
        NotFound: the history holds no user message.
    """
    for live in reversed(book.ordered()):
        if live.base.role == "user" and live.status not in UNSENT_STATUSES:
            return live
    raise NotFound(f"topic {topic_id} has no sent message to regenerate an answer for")


def fork_rows(book: RowBook, topic_id: str, row_id: str) -> list[MessageRow]:
    """The history up to and including `row_id`, for a fork.

    Raises:
        NotFound: no such row.
        InvalidArgument: the row is queued, a draft, or still being answered.
    """
    target = _placed(book, topic_id, row_id, "fork")
    if target.status == "pending":
        raise InvalidArgument(
            f"row {row_id} is still being answered; fork at it once the turn has ended, or "
            "at an earlier row"
        )
    return [
        live.freeze()
        for live in book.ordered()
        if live.position <= target.position
        and live.status not in UNSENT_STATUSES
        and live.status != "pending"
    ]


class RewindOps:
    """The topic operations of `TopicRuntime` (a mixin: one concept, kept beside its rules).

    Same contract as every runtime request: effects out, or a typed error having changed
    nothing. A rewind asked with stop while a turn runs is kept in `Turn.rewind_to` and
    carried out by the runtime's `_end_turn`, before the next turn chains in.
    """

    _book: RowBook
    _tid: str
    _turn: Turn | None
    _out: Outbox
    _sent: dict[str, SendResult]
    _next_up: str | None
    #: The rows the last rewind cut (a rewind asked with stop happens at the turn end).
    last_rewound: list[str]

    if TYPE_CHECKING:  # provided by TopicRuntime

        def send(
            self,
            text: str,
            intent: SendIntent,
            now: float,
            *,
            client_msg_id: str = "",
            options: dict[str, Any] | None = None,
            also: Sequence[AnswerTarget] = (),
        ) -> tuple[SendResult, list[Effect]]: ...

        def _open_row(self, **fields: Any) -> LiveRow: ...

        def _begin_stop(self, turn: Turn) -> None: ...

        def _done(self) -> list[Effect]: ...

    def rewind(
        self, row_id: str, now: float, *, include: bool = False, stop: bool = False
    ) -> tuple[list[str], list[Effect]]:
        """Cut the history after `row_id` (and `row_id` too when `include`).

        Returns the ids cut, or [] when `stop` deferred the rewind to the running turn's end
        (then `last_rewound` holds them once the turn has ended).

        Raises:
            NotFound: no such row in the visible history.
            InvalidArgument: the row is queued or a draft.
            TopicBusy: a turn runs and `stop` was not asked.
        """
        cut = rewind_target(self._book, self._tid, row_id, include)
        turn = self._turn
        if turn is not None:
            self._check_stop(turn, stop, "rewind")
            turn.rewind_to = (row_id, include)
            if not turn.stopping:
                self._begin_stop(turn)
            return [], self._done()
        return self._cut(cut), self._done()

    def resend(
        self, row_id: str, text: str, now: float, *, stop: bool = False, client_msg_id: str = ""
    ) -> tuple[SendResult, list[Effect]]:
        """Edit and resend: cut `row_id` (a sent user message) and what follows, then send
        `text` with the old row's options; with `stop`, after the running turn has ended.

        Raises:
            NotFound, InvalidArgument: as for `rewind`; also a row that is not a user
                message, or empty text.
            TopicBusy: a turn runs and `stop` was not asked.
        """
        cut = rewind_target(self._book, self._tid, row_id, True)
        live = self._book[row_id]
        if live.base.role != "user":
            raise InvalidArgument(f"row {row_id} is not a user message; only those are resent")
        if not text.strip():
            raise InvalidArgument("the message is empty; type some text to send")
        if client_msg_id and client_msg_id in self._sent:
            return self._sent[client_msg_id], []
        options = live.base.meta.get("options")
        opts = dict(options) if isinstance(options, dict) else None
        also = also_of(live.base.meta)  # a message sent to several models is resent to them
        turn = self._turn
        if turn is None:
            self._cut(cut)
            return self.send(
                text, "start", now, client_msg_id=client_msg_id, options=opts, also=also
            )
        self._check_stop(turn, stop, "resend a message")
        meta: dict[str, Any] = {"client_msg_id": client_msg_id} if client_msg_id else {}
        if opts:
            meta["options"] = opts
        if also:
            meta["also"] = also_meta(also)
        row = self._open_row(
            role="user",
            status="queued",
            position=self._book.unsent_position(),
            parts=[TextDelta(text=text)],
            meta=meta,
        )
        # Runs right after the rewind at the turn's end (send_now's slot: never drafted).
        self._next_up = row.id
        turn.rewind_to = (row_id, True)
        if not turn.stopping:
            self._begin_stop(turn)
        result = SendResult(row_id=row.id, disposition="queued", position=row.position)
        if client_msg_id:
            self._sent[client_msg_id] = result
        return result, self._done()

    def regenerate(
        self, now: float, *, stop: bool = False, client_msg_id: str = ""
    ) -> tuple[SendResult, list[Effect]]:
        """Answer the last user message again (`resend` of it with its own text).

        Raises:
            NotFound: no message was sent yet. TopicBusy: as for `resend`.
        """
        live = last_user_row(self._book, self._tid)
        return self.resend(
            live.id, live.parts.text(), now, stop=stop, client_msg_id=client_msg_id
        )

    def fork_rows(self, row_id: str) -> list[MessageRow]:
        """The history up to and including `row_id`, for a new topic (see `fork_rows`)."""
        return fork_rows(self._book, self._tid, row_id)

    def fork_source(self, row_id: str, resume_token: str | None) -> str | None:
        """The vendor session a fork at `row_id` may start from (`fork_source_token`)."""
        return fork_source_token(self._book, row_id, resume_token)

    def history_for(self, row_id: str) -> list[HistoryMessage]:
        """The history before `row_id`, as text: what a fresh vendor session must be fed."""
        live = self._book.get(row_id)
        return [] if live is None else self._book.history_before(live.position)

    def _check_stop(self, turn: Turn, stop: bool, verb: str) -> None:
        if not stop:
            raise TopicBusy(
                f"topic {self._tid} is answering (turn {turn.id}); cannot {verb} while a turn "
                "runs: stop it first, or ask for stop in the same request"
            )

    def _cut(self, cut: int) -> list[str]:
        ids = supersede_after(self._book, self._out, cut)
        if ids:
            gone = set(ids)
            self._sent = {k: v for k, v in self._sent.items() if v.row_id not in gone}
        self.last_rewound = ids
        return ids
