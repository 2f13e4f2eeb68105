"""A row's stored content: its whole parts (`rows.parts`) plus the pieces streamed since
(`row_parts`), so a flush writes what is new, not the whole answer again (issue 22, finding 5).

Rules this module guards:

- The content of a row is `PartsBuilder(rows.parts + every piece's chunks, in id order)
  .build()`: exactly the parts the runtime's row had when it was last written. Every reader
  (`Store.load_rows`, `history_page`, `load_row`) merges the pieces, so no reader sees the
  difference; `reconcile` folds them into `rows.parts` after a crash.
- A streamed row (`TouchRow`) is appended as one piece per flush: the chunks between the
  snapshot last committed (the row's `Cursor`) and the newest one (`RowSnapshot.delta_since`),
  plus its other columns when they changed. A row without a cursor, a snapshot that does not
  extend its cursor (the parts were replaced), or a row with `MAX_PIECES` pieces is written
  whole, and its pieces are deleted in the same transaction (compaction). So is every
  `PutRow` (the runtime's full save at each status change: the row's end compacts it).
- A cursor says what the database holds for a row. Cursors change only once their
  transaction committed (`Plan.commit`); a failed batch leaves them as they were, so the
  retried ops append from the right place.
- This runs on the writer's worker thread: a snapshot shares its lists with the live row, but
  only ever reads the prefixes it recorded, which never change.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgspec

from hostd.core.rows import PartsBuilder, RowSnapshot
from hostd.shell.store.ops import DeleteRow, DeleteTopic, Op, PutRow, TouchRow
from hostd.shell.store.rows import json_encoder, many_rows, row_values
from hostd_protocol.client_messages import MessageRow
from hostd_protocol.common import Chunk

if TYPE_CHECKING:
    import apsw

#: A row with this many pieces is written whole at its next flush (at most one such row per
#: batch, so many long streams do not all compact in one flush): readers merge at most about
#: this many pieces, and a long answer is rewritten once per `MAX_PIECES` flushes.
MAX_PIECES = 1000

_chunks_decoder = msgspec.json.Decoder(list[Chunk])

#: Every column of `rows` but `parts` (a piece's row may change them meanwhile: usage, meta).
_BASE_SET = (
    "role = ?, status = ?, position = ?, turn_id = ?, error = ?, error_code = ?, anchor = ?, "
    "empty = ?, updated_at = ?, meta = ?, superseded = ?, lane = ?, alternative = ?, "
    "target = ?, usage = ?"
)


@dataclass(frozen=True, slots=True)
class Cursor:
    """What the database holds for a row: the content of `snapshot` (`run_chars` characters
    in its open run) in `pieces` pieces after its whole parts."""

    snapshot: RowSnapshot
    run_chars: int
    pieces: int


@dataclass
class Plan:
    """The row writes of one batch, and the cursors they leave once committed."""

    whole: list[tuple[Any, ...]] = field(default_factory=list)
    #: Row ids written whole: their pieces go.
    compacted: list[tuple[str]] = field(default_factory=list)
    base: list[tuple[Any, ...]] = field(default_factory=list)
    pieces: list[tuple[str, str]] = field(default_factory=list)
    #: Bytes of row content encoded for this batch (parts and pieces).
    content_bytes: int = 0
    cursors: dict[str, Cursor | None] = field(default_factory=dict)
    deleted_topics: list[str] = field(default_factory=list)

    def statements(
        self, row_columns: str, placeholders: str
    ) -> list[tuple[str, list[tuple[Any, ...]]]]:
        """The row writes, in order (rows before pieces), for the batch's transaction."""
        out: list[tuple[str, list[tuple[Any, ...]]]] = []
        if self.whole:
            out.append((
                f"INSERT INTO rows ({row_columns}) VALUES ({placeholders}) ON CONFLICT(id) DO "
                "UPDATE SET role = excluded.role, status = excluded.status, "
                "position = excluded.position, turn_id = excluded.turn_id, "
                "parts = excluded.parts, error = excluded.error, "
                "error_code = excluded.error_code, anchor = excluded.anchor, "
                "empty = excluded.empty, updated_at = excluded.updated_at, "
                "meta = excluded.meta, superseded = excluded.superseded, "
                "lane = excluded.lane, alternative = excluded.alternative, "
                "target = excluded.target, usage = excluded.usage",
                self.whole,
            ))
        if self.compacted:
            out.append(("DELETE FROM row_parts WHERE row_id = ?", self.compacted))
        if self.base:
            out.append((f"UPDATE rows SET {_BASE_SET} WHERE id = ?", self.base))
        if self.pieces:
            # One statement for every row's piece (one per streaming row per flush).
            out.extend(many_rows("INSERT INTO row_parts (row_id, chunks) VALUES {rows}", self.pieces))
        return out

    def commit(self, cursors: dict[str, Cursor]) -> None:
        """The batch committed: its cursors become the store's."""
        for topic in self.deleted_topics:
            for rid in [r for r, c in cursors.items() if c.snapshot.base.topic_id == topic]:
                del cursors[rid]
        for rid, cursor in self.cursors.items():
            if cursor is None:
                cursors.pop(rid, None)
            else:
                cursors[rid] = cursor


def plan_rows(ops: Sequence[Op], cursors: dict[str, Cursor]) -> Plan:
    """Plan the row writes of a batch (`PutRow`, `TouchRow`, and the cursors a `DeleteRow` or
    `DeleteTopic` ends); `cursors` is read, not changed (see `Plan.commit`)."""
    plan = Plan()
    compacted_long = False
    for op in ops:
        if isinstance(op, PutRow):
            _whole(plan, op.row, None)
        elif isinstance(op, TouchRow):
            snap = op.row
            cursor = cursors.get(snap.id)
            delta = None
            if cursor is not None and (cursor.pieces < MAX_PIECES or compacted_long):
                delta = snap.delta_since(cursor.snapshot, cursor.run_chars)
            if cursor is None or delta is None:
                compacted_long = compacted_long or cursor is not None
                _whole(plan, snap.freeze(), Cursor(snap, snap.run_chars(), 0))
                continue
            pieces = cursor.pieces
            if delta.chunks:
                text = json_encoder.encode(delta.chunks).decode()
                plan.pieces.append((snap.id, text))
                plan.content_bytes += len(text)
                pieces += 1
            base = snap.base
            if base is not cursor.snapshot.base and base != cursor.snapshot.base:
                values = row_values(base)
                plan.base.append((*values[2:6], *values[7:11], *values[12:], snap.id))
            plan.cursors[snap.id] = Cursor(snap, delta.run_chars, pieces)
        elif isinstance(op, DeleteRow):
            plan.cursors[op.row_id] = None
        elif isinstance(op, DeleteTopic):
            plan.deleted_topics.append(op.topic_id)
    return plan


def _whole(plan: Plan, row: MessageRow, cursor: Cursor | None) -> None:
    values = row_values(row)
    plan.whole.append(values)
    plan.compacted.append((row.id,))
    plan.content_bytes += len(values[6])
    plan.cursors[row.id] = cursor


# --- reads ---------------------------------------------------------------------------------------


def merge_pieces(db: apsw.Connection, rows: list[MessageRow]) -> list[MessageRow]:
    """`rows` with the pieces streamed since their whole parts were written appended (the
    rows' order kept)."""
    if not rows or db.execute("SELECT 1 FROM row_parts LIMIT 1").fetchone() is None:
        return rows
    pieces: dict[str, list[str]] = {}
    ids = [r.id for r in rows]
    for start in range(0, len(ids), 500):
        part = ids[start : start + 500]
        marks = ",".join("?" * len(part))
        for rid, chunks in db.execute(
            f"SELECT row_id, chunks FROM row_parts WHERE row_id IN ({marks}) ORDER BY id", part
        ):
            pieces.setdefault(rid, []).append(chunks)
    if not pieces:
        return rows
    return [
        r if r.id not in pieces else msgspec.structs.replace(r, parts=merged(r.parts, pieces[r.id]))
        for r in rows
    ]


def merged(parts: Iterable[Chunk], pieces: Iterable[str]) -> list[Chunk]:
    """Whole parts followed by the pieces' chunks, as the row's builder would have them."""
    builder = PartsBuilder(parts)
    for text in pieces:
        for chunk in _chunks_decoder.decode(text):
            builder.append(chunk)
    return builder.build()


def compact_all(db: apsw.Connection, load_row: Any) -> int:
    """Fold every row's pieces into its whole parts (after a crash, before anyone reads);
    returns how many rows had pieces. `load_row(row_id)` reads a row with its pieces."""
    ids = [rid for (rid,) in db.execute("SELECT DISTINCT row_id FROM row_parts")]
    for rid in ids:
        row = load_row(rid)
        if row is not None:
            db.execute(
                "UPDATE rows SET parts = ? WHERE id = ?",
                (json_encoder.encode(row.parts).decode(), rid),
            )
    db.execute("DELETE FROM row_parts")
    return len(ids)
