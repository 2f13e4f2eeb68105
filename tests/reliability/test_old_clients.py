"""A window whose client declared an older protocol (issue 36): it is never sent an event it
would skip as unknown when skipping it leaves its transcript wrong. `rows-removed` (a rewind)
needs 1.4; an older window gets `resync` instead, live and in a replay, and its fresh
snapshot holds the rows a 1.4 window holds. Real daemon in process, scripted driver, raw
sockets speaking frames by hand as an old client would."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
import trio

from hostd.client import open_client
from hostd.shell.paths import Paths
from hostd_protocol.client_messages import (
    AttachResult,
    Reply,
    Resync,
    RowsRemoved,
    Welcome,
)
from tests.reliability.conftest import run_turn, start_in_process
from tests.shell.test_bad_input import Raw

pytestmark = pytest.mark.e2e


async def old_window(paths: Paths, topic_id: str, since: int | None = None) -> tuple[Raw, Any]:
    """A connection that says hello as protocol 1.3 and attaches to `topic_id`."""
    raw = await Raw.connect(paths)
    await raw.send_body(msgspec.msgpack.encode({"type": "hello", "protocol_version": [1, 3]}))
    assert isinstance(await raw.recv(), Welcome)
    attach: dict[str, Any] = {"type": "attach", "id": 1, "topic_id": topic_id}
    if since is not None:
        attach["since"] = since
    await raw.send_body(msgspec.msgpack.encode(attach))
    reply = await raw.recv()
    assert isinstance(reply, Reply) and isinstance(reply.result, AttachResult), reply
    return raw, reply.result


async def test_an_older_window_gets_resync_instead_of_rows_removed(
    nursery: trio.Nursery, paths: Paths
) -> None:
    with trio.fail_after(60):
        d = await start_in_process(nursery, paths)
        async with open_client(paths) as c:
            t = await c.create_topic(driver="scripted")
            await run_turn(c, t.id, "/text one")
            await run_turn(c, t.id, "/text two")
            rows = (await c.history(t.id)).rows
            assert [r.role for r in rows] == ["user", "assistant"] * 2
            live, first = await old_window(paths, t.id)
            assert first.mode == "snapshot" and len(first.snapshot.rows) == 4
            before = first.snapshot.seq

            async with c.attach(t.id) as sub:  # a 1.4 window (this client)
                cut = await c.rewind(t.id, rows[2].id, include=True)
                assert cut == [rows[2].id, rows[3].id]
                async for ev in sub:
                    if isinstance(ev, RowsRemoved):
                        assert ev.row_ids == cut
                        break
                assert [r.id for r in sub.transcript.rows()] == [rows[0].id, rows[1].id]

            # The 1.3 window: no rows-removed (it would skip it and keep the rows), a resync.
            resync = await live.recv()
            assert isinstance(resync, Resync) and resync.topic_id == t.id, resync
            assert resync.reason == (
                f"rows-removed (seq {resync.seq}) needs protocol 1.4 and this window's client "
                "speaks 1.3; attach without since for a fresh snapshot"
            )
            again, snap = await old_window(paths, t.id)
            assert [r.id for r in snap.snapshot.rows] == [rows[0].id, rows[1].id]

            # Replaying from before the rewind: the same, a resync and no rows-removed.
            late, replay = await old_window(paths, t.id, since=before)
            assert replay.mode == "replay"
            ev = await late.recv()
            assert isinstance(ev, Resync) and ev.reason.startswith("rows-removed (seq "), ev
            # A 1.4 window replaying the same gets the event itself.
            async with c.attach(t.id, since=before) as sub:
                async for item in sub:
                    assert not isinstance(item, Resync), item
                    if isinstance(item, RowsRemoved):
                        assert item.row_ids == cut
                        break
            for raw in (live, again, late):
                await raw.aclose()
        await d.stop()
