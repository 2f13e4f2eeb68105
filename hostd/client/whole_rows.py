"""Rows the daemon delivered cut, read whole: `read_row`, `all_rows`, and a subscription's
snapshot made whole before it is yielded (`complete_cut_rows`).

A snapshot or a history page holds at most `MAX_REPLY_BYTES`; a row bigger than that arrives
with its newest content only and `meta["truncated"]` (docs/protocol.md, "Limits"). The rules
of reading pieces and joining them are `hostd.core.row_pieces` (sans-IO); this module does
the requests.

Rules it guards:

- A subscription reads only what a cut row left out (its head: it no longer changes) and
  puts it in front of what the transcript holds, before the snapshot is yielded. Events that
  arrive meanwhile wait in the subscription's channel and apply after, in order.
- A row gone meanwhile (`not_found`), a topic deleted meanwhile (`unknown_topic`; its
  `topic-deleted` follows) or a daemon without `read-row` (`unknown_request`) leaves the row
  cut, as delivered: never an error for the window.

`RowReading` is a mixin of `Client`, so the sync client derives its methods like every other
(`sync_client.blocking`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hostd.core.row_pieces import Omitted, PieceReader, omitted_of, whole
from hostd_protocol.client_messages import History, HistoryResult, MessageRow, ReadRow, RowContent
from hostd_protocol.common import Chunk
from hostd_protocol.errors import NotFound, UnknownRequest, UnknownTopic

if TYPE_CHECKING:
    from hostd.core.transcript import Transcript
    from hostd_protocol.client_messages import Snapshot

__all__ = ["RowReading", "complete_cut_rows"]

#: Rows asked for per `history` page by `all_rows` (the daemon still bounds a page in bytes).
PAGE_ROWS = 500


class RowReading:
    """Requests that read stored rows whole."""

    if TYPE_CHECKING:  # provided by Client

        async def _request(self, msg: Any) -> Any: ...

    async def _read_pieces(self, topic_id: str, reader: PieceReader) -> None:
        while (at := reader.next_piece()) is not None:
            r = await self._request(
                ReadRow(id=0, topic_id=topic_id, row_id=reader.row_id, part=at[0], offset=at[1])
            )
            assert isinstance(r, RowContent)
            reader.feed(r)

    async def read_row(self, topic_id: str, row_id: str) -> list[Chunk]:
        """A stored row's whole content, read in bounded pieces (for a row a snapshot or
        history page delivered cut, `meta["truncated"]`). Pieces of one part are joined."""
        reader = PieceReader(row_id)
        await self._read_pieces(topic_id, reader)
        return reader.parts

    async def _read_row_head(
        self, topic_id: str, row_id: str, omitted: Omitted
    ) -> list[Chunk] | None:
        """Only what a cut row left out; None when the stored row does not reach that far."""
        reader = PieceReader(row_id, omitted)
        await self._read_pieces(topic_id, reader)
        return reader.head()

    async def all_rows(self, topic_id: str, *, all: bool = False) -> list[MessageRow]:
        """Every row of the topic, oldest first, each whole (a row a page delivered cut is
        read with `read_row`). With `all`, superseded rows too (marked `superseded`)."""
        pages: list[list[MessageRow]] = []
        before: int | None = None
        while True:
            page = await self._request(
                History(id=0, topic_id=topic_id, before_position=before, limit=PAGE_ROWS,
                        all=all)
            )
            assert isinstance(page, HistoryResult)
            pages.append(page.rows)
            if not page.has_more or not page.rows:
                break
            before = page.rows[0].position
        rows = [row for page_rows in reversed(pages) for row in page_rows]
        for i, row in enumerate(rows):
            if omitted_of(row) is not None:
                rows[i] = whole(row, await self.read_row(topic_id, row.id))
        return rows


async def complete_cut_rows(
    client: RowReading, topic_id: str, snapshot: Snapshot, transcript: Transcript
) -> None:
    """Read what the snapshot's cut rows left out into `transcript` (see the module's
    rules)."""
    for row in snapshot.rows:
        omitted = omitted_of(row)
        if omitted is None:
            continue
        try:
            head = await client._read_row_head(topic_id, row.id, omitted)
        except (NotFound, UnknownTopic, UnknownRequest):
            continue  # gone meanwhile (its removal event follows), or an old daemon
        if head is not None:
            transcript.restore_head(row.id, head)
