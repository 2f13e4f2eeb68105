"""Payloads near or over the frame limit never wedge a topic or a connection (issue 14,
HIGH 3). Real daemon (in process), real scripted driver processes, real socket, both wire
encodings where the size differs.

Limits are in `hostd_protocol.limits` and docs/protocol.md ("Limits").
"""

from __future__ import annotations

import os
from pathlib import Path

import msgspec
import pytest
import trio

from hostd.client import Client, open_client
from hostd.shell.paths import Paths
from hostd.shell.store import store as st
from hostd_dev.stress.dbcheck import row_text
from hostd_protocol.client_messages import (
    ErrorReply,
    MessageRow,
    RowAppended,
    Snapshot,
    TopicEvent,
    TopicInfo,
    TurnEnded,
)
from hostd_protocol.common import HistoryMessage, TextDelta, ToolCall, ToolResult
from hostd_protocol.errors import InvalidArgument, PayloadTooLarge
from hostd_protocol.framing import DEFAULT_MAX_FRAME_SIZE
from hostd_protocol.limits import (
    MAX_CHUNK_CHARS,
    MAX_DEPTH,
    MAX_MESSAGE_CHARS,
    MAX_REPLY_BYTES,
    MAX_SEND_BYTES,
    MAX_TOOL_INPUT_BYTES,
    MAX_TOOL_OUTPUT_CHARS,
    TRUNCATED_MARK,
    TRUNCATED_META,
)
from hostd_scripted.driver import words_text
from tests.reliability.conftest import run_turn, start_in_process
from tests.shell.test_bad_input import Raw

pytestmark = pytest.mark.e2e

#: A driver chunk as big as the driver frame allows (8 MiB minus the envelope).
NEAR_FRAME = DEFAULT_MAX_FRAME_SIZE - 200


async def _answer_row(c: Client, topic_id: str, turn_id: str) -> MessageRow:
    page = await c.history(topic_id, limit=10)
    return next(r for r in page.rows if r.turn_id == turn_id and r.role == "assistant")


async def _turn(c: Client, topic_id: str, text: str) -> tuple[MessageRow, list[TopicEvent]]:
    """Send and wait for the turn's end: its `turn-ended`, or a fresh snapshot (the window
    was resynced: 8 MiB of events in one driver read exceed its 4 MiB queue) without it
    running. Returns the stored answer row and the events seen."""
    events: list[TopicEvent] = []
    snapshots = 0
    async with c.attach(topic_id) as sub:
        sent = await c.send(topic_id, text, "start")
        async for item in sub:
            if isinstance(item, Snapshot):
                snapshots += 1
                if snapshots > 1 and item.active_turn_id != sent.turn_id:
                    break
                continue
            events.append(item)
            if isinstance(item, TurnEnded) and item.turn_id == sent.turn_id:
                break
    return await _answer_row(c, topic_id, sent.turn_id), events


async def test_a_near_frame_driver_chunk_is_split_and_the_topic_stays_usable(
    nursery: trio.Nursery, paths: Paths
) -> None:
    with trio.fail_after(90):
        d = await start_in_process(nursery, paths)
        async with open_client(paths) as c:
            t = await c.create_topic(driver="scripted")
            row, events = await _turn(c, t.id, f"/huge text {NEAR_FRAME}\nq")
            assert row.status == "success", row
            assert row.meta[TRUNCATED_META]["omitted_chars"] > 0  # a page holds 4 MiB
            assert row_text(await c.read_row(t.id, row.id)) == words_text(NEAR_FRAME)
            # (Its 8 MiB of events arrive in one read: more than a window's 4 MiB queue, so
            # the window was resynced. A 1 MB delta shows the split.)
            row, events = await _turn(c, t.id, "/huge text 1000000\nq")
            sizes = [len(ev.chunk.text) for ev in events
                     if isinstance(ev, RowAppended) and isinstance(ev.chunk, TextDelta)]
            assert sum(sizes) == 1_000_000 and max(sizes) == MAX_CHUNK_CHARS
            # The topic is not wedged: the next turn works.
            again = await run_turn(c, t.id, "/text still here\nq")
            assert again.end.status == "success"
            assert (await c.get_topic(t.id)).state == "idle"
            # Tool output, tool input, notices and errors near the frame limit are cut.
            row, events = await _turn(
                c, t.id, f"/huge tool {NEAR_FRAME}\n/huge input {NEAR_FRAME}\n"
                f"/huge notice {NEAR_FRAME}\n/huge error {NEAR_FRAME}\nq"
            )
            assert row.status == "error"
            assert len(row.error) <= MAX_MESSAGE_CHARS + 200
            assert row.error.endswith(TRUNCATED_MARK)
            results = [p for p in row.parts if isinstance(p, ToolResult)]
            assert len(results[0].output) == MAX_TOOL_OUTPUT_CHARS
            calls = [p for p in row.parts if isinstance(p, ToolCall)]
            assert set(calls[1].input) == {"truncated"}
            assert len(calls[1].input["truncated"]) <= MAX_TOOL_INPUT_BYTES
        await d.stop()


async def test_sends_over_the_limit_are_refused_before_anything_is_stored(
    nursery: trio.Nursery, paths: Paths
) -> None:
    with trio.fail_after(60):
        d = await start_in_process(nursery, paths)
        async with open_client(paths) as c:
            t = await c.create_topic(driver="scripted")
            async with c.attach(t.id) as sub:
                for size in (MAX_SEND_BYTES + 1, NEAR_FRAME):
                    with pytest.raises(PayloadTooLarge, match=rf"^the message is {size} bytes; "
                                       rf"the limit is {MAX_SEND_BYTES} bytes$"):
                        await c.send(t.id, "x" * size, "start")
                assert (await c.history(t.id)).rows == []
                assert (await c.get_topic(t.id)).state == "idle"
                # The connection and its subscription survive: a send at the limit works.
                ok = await c.send(t.id, "/text fine\n" + "y" * (MAX_SEND_BYTES - 20), "start")
                async for ev in sub:
                    if isinstance(ev, TurnEnded) and ev.turn_id == ok.turn_id:
                        assert ev.status == "success"
                        break
            history = [HistoryMessage(role="user", text="h" * 1_000_000) for _ in range(3)]
            with pytest.raises(PayloadTooLarge, match=r"^the history sent along is 3000000 "):
                await c.send(t.id, "q", "start", history=history)
            assert len((await c.history(t.id)).rows) == 2  # only the accepted send's turn
        await d.stop()


async def test_a_topic_with_a_huge_answer_can_always_be_attached_and_paged(
    nursery: trio.Nursery, paths: Paths
) -> None:
    """A 9.4 MB answer (many ordinary chunks) and then more rows: attach with any max_rows,
    history with any limit, before and after a restart, in both encodings."""
    with trio.fail_after(120):
        d = await start_in_process(nursery, paths)
        async with open_client(paths) as c:
            t = await c.create_topic(driver="scripted")
            big = await run_turn(c, t.id, "/chunks 2350 size=4000 rate=0\nq")
            assert big.end.status == "success"
            small = await run_turn(c, t.id, "/text small\nq")
            assert small.end.status == "success"
            big_row_id = next(r.id for r in big.rows
                              if r.turn_id == big.end.turn_id and r.role == "assistant")
        await d.stop()
        expected = words_text(2350 * 4000)
        assert len(expected) > 9_000_000

        for life in range(2):  # before and after a restart
            d = await start_in_process(nursery, paths)
            for encoding in ("msgpack", "json"):
                async with open_client(paths, encoding=encoding) as c:
                    for max_rows in (1, 3, 500):
                        async with c.attach(t.id, max_rows=max_rows) as sub:
                            snap = sub.snapshot
                            assert snap is not None and snap.rows, (life, encoding, max_rows)
                    # The huge row alone: attach shows its newest content, cut and marked.
                    page = await c.history(t.id, limit=1000)
                    assert page.rows and page.has_more
                    positions: list[int] = []
                    before = None
                    seen_big = None
                    while True:  # paging always moves, down to the first row
                        page = await c.history(t.id, before_position=before, limit=1000)
                        if not page.rows:
                            break
                        positions[:0] = [r.position for r in page.rows]
                        for r in page.rows:
                            if r.id == big_row_id:
                                seen_big = r
                        if not page.has_more:
                            break
                        before = page.rows[0].position
                    assert positions == sorted(set(positions)) and len(positions) == 4
                    assert seen_big is not None
                    marker = seen_big.meta.get(TRUNCATED_META)
                    assert marker is not None and marker["omitted_chars"] > 0
                    shown = row_text(seen_big.parts)
                    assert expected.endswith(shown) and len(shown) < MAX_REPLY_BYTES
                    # The whole row, in pieces.
                    whole = await c.read_row(t.id, big_row_id)
                    assert row_text(whole) == expected
            await d.stop()


async def test_a_listing_over_the_frame_limit_pages_and_survives_a_huge_stored_topic(
    nursery: trio.Nursery, paths: Paths
) -> None:
    """Topics stored before the limits existed (a 9 MB title, 3 MB of options) and enough
    topics to exceed a frame together: every client still lists all of them."""
    paths.ensure()
    store = st.Store(paths.db_path)
    try:
        huge = TopicInfo(id="tp-huge", title="T" * 9_000_000, driver="scripted",
                         options={"blob": "o" * 3_000_000}, created_at=1.0, updated_at=1.0)
        ops: list[st.Op] = [st.PutTopic(huge)]
        ops += [st.PutTopic(TopicInfo(id=f"tp-{i:03d}", title=f"{i}" + "t" * 60_000,
                                      driver="scripted", created_at=2.0 + i, updated_at=2.0 + i))
                for i in range(150)]
        store.apply(ops)
    finally:
        store.close()
    with trio.fail_after(60):
        d = await start_in_process(nursery, paths)
        for encoding in ("msgpack", "json"):
            async with open_client(paths, encoding=encoding) as c:
                topics = await c.list_topics()
                assert [t.id for t in topics] == ["tp-huge"] + [f"tp-{i:03d}" for i in range(150)]
                assert topics[0].title.endswith(TRUNCATED_MARK)
                assert topics[0].options == {"truncated": True}
                assert (await c.ping()) is not None
        await d.stop()


async def test_a_reply_that_does_not_fit_is_an_error_and_the_connection_lives_on(
    nursery: trio.Nursery, paths: Paths
) -> None:
    """Belt and braces behind the limits: a handler whose result cannot be encoded in one
    frame (a bug) costs that request a typed error, never the connection or its
    subscriptions."""
    from hostd_protocol.client_messages import Status, StatusResult

    with trio.fail_after(60):
        d = await start_in_process(nursery, paths)

        async def huge_status(conn: object, msg: Status) -> StatusResult:
            return StatusResult(pid=1, version="x" * (DEFAULT_MAX_FRAME_SIZE + 10), uptime_s=0)

        async with open_client(paths) as c:
            t = await c.create_topic(driver="scripted")
            async with c.attach(t.id) as sub:
                d.daemon._handlers[Status] = huge_status
                with pytest.raises(PayloadTooLarge, match=r"^the reply does not fit in one frame"):
                    await c.status()
                sent = await c.send(t.id, "/text after the error\nq", "start")
                async for ev in sub:  # the subscription still delivers
                    if isinstance(ev, TurnEnded) and ev.turn_id == sent.turn_id:
                        assert ev.status == "success"
                        break
            assert await c.ping()
        await d.stop()


def _nested(depth: int) -> dict[str, object]:
    value: dict[str, object] = {}
    for _ in range(depth):
        value = {"a": value}
    return value


async def test_deep_or_huge_request_fields_are_refused_and_never_break_a_listing(
    nursery: trio.Nursery, paths: Paths
) -> None:
    """Issue 14 item 4: options nested ~980 deep (or too big, or a 1 MB title) get a typed
    error and are not stored; a topic stored with such options before the limits existed
    never breaks `list-topics` or `attach`, also after a restart."""
    paths.ensure()
    store = st.Store(paths.db_path)
    try:
        store.apply([st.PutTopic(TopicInfo(id="tp-deep", title="deep", driver="scripted",
                                           options=_nested(800), created_at=1.0))])
    finally:
        store.close()
    with trio.fail_after(60):
        for _life in range(2):
            d = await start_in_process(nursery, paths)
            async with open_client(paths) as c:
                # Built as bytes: encoding it needs as much stack as decoding it does.
                raw = await Raw.connect(paths)
                await raw.hello()
                body = (b"\x83\xa4type\xaccreate-topic\xa2id\x07\xa7options"
                        + b"\x81\xa1a" * 980 + b"\x80")
                await raw.send_body(body)
                reply = await raw.recv()
                assert isinstance(reply, ErrorReply) and reply.id == 7, reply
                assert reply.code == "invalid_message", reply
                assert reply.message == "invalid message: it nests maps or arrays too deeply"
                with pytest.raises(InvalidArgument, match=r"^the request nests maps or arrays "
                                   rf"deeper than {MAX_DEPTH} levels$"):
                    await c.create_topic(driver="scripted", options=_nested(MAX_DEPTH + 1))
                await raw.send_body(b"\x82\xa4type\xa4ping\xa2id\x08")
                assert (await raw.recv()).id == 8  # the connection lives on
                await raw.stream.aclose()
                with pytest.raises(PayloadTooLarge, match=r"^options are \d+ bytes encoded"):
                    await c.create_topic(driver="scripted", options={"x": "o" * 100_000})
                with pytest.raises(PayloadTooLarge, match=r"^title is 1000000 characters"):
                    await c.create_topic(driver="scripted", title="t" * 1_000_000)
                # As deep as allowed, under an option the scripted driver takes.
                ok = await c.create_topic(driver="scripted",
                                          options={"scenario": _nested(MAX_DEPTH - 2)})
                topics = {t.id: t for t in await c.list_topics()}
                assert topics["tp-deep"].options == {"truncated": True}
                assert ok.id in topics
                assert len(topics) == 2 + _life  # nothing refused was stored
                async with c.attach("tp-deep") as sub:
                    assert sub.snapshot is not None
            await d.stop()


async def test_low_items_before_position_and_relative_working_dir(
    nursery: trio.Nursery, paths: Paths, tmp_path: Path
) -> None:
    """Issue 14 item 10: `before_position` >= 2**63 is a typed error (not internal_error); a
    relative working_dir is refused by the daemon and resolved by the client library."""
    with trio.fail_after(30):
        d = await start_in_process(nursery, paths)
        async with open_client(paths) as c:
            t = await c.create_topic(driver="scripted")
            for bad in (2**63, 2**64 - 1, -1):
                with pytest.raises(InvalidArgument, match=r"^before_position must be between"):
                    await c.history(t.id, before_position=bad)
            raw = await Raw.connect(paths)
            await raw.hello()
            await raw.send_body(msgspec.msgpack.encode(
                {"type": "create-topic", "id": 5, "driver": "scripted", "working_dir": "rel/dir"}
            ))
            reply = await raw.recv()
            assert isinstance(reply, ErrorReply) and reply.code == "invalid_argument", reply
            assert reply.message.startswith("working_dir must be an absolute path")
            await raw.stream.aclose()
            here = os.getcwd()
            os.chdir(tmp_path)
            (tmp_path / "proj").mkdir()  # a chosen working dir must exist
            try:
                rel = await c.create_topic(driver="scripted", working_dir="proj")
            finally:
                os.chdir(here)
            assert rel.working_dir == str(tmp_path / "proj")
        await d.stop()
