"""Rows a snapshot or history page delivered cut (`meta["truncated"]`: bigger than one reply)
are made whole with `read-row` (hostd.client.whole_rows, hostd.core.row_pieces): the pure
piece rules, then the real daemon in process with real scripted driver processes and a 5 MB
answer (windows attached before it, late, with events arriving while the head is read; a
topic deleted meanwhile; `all_rows`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest
import trio

from hostd.client import Client, Subscription, open_client
from hostd.client.whole_rows import complete_cut_rows
from hostd.core.row_pieces import Omitted, PieceReader, head_of, omitted_of, whole, with_head
from hostd.core.transcript import Transcript
from hostd.shell.paths import Paths
from hostd_protocol.client_messages import (
    MessageRow,
    RowContent,
    Snapshot,
    TopicDeleted,
    TopicEvent,
    TopicInfo,
    TurnEnded,
)
from hostd_protocol.common import Chunk, TextDelta, ThinkingDelta, ToolCall, ToolResult
from hostd_protocol.errors import ProtocolError
from hostd_protocol.limits import TRUNCATED_META
from hostd_scripted.driver import words_text
from tests.reliability.conftest import start_in_process

# --- the piece rules (pure) -------------------------------------------------------------------

#: Stored: thinking, then "😀é-hello world" (😀 is one character); a window holds " world":
#: 1 part and 8 characters left out.
STORED: list[Chunk] = [ThinkingDelta(text="hmm"), TextDelta(text="😀é-hello world")]
CUT = MessageRow(
    id="big", topic_id="t", role="assistant", status="pending", position=2,
    meta={TRUNCATED_META: {"omitted_parts": 1, "omitted_chars": 8}, "other": 1},
    parts=[TextDelta(text=" world")],
)


def test_the_head_is_read_in_pieces_up_to_the_cut_counting_code_points() -> None:
    omitted = omitted_of(CUT)
    assert omitted == Omitted(1, 8)
    reader = PieceReader("big", omitted)
    assert reader.next_piece() == (0, 0)
    reader.feed(RowContent(row_id="big", parts=[STORED[0], TextDelta(text="😀é")],
                           done=False, next_part=1, next_offset=2))
    assert reader.next_piece() == (1, 2)  # the text part continues in the next piece
    reader.feed(RowContent(row_id="big", parts=[TextDelta(text="-hello world")], part=1,
                           offset=2, done=False, next_part=1, next_offset=14))
    assert reader.next_piece() is None  # past the cut: the rest is what the window holds
    head = reader.head()
    assert head == [STORED[0], TextDelta(text="😀é-hello")]
    assert with_head(head, CUT.parts, omitted) == STORED


def test_a_read_that_makes_no_progress_fails_and_a_short_row_has_no_head() -> None:
    reader = PieceReader("big")
    with pytest.raises(ProtocolError, match=r"^read-row of big made no progress at 0:0$"):
        reader.feed(RowContent(row_id="big", parts=[], done=False))
    assert head_of([STORED[0], TextDelta(text="😀é")], Omitted(1, 8)) is None
    assert head_of([STORED[0]], Omitted(1, 8)) is None
    assert head_of([STORED[0]], Omitted(1, 0)) == [STORED[0]]


def test_restore_head_joins_a_cut_tool_output_and_refuses_a_whole_row() -> None:
    row = MessageRow(id="r", topic_id="t", role="assistant", status="success", position=1,
                     meta={TRUNCATED_META: {"omitted_parts": 0, "omitted_chars": 3}},
                     parts=[ToolResult(call_id="c", output="def")])
    t = Transcript(Snapshot(topic=TopicInfo(id="t"), seq=1, rows=[row]))
    assert t.restore_head("r", [ToolResult(call_id="c", output="abc")])
    restored = t.row("r")
    assert restored is not None and restored.meta == {}
    assert restored.parts == [ToolResult(call_id="c", output="abcdef")]
    assert not t.restore_head("r", [TextDelta(text="again")])
    assert not t.restore_head("nope", [])
    assert whole(CUT, STORED).meta == {"other": 1}


# --- the real daemon --------------------------------------------------------------------------

SIZE = 5_000_000
#: A 5 MB answer (one driver chunk; the host splits it into 64 Ki pieces), then a tool call
#: that waits for an approval, so the answer is still open (and grows again) when windows
#: attach; `/wait` keeps the turn running until stopped.
SCRIPT = f"/huge text {SIZE}\n/approve Bash\n/wait"
APPROVED = "approved: ran Bash."


def _answer(rows: list[MessageRow]) -> MessageRow:
    return next(r for r in rows if r.role == "assistant")


def _text(row: MessageRow) -> str:
    return "".join(p.text for p in row.parts if isinstance(p, TextDelta))


async def _until(sub: Subscription, done: Callable[[Snapshot | TopicEvent], bool]) -> None:
    async for item in sub:
        if done(item):
            return
    raise AssertionError("the subscription ended first")


async def test_a_5mb_answer_is_whole_in_live_and_late_windows_and_in_all_rows(
    nursery: trio.Nursery, paths: Paths
) -> None:
    with trio.fail_after(60):
        d = await start_in_process(nursery, paths)
        async with open_client(paths) as c, open_client(paths, client_name="late") as late:
            t = await c.create_topic(driver="scripted")
            async with c.attach(t.id) as live:
                await c.send(t.id, SCRIPT, "start")
                # 5 MB of events overflow the window's 4 MiB queue: the host tells it to
                # resync, and the new snapshot delivers the answer cut; it is read whole.
                await _until(live, lambda _: bool(live.transcript.approvals()))
                assert live.resyncs >= 1
                assert _text(_answer(live.transcript.rows())) == words_text(SIZE)
                approval = live.transcript.approvals()[0]

                async with late.attach(t.id, whole_rows=False) as raw:
                    cut = _answer(raw.transcript.rows())
                    assert omitted_of(cut) is not None, "the snapshot delivers it cut"
                    assert len(_text(cut)) < SIZE

                # A late window: the answer goes on (approved, more text) while it reads
                # the head; those events wait and apply after the head, in order.
                read_head = late._read_row_head

                async def approve_first(
                    topic_id: str, row_id: str, omitted: Omitted
                ) -> list[Chunk] | None:
                    await c.answer_approval(t.id, approval.id, True)
                    await _until(live, lambda _: _text(_answer(live.transcript.rows()))
                                 .endswith(APPROVED))
                    return await read_head(topic_id, row_id, omitted)

                late._read_row_head = approve_first  # type: ignore[method-assign]
                async with late.attach(t.id) as sub:
                    first = await sub.__anext__()
                    assert isinstance(first, Snapshot)
                    row = _answer(sub.transcript.rows())
                    assert omitted_of(row) is None and TRUNCATED_META not in row.meta
                    assert row.parts[0] == TextDelta(text=words_text(SIZE))
                    assert isinstance(row.parts[-1], ToolCall)  # not yet approved here
                    await _until(sub, lambda _: _text(_answer(sub.transcript.rows()))
                                 .endswith(APPROVED))
                    await c.stop(t.id)
                    await _until(sub, lambda item: isinstance(item, TurnEnded))
                    await _until(live, lambda item: isinstance(item, TurnEnded))
                    late_row = _answer(sub.transcript.rows())

            stored = await late.all_rows(t.id)
            stored_row = _answer(stored)
            assert TRUNCATED_META not in stored_row.meta
            assert stored_row.parts == await late.read_row(t.id, stored_row.id)
            assert _text(stored_row) == words_text(SIZE) + APPROVED
            live_row = _answer(live.transcript.rows())
            for window_row in (late_row, live_row):
                assert window_row.parts == stored_row.parts
                assert window_row.meta == stored_row.meta
                assert window_row.status == stored_row.status == "stopped"
        await d.stop()


async def _big_answer(c: Client) -> TopicInfo:
    """A topic whose one answer (5 MB) is finished."""
    t = await c.create_topic(driver="scripted")
    async with c.attach(t.id) as live:
        sent = await c.send(t.id, f"/huge text {SIZE}", "start")
        # Its turn-ended, or (the window was resynced after it) a snapshot without it.
        await _until(live, lambda item: (
            isinstance(item, TurnEnded) and item.turn_id == sent.turn_id
        ) or (
            isinstance(item, Snapshot) and item is not live.first
            and item.active_turn_id != sent.turn_id
        ))
    return t


async def test_hostd_export_and_history_show_a_cut_row_whole(
    nursery: trio.Nursery, paths: Paths, home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from hostd.cli.main import main

    with trio.fail_after(60):
        d = await start_in_process(nursery, paths)
        async with open_client(paths) as c:
            t = await _big_answer(c)
        out = home / "export.json"
        argv = ["--home", str(home), "export", t.id, "--format", "json", "-o", str(out)]
        assert await trio.to_thread.run_sync(main, argv) == 0
        exported = msgspec.json.decode(out.read_bytes())["messages"]
        assert [m["role"] for m in exported] == ["user", "assistant"]
        assert exported[1]["parts"] == [{"type": "text", "text": words_text(SIZE)}]
        assert TRUNCATED_META not in exported[1].get("meta", {})
        capsys.readouterr()
        argv = ["--home", str(home), "history", t.id, "--json"]
        assert await trio.to_thread.run_sync(main, argv) == 0
        # The page holds the answer alone (it fills the 4 MiB), whole.
        (shown,) = msgspec.json.decode(capsys.readouterr().out)["rows"]
        assert shown["id"] == exported[1]["id"] and shown["meta"] == {}
        assert shown["parts"] == exported[1]["parts"]
        await d.stop()


async def test_a_cut_row_gone_meanwhile_stays_cut_without_error(
    nursery: trio.Nursery, paths: Paths
) -> None:
    with trio.fail_after(60):
        d = await start_in_process(nursery, paths)
        async with open_client(paths) as c, open_client(paths, client_name="late") as late:
            t = await _big_answer(c)
            # A row id the store does not hold (not_found), read by the real daemon.
            async with late.attach(t.id, whole_rows=False) as raw:
                assert raw.snapshot is not None
                cut = _answer(raw.snapshot.rows)
                gone = msgspec.structs.replace(cut, id="r-gone")
                snapshot = msgspec.structs.replace(raw.snapshot, rows=[gone])
                transcript = Transcript(snapshot)
                await complete_cut_rows(late, t.id, snapshot, transcript)
                assert transcript.row("r-gone") == gone

            # The topic deleted by another window while this one reads the head.
            read_head = late._read_row_head

            async def delete_first(
                topic_id: str, row_id: str, omitted: Omitted
            ) -> list[Chunk] | None:
                await c.delete_topic(t.id)
                return await read_head(topic_id, row_id, omitted)

            late._read_row_head = delete_first  # type: ignore[method-assign]
            async with late.attach(t.id) as sub:
                first = await sub.__anext__()
                assert isinstance(first, Snapshot)
                assert _answer(sub.transcript.rows()) == _answer(first.rows) == cut
                await _until(sub, lambda item: isinstance(item, TopicDeleted))
        await d.stop()
