"""The topic runtime's outbox: collects the effects of one request and stamps events with seq.

Rules it guards:

- `seq` is owned here: each event gets the next one, strictly increasing, no gaps.
- A row change is always a pair, in this order: `SaveRow(row, durable=True)` for the store and
  one `RowUpdated` (or `RowOpened`) for the windows, so the two never disagree.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from hostd.core.effects import Effect, Emit, SaveRow
from hostd.core.rows import LiveRow
from hostd_protocol.client_messages import (
    MessageRow,
    NoticeEvent,
    RowOpened,
    RowUpdated,
    TopicEvent,
)

__all__ = ["Outbox"]

NoticeLevel = Literal["info", "warning", "error"]


class Outbox:
    """Effects collected for one runtime request, in the order the shell must run them."""

    __slots__ = ("effects", "seq", "topic_id", "wall")

    def __init__(self, topic_id: str, last_seq: int, wall: Callable[[], float]) -> None:
        self.topic_id = topic_id
        self.seq = last_seq
        self.wall = wall
        self.effects: list[Effect] = []

    def take(self) -> list[Effect]:
        """The effects so far; the outbox starts empty again."""
        effects, self.effects = self.effects, []
        return effects

    def add(self, effect: Effect) -> None:
        self.effects.append(effect)

    def event(self, cls: Callable[..., TopicEvent], **fields: Any) -> None:
        """Emit `cls(topic_id=..., seq=<next>, **fields)`."""
        self.seq += 1
        self.effects.append(Emit(cls(topic_id=self.topic_id, seq=self.seq, **fields)))

    def notice(self, code: str, message: str, level: NoticeLevel = "info") -> None:
        self.event(NoticeEvent, code=code, message=message, level=level)

    def row_opened(self, row: MessageRow) -> None:
        self.effects.append(SaveRow(row, durable=True))
        self.event(RowOpened, row=row)

    def row_changed(self, live: LiveRow, **changes: Any) -> None:
        """Change a row's fields (None values are left out): durable save plus RowUpdated."""
        changes = {k: v for k, v in changes.items() if v is not None}
        fields = {k: v for k, v in changes.items() if k != "parts"}
        if "parts" in changes:
            live.set_parts(changes["parts"])
        live.update(updated_at=self.wall(), **fields)
        self.effects.append(SaveRow(live.freeze(), durable=True))
        self.event(RowUpdated, row_id=live.id, **changes)
