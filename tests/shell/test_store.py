"""The apsw store and its writer: migrations, batches, durability waits, reconcile."""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import pytest
import trio

from hostd.shell.store import store as st
from hostd_protocol.client_messages import ApprovalInfo, MessageRow, TopicInfo
from hostd_protocol.common import TextDelta


def topic(tid: str = "tp1") -> TopicInfo:
    return TopicInfo(id=tid, title="t", driver="fake", created_at=1.0, updated_at=1.0)


def row(rid: str, status: str, pos: int, text: str = "", tid: str = "tp1") -> MessageRow:
    return MessageRow(
        id=rid,
        topic_id=tid,
        role="assistant" if status == "pending" else "user",
        status=status,  # type: ignore[arg-type]
        position=pos,
        parts=[TextDelta(text)] if text else [],
        created_at=float(pos),
        updated_at=float(pos),
    )


def test_migration_sets_user_version(tmp_path: Path) -> None:
    with st.Store(tmp_path / "db") as s:
        assert s.schema_version == len(st.MIGRATIONS)
    with st.Store(tmp_path / "db") as s:  # idempotent
        assert s.schema_version == len(st.MIGRATIONS)


async def test_writer_coalesces_and_waits_for_commit(tmp_path: Path) -> None:
    with trio.fail_after(10), st.Store(tmp_path / "db") as s, st.Store(tmp_path / "db") as reader:
        writer = st.StoreWriter(s, flush_interval=10.0)  # only explicit waits flush
        async with trio.open_nursery() as n:
            await n.start(writer.serve)
            writer.put(st.PutTopic(topic()))
            for i in range(100):
                writer.put(st.PutRow(row("r1", "pending", 1, "x" * i)))
            writer.put(st.PutSeq("tp1", 42))
            assert reader.load_rows("tp1") == []  # nothing before the flush
            await writer.wait_committed()
            rows = reader.load_rows("tp1")
            assert len(rows) == 1 and rows[0].parts == [TextDelta("x" * 99)]
            assert reader.load_topics()[0].last_seq == 42
            stats = writer.statistics()
            assert (stats.batches, stats.ops_written) == (1, 3)
            # A deleted topic takes its pending ops with it.
            writer.put(st.PutRow(row("r2", "success", 2)))
            writer.put(st.DeleteTopic("tp1"))
            await writer.wait_committed()
            assert reader.load_topics() == [] and reader.load_rows("tp1") == []
            n.cancel_scope.cancel()


async def test_the_writer_keeps_python_off_its_worker_thread(tmp_path: Path) -> None:
    """A batch's statements are built on the event loop; the worker thread only runs SQLite
    (Python there holds the GIL while the loop waits for it to read a driver's chunk)."""
    loop_thread = threading.get_ident()
    threads: dict[str, set[int]] = {"prepare": set(), "write": set()}

    class Watched(st.Store):
        def prepare(self, ops: Any) -> Any:
            threads["prepare"].add(threading.get_ident())
            return super().prepare(ops)

        def write(self, batch: Any) -> int:
            threads["write"].add(threading.get_ident())
            return super().write(batch)

    with trio.fail_after(10), Watched(tmp_path / "db") as s, st.Store(tmp_path / "db") as reader:
        writer = st.StoreWriter(s, flush_interval=10.0)
        async with trio.open_nursery() as n:
            await n.start(writer.serve)
            writer.put(st.PutTopic(topic()))
            writer.put(st.PutRow(row("r1", "pending", 1, "x")))
            await writer.wait_committed()
            n.cancel_scope.cancel()
        assert [r.id for r in reader.load_rows("tp1")] == ["r1"]
    assert threads["prepare"] == {loop_thread}
    assert threads["write"] and loop_thread not in threads["write"]


def test_a_flush_of_many_topics_is_a_few_sqlite_steps(tmp_path: Path) -> None:
    """300 streaming topics' sequence numbers in one batch: two statements (256 rows each at
    most), not one step per topic; each topic keeps the larger of its stored and new seq."""
    with st.Store(tmp_path / "db") as s:
        s.apply([st.PutTopic(topic(f"t{i}")) for i in range(300)])
        s.apply([st.PutSeq("t0", 1000)])
        steps: list[str] = []

        def count(cursor: Any, sql: str, bindings: Any) -> bool:
            steps.append(sql)
            return True

        s._db.exec_trace = count
        s.apply([st.PutSeq(f"t{i}", 10 + i) for i in range(300)])
        s._db.exec_trace = None
        assert len([q for q in steps if "last_seq" in q]) == 2
        seqs = {t.info.id: t.last_seq for t in s.load_topics()}
    assert seqs["t0"] == 1000  # not lowered
    assert all(seqs[f"t{i}"] == 10 + i for i in range(1, 300))


async def test_streamed_touches_are_written_once_per_flush_with_the_newest_content(
    tmp_path: Path,
) -> None:
    """A `TouchRow` per chunk carries the row as it was then; the writer keeps the newest per
    row and builds it once, whatever the live row does meanwhile (it is never read back)."""
    from hostd.core.rows import LiveRow

    with trio.fail_after(10), st.Store(tmp_path / "db") as s, st.Store(tmp_path / "db") as reader:
        writer = st.StoreWriter(s, flush_interval=10.0)  # only explicit waits flush
        async with trio.open_nursery() as n:
            await n.start(writer.serve)
            writer.put(st.PutTopic(topic()))
            live = LiveRow(row("r1", "pending", 1))
            for i in range(100):
                live.append(TextDelta(f"{i},"))
                writer.put(st.TouchRow(live.snapshot()))
            live.append(TextDelta("after the last touch"))
            await writer.wait_committed()
            (stored,) = reader.load_rows("tp1")
            assert stored.parts == [TextDelta("".join(f"{i}," for i in range(100)))]
            assert writer.statistics().ops_written == 2  # the topic and one row
            # A touched row whose topic is deleted before the flush is not written.
            writer.put(st.TouchRow(live.snapshot()))
            writer.put(st.DeleteTopic("tp1"))
            await writer.wait_committed()
            assert reader.load_rows("tp1") == []
            n.cancel_scope.cancel()


async def test_durable_put_flushes_without_waiting_for_the_interval(tmp_path: Path) -> None:
    with trio.fail_after(5), st.Store(tmp_path / "db") as s:
        writer = st.StoreWriter(s, flush_interval=3600.0)
        async with trio.open_nursery() as n:
            await n.start(writer.serve)
            gen = writer.put(st.PutTopic(topic()), durable=True)
            await writer.wait_committed(gen)
            n.cancel_scope.cancel()


async def test_failed_batch_raises_store_error_to_waiters(tmp_path: Path) -> None:
    import pytest

    from hostd_protocol.errors import StoreError

    with trio.fail_after(5), st.Store(tmp_path / "db") as s:
        writer = st.StoreWriter(s)
        async with trio.open_nursery() as n:
            await n.start(writer.serve)
            gen = writer.put(st.PutRow(row("r1", "success", 1, tid="no-such-topic")), durable=True)
            with pytest.raises(StoreError, match=r"^database write failed: ConstraintError"):
                await writer.wait_committed(gen)
            gen = writer.put(st.PutTopic(topic()), durable=True)
            await writer.wait_committed(gen)  # the writer goes on
            n.cancel_scope.cancel()


def test_reconcile_after_a_crash(tmp_path: Path) -> None:
    with st.Store(tmp_path / "db") as s:
        s.apply(
            [
                st.PutTopic(topic()),
                st.PutRow(row("u1", "success", 1, "question")),
                st.PutRow(row("a1", "pending", 2, "half an ans")),
                st.PutRow(row("u2", "queued", 3, "next")),
                st.PutApproval(ApprovalInfo(id="ap1", topic_id="tp1", turn_id="t1", tool="Bash")),
                st.PutTurn("tp1", "t1", None, at=1.0),
            ]
        )
        report = s.reconcile(now=5.0)
        assert report == st.ReconcileReport(rows_failed=1, approvals_cancelled=1, turns_failed=1)
        rows = {r.id: r for r in s.load_rows("tp1")}
        assert rows["a1"].status == "error"
        assert rows["a1"].error == "daemon restarted during this answer"
        assert rows["a1"].parts == [TextDelta("half an ans")]
        assert rows["u2"].status == "queued"
        assert s.load_approvals("tp1") == []
        assert s.load_approvals("tp1", open_only=False)[0].status == "cancelled"
        assert s.load_turns("tp1")[0].status == "error"
        assert s.reconcile() == st.ReconcileReport(0, 0, 0)


def test_history_pages(tmp_path: Path) -> None:
    with st.Store(tmp_path / "db") as s:
        s.apply([st.PutTopic(topic())] + [st.PutRow(row(f"r{i}", "success", i)) for i in range(1, 11)])
        page, more = s.history_page("tp1", None, 4)
        assert [r.position for r in page] == [7, 8, 9, 10] and more
        page, more = s.history_page("tp1", 7, 4)
        assert [r.position for r in page] == [3, 4, 5, 6] and more
        page, more = s.history_page("tp1", 3, 4)
        assert [r.position for r in page] == [1, 2] and not more


async def test_answer_rows_keep_lane_alternative_target_and_usage(tmp_path: Path) -> None:
    """Migration 7: a multi-answer turn's rows read back with their marks (a restart, a
    late `history`), and a database of schema 6 gains the columns with their defaults."""
    import apsw
    import msgspec

    from hostd_protocol.common import AnswerTarget, Usage

    with st.Store(tmp_path / "db") as s:
        db = apsw.Connection(str(tmp_path / "db"))
        db.execute(
            "INSERT INTO topics (id, title, assistant, driver, model, working_dir, options, "
            "created_at, updated_at) VALUES ('tp1', '', '', 'fake', '', '', '{}', 1, 1)"
        )
        db.close()
        old = row("r0", "success", 1, "before lanes")
        answer = msgspec.structs.replace(
            row("r1", "success", 2, "one"),
            role="assistant",
            lane=1,
            alternative=True,
            target=AnswerTarget(driver="scripted", model="m2"),
            usage=Usage(input_tokens=3, output_tokens=4),
        )
        with trio.fail_after(10):
            writer = st.StoreWriter(s, flush_interval=10.0)
            async with trio.open_nursery() as n:
                await n.start(writer.serve)
                writer.put(st.PutRow(old))
                writer.put(st.PutRow(answer))
                await writer.wait_committed()
                n.cancel_scope.cancel()
        assert s.load_rows("tp1") == [old, answer]
    # An older database: schema 6 without the columns, one row in it.
    path = tmp_path / "old.db"
    with st.Store(path):
        pass
    db = apsw.Connection(str(path))
    for column in ("options", "option_id", "lane"):  # schema 9
        db.execute(f"ALTER TABLE approvals DROP COLUMN {column}")
    db.execute("DROP TABLE row_parts")  # schema 8
    for column in ("lane", "alternative", "target", "usage"):
        db.execute(f"ALTER TABLE rows DROP COLUMN {column}")
    db.pragma("user_version", 6)
    db.close()
    with st.Store(path) as s:
        assert s.schema_version == len(st.MIGRATIONS) == 9


def test_a_schema_retry_is_logged_at_debug_without_its_statement(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A statement prepared before another connection changed the schema is re-prepared by
    SQLite (SQLITE_SCHEMA, logged): routine, so DEBUG, and the statement text (which may sit
    in the log for long) is not quoted."""
    import apsw

    caplog.set_level(logging.DEBUG)
    with st.Store(tmp_path / "db"):  # applies the logging choice, as the daemon does
        pass
    a = apsw.Connection(str(tmp_path / "db"))
    b = apsw.Connection(str(tmp_path / "db"))
    secret = "SELECT count(*) FROM topics WHERE title != 'secret-marker'"
    a.execute(secret).fetchall()  # prepared and cached
    b.execute("CREATE TABLE later_table (x)")
    a.execute(secret).fetchall()  # re-prepared: SQLITE_SCHEMA in SQLite's log
    a.close()
    b.close()
    sqlite = [r for r in caplog.records if "schema has changed" in r.getMessage()]
    assert sqlite, [r.getMessage() for r in caplog.records]
    assert all(r.levelno == logging.DEBUG for r in sqlite)
    assert not any("secret-marker" in r.getMessage() for r in caplog.records)
