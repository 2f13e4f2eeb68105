"""The topic runtime's row book: every row of one topic, and the positions they sit at.

Rules it guards:

- History rows (user messages that were sent, assistant answers, compaction markers) take
  positions from one increasing counter at the moment they are *placed*. A steer's user row is
  placed when its turn rolls, so history ordered by position reads A1a, U2, A2.
- Unsent rows (status `queued` or `draft`) sit at positions from `UNSENT_BASE` up, in the order
  the host accepted them, so they always sort after the whole history and never need
  renumbering while turns run. When one is sent it is placed: it gets a history position
  (the runtime emits `RowUpdated(position=...)`).
- Queue order is acceptance order, which is unsent position order.
"""

from __future__ import annotations

from collections.abc import Iterator

from hostd.core.history_overlap import history_message
from hostd.core.rows import LiveRow, attachments_of
from hostd_protocol.client_messages import MessageRow
from hostd_protocol.common import HistoryMessage, RowStatus

__all__ = ["UNSENT_BASE", "UNSENT_STATUSES", "RowBook"]

#: First position of unsent (queued / draft) rows: far above any real history (2**40 rows),
#: well inside SQLite's 64-bit integers.
UNSENT_BASE = 1 << 40

UNSENT_STATUSES: frozenset[RowStatus] = frozenset({"queued", "draft"})


class RowBook:
    """All rows of a topic by id, with the two position counters."""

    def __init__(self, rows: list[MessageRow]) -> None:
        self._rows: dict[str, LiveRow] = {}
        self._next_history = 1
        self._next_unsent = UNSENT_BASE
        for row in rows:
            self._rows[row.id] = LiveRow(row)
            if row.position >= UNSENT_BASE:
                self._next_unsent = max(self._next_unsent, row.position + 1)
            else:
                self._next_history = max(self._next_history, row.position + 1)

    def __contains__(self, row_id: str) -> bool:
        return row_id in self._rows

    def __getitem__(self, row_id: str) -> LiveRow:
        return self._rows[row_id]

    def __len__(self) -> int:
        return len(self._rows)

    def __iter__(self) -> Iterator[LiveRow]:
        return iter(self._rows.values())

    def get(self, row_id: str) -> LiveRow | None:
        return self._rows.get(row_id)

    def add(self, row: MessageRow) -> LiveRow:
        live = LiveRow(row)
        self._rows[row.id] = live
        return live

    def remove(self, row_id: str) -> None:
        """Forget a row. The caller emits what the store must do with it (`DeleteRow`, or a
        final `SaveRow`): that op replaces any pending `TouchRow` of the row, and nothing
        else tells the store the row left the runtime."""
        del self._rows[row_id]

    def place(self) -> int:
        """The next history position (after every row placed so far)."""
        position = self._next_history
        self._next_history += 1
        return position

    def unsent_position(self) -> int:
        """The next unsent position (after every queued or draft row accepted so far)."""
        position = self._next_unsent
        self._next_unsent += 1
        return position

    def ordered(self) -> list[LiveRow]:
        return sorted(self._rows.values(), key=lambda r: r.position)

    def queued(self) -> list[LiveRow]:
        """Rows with status `queued`, in acceptance order."""
        return sorted(
            (r for r in self._rows.values() if r.status == "queued"), key=lambda r: r.position
        )

    def history_before(self, position: int) -> list[HistoryMessage]:
        """Sent user messages and answers before `position`, as history for stateless drivers
        (`history_overlap.history_message`: text, and an answer's tool calls); answers not chosen (a multi-answer turn's alternatives) are left out."""
        out: list[HistoryMessage] = []
        for live in self.ordered():
            if live.position >= position:
                break
            role = live.base.role
            if role == "marker" or live.status in UNSENT_STATUSES or live.base.alternative:
                continue
            message = history_message(role, live.parts.build(), live.id, attachments_of(live.base.meta))
            if message is not None:
                out.append(message)
        return out
