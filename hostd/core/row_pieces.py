"""A stored row read whole through `read-row`, whose pieces are bounded in bytes (sans-IO).

A snapshot or a history page delivers a row too big for one reply cut: its newest content
only, with `meta["truncated"] = {"omitted_parts": n, "omitted_chars": m}` (its first n parts
and the first m characters of part n left out; docs/protocol.md, "Limits"). The client
(`hostd.client.whole_rows`) and the one-shot CLI (`hostd export`) make such rows whole; this
module is the part of that which needs no I/O, so both drive the same rules.

Rules this module guards:

- Pieces come in order; a piece that starts inside a part (`offset` > 0) continues the last
  part of the previous piece, and the two are joined (text, thinking, tool output).
- Every piece moves the position (`next_part`, `next_offset`) forward, or the read fails with
  `ProtocolError` instead of looping.
- Positions count characters as the daemon does: code points (Python's `str` indexing).
- A cut row is made whole by reading only what was left out (`PieceReader(until=...)`,
  `head_of`) and putting it in front of what the window holds (`with_head`): the rest may still
  be growing (a live answer), the omitted head no longer changes.
"""

from __future__ import annotations

from typing import NamedTuple

import msgspec

from hostd_protocol.client_messages import MessageRow, RowContent
from hostd_protocol.common import Chunk, TextDelta, ThinkingDelta, ToolResult
from hostd_protocol.errors import ProtocolError
from hostd_protocol.limits import TRUNCATED_META

__all__ = ["Omitted", "PieceReader", "head_of", "omitted_of", "whole", "with_head"]


class Omitted(NamedTuple):
    """Where a cut row's kept content starts: its first `part` parts and the first `chars`
    characters of part `part` were left out."""

    part: int
    chars: int


def omitted_of(row: MessageRow) -> Omitted | None:
    """What `row` left out (`meta["truncated"]`), or None when it is whole."""
    cut = row.meta.get(TRUNCATED_META)
    if not isinstance(cut, dict):
        return None
    part, chars = cut.get("omitted_parts", 0), cut.get("omitted_chars", 0)
    if not isinstance(part, int) or not isinstance(chars, int):
        return None
    return Omitted(part, chars) if part > 0 or chars > 0 else None


def whole(row: MessageRow, parts: list[Chunk]) -> MessageRow:
    """`row` with all its `parts` and without the cut marker."""
    meta = {k: v for k, v in row.meta.items() if k != TRUNCATED_META}
    return msgspec.structs.replace(row, parts=parts, meta=meta)


class PieceReader:
    """Which `read-row` piece to ask for next, and the parts read so far (joined).

    Usage::

        reader = PieceReader(row_id)              # or until=omitted_of(row): the head only
        while (at := reader.next_piece()) is not None:
            reader.feed(<the reply to ReadRow(part=at[0], offset=at[1])>)
        parts = reader.parts                      # or reader.head()
    """

    def __init__(self, row_id: str, until: Omitted | None = None) -> None:
        self.row_id = row_id
        self.until = until
        self.parts: list[Chunk] = []
        self._at = (0, 0)
        self._done = False

    def next_piece(self) -> tuple[int, int] | None:
        """(`part`, `offset`) of the next piece to read; None once read far enough."""
        if self._done:
            return None
        if self.until is not None and self._at >= (self.until.part, self.until.chars):
            return None
        return self._at

    def feed(self, content: RowContent) -> None:
        """Take the piece read at `next_piece()`."""
        part, offset = self._at
        for i, piece in enumerate(content.parts):
            if i == 0 and offset and self.parts:
                self.parts[-1] = _join(self.parts[-1], piece)
            else:
                self.parts.append(piece)
        if content.done:
            self._done = True
            return
        if (content.next_part, content.next_offset) <= (part, offset):
            raise ProtocolError(f"read-row of {self.row_id} made no progress at {part}:{offset}")
        self._at = (content.next_part, content.next_offset)

    def head(self) -> list[Chunk] | None:
        """What the cut row left out (`until`), from the parts read; None when the stored row
        does not reach that far (it is not stored yet, or changed)."""
        assert self.until is not None
        return head_of(self.parts, self.until)


def head_of(parts: list[Chunk], until: Omitted) -> list[Chunk] | None:
    """The first `until.part` parts, then `until.chars` characters of the next one; None when
    `parts` is shorter than that."""
    head = list(parts[: until.part])
    if len(head) < until.part:
        return None
    if until.chars == 0:
        return head
    if until.part >= len(parts):
        return None
    cut = parts[until.part]
    text = _text_of(cut)
    if text is None or len(text) < until.chars:
        return None
    head.append(_with_text(cut, text[: until.chars]))
    return head


def with_head(head: list[Chunk], rest: list[Chunk], omitted: Omitted) -> list[Chunk]:
    """`head` (what a cut row left out) in front of `rest` (the parts a window holds, which
    start `omitted.chars` characters into part `omitted.part`)."""
    if omitted.chars > 0 and head and rest:
        return [*head[:-1], _join(head[-1], rest[0]), *rest[1:]]
    return [*head, *rest]


def _text_of(part: Chunk) -> str | None:
    if isinstance(part, ToolResult):
        return part.output
    if isinstance(part, (TextDelta, ThinkingDelta)):
        return part.text
    return None


def _with_text(part: Chunk, text: str) -> Chunk:
    if isinstance(part, ToolResult):
        return msgspec.structs.replace(part, output=text)
    return msgspec.structs.replace(part, text=text)


def _join(head: Chunk, tail: Chunk) -> Chunk:
    """One part delivered in two pieces, whole again."""
    if isinstance(head, TextDelta) and isinstance(tail, TextDelta):
        return TextDelta(text=head.text + tail.text)
    if isinstance(head, ThinkingDelta) and isinstance(tail, ThinkingDelta):
        return ThinkingDelta(text=head.text + tail.text)
    if isinstance(head, ToolResult) and isinstance(tail, ToolResult):
        return msgspec.structs.replace(head, output=head.output + tail.output)
    raise ProtocolError("read-row continued a part with a part of another kind")
