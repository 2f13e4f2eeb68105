"""The store's writes fail (disk full, read-only): the daemon says so to the windows and the
log, keeps streaming, acknowledges no message it could not commit, and writes what it holds
once the disk is back.

The fault is injected under hostd's store, at the SQLite connection: every write statement
raises `apsw.FullError` while the fault is on, exactly what a full disk raises. (A read-only
file or directory does not work for this: the daemon holds the database open, and SQLite
does not re-check permissions of an open file.)
"""

from __future__ import annotations

import os
from typing import Any

import apsw
import pytest
import trio

from hostd.client import open_client
from hostd.shell.paths import Paths
from hostd_dev.stress.dbcheck import read_rows, row_text
from hostd_protocol.client_messages import NoticeEvent, RowAppended, TurnEnded
from hostd_protocol.common import TextDelta
from hostd_protocol.errors import StoreError
from tests.reliability.conftest import start_in_process

pytestmark = pytest.mark.e2e


class FlakyDisk:
    """Stands in for the writer's apsw connection; writes fail while `full` is set."""

    def __init__(self, db: apsw.Connection) -> None:
        self._db = db
        self.full = False
        self.refused = 0

    def _check(self, sql: str) -> None:
        if self.full and not sql.lstrip().upper().startswith(("SELECT", "PRAGMA")):
            self.refused += 1
            raise apsw.FullError("database or disk is full (injected)")

    def execute(self, sql: str, *args: Any) -> Any:
        self._check(sql)
        return self._db.execute(sql, *args)

    def executemany(self, sql: str, *args: Any) -> Any:
        self._check(sql)
        return self._db.executemany(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)

    def __enter__(self) -> Any:
        return self._db.__enter__()

    def __exit__(self, *exc: Any) -> Any:
        return self._db.__exit__(*exc)


async def test_full_disk_is_reported_streams_go_on_nothing_unsaved_is_acked(
    nursery: trio.Nursery, paths: Paths, caplog: pytest.LogCaptureFixture
) -> None:
    with trio.fail_after(40):
        d = await start_in_process(nursery, paths)
        store = d.daemon.writer._store
        disk = FlakyDisk(store._db)
        store._db = disk  # type: ignore[assignment]
        async with open_client(paths) as c, open_client(paths) as w:
            a = await c.create_topic(driver="scripted", title="streaming")
            b = await c.create_topic(driver="scripted", title="idle")
            notices: list[NoticeEvent] = []
            during = 0
            async with w.attach(a.id) as sub:
                sent = await c.send(a.id, "/chunks 500 size=8 rate=150\nlong answer", "start")
                chars = 0
                end: TurnEnded | None = None
                async for ev in sub:
                    if isinstance(ev, NoticeEvent):
                        notices.append(ev)
                    if isinstance(ev, RowAppended) and isinstance(ev.chunk, TextDelta):
                        # Counted in characters, not events: under load the host merges
                        # consecutive deltas, so the number of events is not fixed.
                        chars += len(ev.chunk.text)
                        if disk.full:
                            during += len(ev.chunk.text)
                        if not disk.refused and not disk.full and chars >= 50 * 8:
                            disk.full = True
                            # A message the store cannot commit is not acknowledged.
                            with pytest.raises(StoreError, match=r"disk is full"):
                                await c.send(b.id, "/text hello\nwhile full", "start")
                        if disk.full and chars >= 250 * 8:
                            disk.full = False
                    if isinstance(ev, TurnEnded) and ev.turn_id == sent.turn_id:
                        end = ev
                        break
                assert end is not None and end.status == "success"
                assert during >= 100 * 8, "the stream stalled while the disk was full"
                window_rows = sub.transcript.rows()
            assert disk.refused > 0
            codes = [n.code for n in notices]
            assert "store_error" in codes, notices
            assert "store_recovered" in codes, notices
            failing = next(n for n in notices if n.code == "store_error")
            assert failing.level == "error" and "disk is full" in failing.message

            # Once the disk is back, everything the daemon holds is written.
            async with open_client(paths) as c2:
                await c2.history(a.id)  # waits for the writer
            stored = read_rows(paths.db_path, readonly=True)[a.id]
            assert [(r.id, r.status, row_text(r.parts)) for r in stored] == [
                (r.id, r.status, row_text(r.parts)) for r in window_rows
            ]
            assert len(stored[1].text) >= 500 * 8 - 1  # words_text drops a final space
        await d.stop()
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert any("disk is full" in m for m in errors), errors


async def test_a_poison_op_is_dropped_alone(tmp_path: Any) -> None:
    """A batch failing on a constraint (a bug in one op) is written op by op: the bad op is
    dropped, every other op of the batch (steps of an ended turn included) is written."""
    from hostd.shell.store import store as st
    from hostd_protocol.client_messages import MessageRow, TopicInfo

    def row(rid: str, tid: str) -> MessageRow:
        return MessageRow(id=rid, topic_id=tid, role="user", status="success", position=1,
                          parts=[TextDelta(text="hi")], created_at=1.0, updated_at=1.0)

    with trio.fail_after(10), st.Store(tmp_path / "db") as s:
        writer = st.StoreWriter(s)
        async with trio.open_nursery() as n:
            await n.start(writer.serve)
            writer.put(st.PutTopic(TopicInfo(id="tp1", created_at=1.0, updated_at=1.0)))
            writer.put(st.PutTurn("tp1", "t1", "success", at=1.0))
            writer.put(st.PutSteps("tp1", "t1", ()))
            writer.put(st.PutRow(row("good", "tp1")))
            gen = writer.put(st.PutRow(row("poison", "no-such-topic")), durable=True)
            with pytest.raises(StoreError, match=r"FOREIGN KEY constraint failed"):
                await writer.wait_committed(gen)
            n.cancel_scope.cancel()
        assert [r.id for r in s.load_rows("tp1")] == ["good"]
        assert [t.id for t in s.load_turns("tp1")] == ["t1"]


@pytest.mark.parametrize("how", ["deleted", "replaced"])
async def test_a_deleted_or_replaced_database_stops_acknowledging(paths: Paths, how: str) -> None:
    """Issue 14 item 8: SQLite would write on into the unlinked file and every send would
    still be acknowledged, then lost at the next start. hostd notices, refuses and says so,
    and its shutdown reports the unsaved data (`hostd serve` exits 1 with that line)."""
    import shutil

    lost = r"^the database file .* was deleted or replaced while hostd was running"
    with trio.fail_after(40), pytest.raises(BaseExceptionGroup) as raised:
        async with trio.open_nursery() as nursery:
            d = await start_in_process(nursery, paths)
            async with open_client(paths) as c, open_client(paths) as w:
                t = await c.create_topic(driver="scripted")
                assert (await c.send(t.id, "/text before\nq", "start")).row_id
                async with w.attach(t.id) as sub:
                    db = paths.db_path
                    if how == "deleted":
                        for suffix in ("", "-wal", "-shm"):
                            await trio.Path(str(db) + suffix).unlink(missing_ok=True)
                    else:
                        copy = db.with_suffix(".copy")
                        await trio.to_thread.run_sync(shutil.copyfile, db, copy)
                        os.replace(copy, db)
                    with pytest.raises(StoreError, match=lost):
                        await c.send(t.id, "/text after\nq", "queue")
                    async for ev in sub:
                        if isinstance(ev, NoticeEvent) and ev.code == "store_error":
                            assert "deleted or replaced" in ev.message and ev.level == "error"
                            break
            await d.stop()
    assert raised.value.subgroup(StoreError) is not None
