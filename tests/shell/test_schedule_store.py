"""The schedules table: migration from a schema-1 database, round trip through the writer,
and removal with its topic (real SQLite files)."""

from __future__ import annotations

from pathlib import Path

import apsw
import trio

from hostd.shell.store import store as st
from hostd_protocol.client_messages import ScheduleInfo, TopicInfo


def _topic(tid: str = "tp1") -> TopicInfo:
    return TopicInfo(id=tid, title="t", driver="fake", created_at=1.0, updated_at=1.0)


def test_a_schema_2_schedule_survives_the_rebuild_of_migration_3(tmp_path: Path) -> None:
    path = tmp_path / "db"
    db = apsw.Connection(str(path))
    with db:
        db.execute(st.MIGRATIONS[0])
        db.execute(st.MIGRATIONS[1])
        db.pragma("user_version", 2)
        db.execute("INSERT INTO topics (id, created_at, updated_at) VALUES ('tp1', 1.0, 1.0)")
        db.execute(
            "INSERT INTO schedules (id, topic_id, text, every_s, created_at, active_since, "
            "last_due, runs) VALUES ('sc1', 'tp1', 'hi', 5, 1.0, 1.0, 6.0, 1)"
        )
    db.close()
    with st.Store(path) as s:
        assert s.schema_version == len(st.MIGRATIONS)
        assert s.load_schedules() == [
            ScheduleInfo(
                id="sc1", topic_id="tp1", text="hi", every_s=5.0, created_at=1.0,
                active_since=1.0, last_due=6.0, runs=1, last_topic_id="tp1",
            )
        ]


def test_a_schema_1_database_gains_the_schedules_table(tmp_path: Path) -> None:
    path = tmp_path / "db"
    db = apsw.Connection(str(path))
    with db:
        db.execute(st.MIGRATIONS[0])
        db.pragma("user_version", 1)
        db.execute(
            "INSERT INTO topics (id, created_at, updated_at) VALUES ('old', 1.0, 1.0)"
        )
    db.close()
    with st.Store(path) as s:
        assert s.schema_version == len(st.MIGRATIONS) >= 2
        assert [r.info.id for r in s.load_topics()] == ["old"]  # kept
        assert s.load_schedules() == []


async def test_schedules_round_trip_and_go_with_their_topic(tmp_path: Path) -> None:
    info = ScheduleInfo(
        id="sc1", topic_id="tp1", text="daily report", cron="0 9 * * 1-5", tz="Europe/Berlin",
        busy="skip", missed="skip", enabled=False, created_at=10.0, active_since=20.0,
        last_due=30.0, last_run_at=31.0, last_status="error", last_error="boom",
        last_row_id="r1", runs=4, failures=2, skipped=3,
        next_due=99.0,  # computed, not stored
    )
    no_due = ScheduleInfo(id="sc2", topic_id="tp1", text="x", every_s=5.0, created_at=11.0, active_since=11.0)
    per_run = ScheduleInfo(
        id="sc3", assistant="daily", text="y", every_s=5.0, created_at=12.0, active_since=12.0,
        last_topic_id="tp1",
    )
    with trio.fail_after(10), st.Store(tmp_path / "db") as s:
        writer = st.StoreWriter(s, flush_interval=10.0)
        async with trio.open_nursery() as nursery:
            await nursery.start(writer.serve)
            writer.put(st.PutTopic(_topic()), durable=True)
            writer.put(st.PutSchedule(info))
            writer.put(st.PutSchedule(per_run))
            await writer.wait_committed(writer.put(st.PutSchedule(no_due), durable=True))
            assert s.load_schedules() == [
                ScheduleInfo(**{**_fields(info), "next_due": None}),
                no_due,
                per_run,
            ]
            await writer.wait_committed(writer.put(st.DeleteSchedule("sc2"), durable=True))
            assert [x.id for x in s.load_schedules()] == ["sc1", "sc3"]
            # A topic's schedules go with it; a schedule that makes a topic per run stays.
            await writer.wait_committed(writer.put(st.DeleteTopic("tp1"), durable=True))
            assert s.load_schedules() == [per_run]
            nursery.cancel_scope.cancel()


def _fields(info: ScheduleInfo) -> dict[str, object]:
    return {f: getattr(info, f) for f in info.__struct_fields__}
