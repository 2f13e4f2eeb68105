"""Rows as they grow: `PartsBuilder` merges streamed chunks into parts, `LiveRow` is a row
whose parts grow, `RowSnapshot` is a live row as it was at one moment. One definition for the
host (`hostd.core.topic_runtime` keeps its rows as `LiveRow`s) and every window
(`hostd.core.transcript`), so a window's rows equal the host's.

Rules this module guards:

- Appending a chunk is O(1) however long the answer gets (the open text run is a list of
  strings, joined only when the parts are built).
- A builder's lists only ever grow: nothing is changed in place but by `append`; a join or a
  closed run puts a *new* list in its place. So a snapshot is O(1) (the lists and their
  lengths) and stays exactly what it was while the row goes on growing: the store gets one
  per streamed chunk, keeps the newest per row, and builds it once per flush.
- Because of the rule above, a later snapshot of the same builder *extends* an earlier one:
  `RowSnapshot.delta_since` gives the chunks that turn the earlier content into the later one
  in O(new content), which is what the store appends at a flush instead of the whole row.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple, TypeAlias

import msgspec

from hostd_protocol.client_messages import MessageRow
from hostd_protocol.common import Attachment, Chunk, TextDelta, ThinkingDelta

__all__ = ["LiveRow", "PartsBuilder", "RowDelta", "RowSnapshot"]

_TextChunk: TypeAlias = TextDelta | ThinkingDelta


class PartsBuilder:
    """The growing parts of one row, cheap to append to.

    The open text (or thinking) run is kept as a list of strings and joined only when the parts
    are built, so appending a chunk is O(1) however long the answer gets.
    """

    __slots__ = ("_buf", "_done", "_kind")

    def __init__(self, parts: Iterable[Chunk] = ()) -> None:
        self._done: list[Chunk] = []
        self._kind: type[_TextChunk] | None = None
        self._buf: list[str] = []
        for part in parts:
            self.append(part)

    def append(self, chunk: Chunk) -> bool:
        """Add one chunk; False when it carries nothing (an empty text delta) and was dropped."""
        if isinstance(chunk, TextDelta | ThinkingDelta):
            if not chunk.text:
                return False
            kind = type(chunk)
            if kind is self._kind:
                self._buf.append(chunk.text)
            else:
                self._close_run()
                self._kind = kind
                self._buf = [chunk.text]
            return True
        self._close_run()
        self._done.append(chunk)
        return True

    def build(self) -> list[Chunk]:
        """The parts as an immutable-row-ready list (a new list each call)."""
        parts = list(self._done)
        if self._kind is not None:
            if len(self._buf) > 1:
                # Join once and keep the result, so the next build does not join again.
                self._buf = ["".join(self._buf)]
            parts.append(self._kind(text=self._buf[0]))
        return parts

    def snapshot(self, base: MessageRow) -> RowSnapshot:
        """`base` with these parts as they are now, in O(1) (see the module docstring)."""
        return RowSnapshot(base, self._done, len(self._done), self._kind, self._buf, len(self._buf))

    def text(self) -> str:
        """All visible answer text (TextDelta parts), joined; thinking and tools left out."""
        return "".join(p.text for p in self.build() if isinstance(p, TextDelta))

    def __bool__(self) -> bool:
        return bool(self._done) or self._kind is not None

    def _close_run(self) -> None:
        if self._kind is not None:
            self._done.append(self._kind(text="".join(self._buf)))
            self._kind = None
            self._buf = []


class LiveRow:
    """A mutable row: its fields as an immutable `MessageRow` (without parts) plus a builder.

    `freeze()` builds the full `MessageRow` and caches it until the next change.
    """

    __slots__ = ("_cache", "base", "parts")

    def __init__(self, row: MessageRow) -> None:
        self.base: MessageRow = msgspec.structs.replace(row, parts=[]) if row.parts else row
        self.parts = PartsBuilder(row.parts)
        self._cache: MessageRow | None = row

    @property
    def id(self) -> str:
        return self.base.id

    @property
    def position(self) -> int:
        return self.base.position

    @property
    def status(self) -> str:
        return self.base.status

    def append(self, chunk: Chunk) -> bool:
        """Append a chunk to the parts; False if it was empty and dropped."""
        if self.parts.append(chunk):
            self._cache = None
            return True
        return False

    def set_parts(self, parts: Iterable[Chunk]) -> None:
        self.parts = PartsBuilder(parts)
        self._cache = None

    def update(self, **changes: object) -> None:
        """Change fields other than `parts` (see `MessageRow`)."""
        self.base = msgspec.structs.replace(self.base, **changes)
        self._cache = None

    def freeze(self) -> MessageRow:
        if self._cache is None:
            self._cache = msgspec.structs.replace(self.base, parts=self.parts.build())
        return self._cache

    def snapshot(self) -> RowSnapshot:
        """The row as it is now, in O(1); `RowSnapshot.freeze()` builds it later."""
        return self.parts.snapshot(self.base)


class RowSnapshot(msgspec.Struct, frozen=True, gc=False):
    """A `LiveRow` as it was when `LiveRow.snapshot()` was called: its fields (`base`, an
    immutable `MessageRow` without parts) and the first `n_done` / `n_run` items of its
    builder's append-only lists. It shares those lists with the live row, never changes them,
    and holds no reference to the row or its runtime. (A Struct, not a dataclass: one is made
    per streamed chunk, and a Struct is made several times faster; untracked by the cyclic GC,
    `gc=False`: it refers to lists that never refer back to it, so it is never in a cycle.)"""

    base: MessageRow
    done: list[Chunk]
    n_done: int
    kind: type[_TextChunk] | None
    run: list[str]
    n_run: int

    @property
    def id(self) -> str:
        return self.base.id

    def freeze(self) -> MessageRow:
        """The full `MessageRow` of that moment (a new one each call: build it once)."""
        parts = self.done[: self.n_done]
        if self.kind is not None:
            parts.append(self.kind(text="".join(self.run[: self.n_run])))
        return msgspec.structs.replace(self.base, parts=parts)

    def run_chars(self) -> int:
        """Characters in the open text run of this snapshot (O(chunks in the run))."""
        return sum(map(len, self.run[: self.n_run])) if self.kind is not None else 0

    def delta_since(self, prev: RowSnapshot, prev_run_chars: int) -> RowDelta | None:
        """The chunks that turn `prev`'s content into this snapshot's, in O(new content), or
        None when this snapshot does not extend `prev` (another builder: the parts were
        replaced, or `prev` is not older). `prev_run_chars` is `prev.run_chars()`, carried by
        the caller so it is not recounted.

        `PartsBuilder(prev_parts + chunks).build()` equals this snapshot's parts: the chunks are
        the rest of `prev`'s open run (merged into it by the builder), then the closed parts
        that came after, then this snapshot's open run.
        """
        if self.done is not prev.done or self.n_done < prev.n_done:
            return None
        chunks: list[Chunk] = []
        n0 = prev.n_done
        if self.n_done == n0:
            if prev.kind is not None:
                if self.kind is not prev.kind:
                    return None  # a run is only ever left by closing it (n_done grows)
                if self.run is prev.run:
                    if self.n_run < prev.n_run:
                        return None
                    rest = "".join(self.run[prev.n_run : self.n_run])
                else:
                    # The builder joined its run (`build`): the new list starts with the old
                    # text; only the characters after what `prev` held are new.
                    head = self.run[0] if self.n_run else ""
                    if len(head) < prev_run_chars:
                        return None
                    rest = head[prev_run_chars:] + "".join(self.run[1 : self.n_run])
                if rest:
                    chunks.append(self.kind(text=rest))
                return RowDelta(chunks, prev_run_chars + len(rest))
        else:
            if prev.kind is not None:
                # `prev`'s open run was closed: it is the first new closed part.
                closed = self.done[n0]
                if not isinstance(closed, prev.kind) or len(closed.text) < prev_run_chars:
                    return None
                if len(closed.text) > prev_run_chars:
                    chunks.append(prev.kind(text=closed.text[prev_run_chars:]))
                n0 += 1
            chunks.extend(self.done[n0 : self.n_done])
        run_chars = 0
        if self.kind is not None:
            text = "".join(self.run[: self.n_run])
            chunks.append(self.kind(text=text))
            run_chars = len(text)
        return RowDelta(chunks, run_chars)


class RowDelta(NamedTuple):
    """What `RowSnapshot.delta_since` returns: the chunks to append, and the characters of
    the newer snapshot's open run (the next call's `prev_run_chars`)."""

    chunks: list[Chunk]
    run_chars: int


def attachments_of(meta: dict[str, Any]) -> list[Attachment]:
    """The images stored with a user row (`meta["attachments"]`, as `send` took them); an
    entry that no longer decodes is left out rather than failing the turn."""
    out: list[Attachment] = []
    for item in meta.get("attachments") or ():
        try:
            out.append(msgspec.convert(item, Attachment))
        except msgspec.ValidationError:
            continue
    return out
