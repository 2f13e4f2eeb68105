"""Scheduled prompts against the real daemon subprocess and the real scripted driver.

Intervals are 2-3 s of real time, so each test takes a few due times (bounded by fail_after);
every wait is for an event the daemon sends, never a sleep.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from hostd.client import SyncClient, open_client
from hostd.shell.paths import Paths
from hostd_protocol.client_messages import (
    MessageRow,
    NoticeEvent,
    RowOpened,
    RowUpdated,
    Snapshot,
    TurnEnded,
)
from hostd_protocol.errors import ConfigError
from tests.e2e import daemon_proc

pytestmark = pytest.mark.e2e


def schedule_key(row: MessageRow) -> str:
    key = row.meta.get("client_msg_id", "")
    return key if isinstance(key, str) and key.startswith("schedule:") else ""


async def until(sub: Any, pred: Callable[[Any], bool]) -> Any:
    """The first event of `sub` for which `pred` holds."""
    async for ev in sub:
        if not isinstance(ev, Snapshot) and pred(ev):
            return ev
    raise AssertionError("the subscription ended")


def scheduled_opened(ev: Any, status: str | None = None) -> bool:
    return (
        isinstance(ev, RowOpened)
        and bool(schedule_key(ev.row))
        and (status is None or ev.row.status == status)
    )


async def test_runs_reach_a_window_queue_behind_a_busy_turn_or_skip(home: Path) -> None:
    paths = Paths.under(home)
    with trio.fail_after(60):
        d = await daemon_proc.start(home)
        try:
            async with open_client(paths) as c:
                t = await c.create_topic(title="sched", driver="scripted")
                async with c.attach(t.id) as sub:
                    every = await c.add_schedule(t.id, "/text scheduled hello", every_s=2)
                    assert every.next_due is not None and every.busy == "queue"
                    # 1. A run arrives like any message, marked as the schedule's.
                    opened = await until(sub, scheduled_opened)
                    assert opened.row.status == "success"
                    assert schedule_key(opened.row).startswith(f"schedule:{every.id}:")
                    ended = await until(sub, lambda e: isinstance(e, TurnEnded))
                    assert ended.status == "success" and ended.turn_id == opened.row.turn_id
                    assert sub.transcript.rows()[-1].role == "assistant"

                    # 2. Busy topic, intent queue: the run waits in the queue; the next due
                    #    time finds it still waiting and is skipped, not piled up. (Paused
                    #    around the busy send, so no run can start just before it.)
                    await c.pause_schedule(every.id)
                    busy = await c.send(t.id, "/sleep 5\n/text slept", intent="start")
                    assert busy.disposition == "started"
                    await c.resume_schedule(every.id)
                    queued = await until(sub, lambda e: scheduled_opened(e, "queued"))
                    skipped = await until(
                        sub, lambda e: isinstance(e, NoticeEvent) and e.code == "schedule_skipped"
                    )
                    assert "previous run is still queued or answering" in skipped.message
                    await until(
                        sub, lambda e: isinstance(e, TurnEnded) and e.turn_id == busy.turn_id
                    )
                    started = await until(
                        sub,
                        lambda e: isinstance(e, RowUpdated)
                        and e.row_id == queued.row.id
                        and bool(e.turn_id),
                    )
                    await until(
                        sub,
                        lambda e: isinstance(e, TurnEnded)
                        and e.turn_id == started.turn_id
                        and e.status == "success",
                    )
                    await c.pause_schedule(every.id)

                    # 3. Busy topic, intent skip: that due time is skipped with a notice.
                    busy = await c.send(t.id, "/sleep 4\n/text slept again", intent="start")
                    skipper = await c.add_schedule(
                        t.id, "/text never while busy", every_s=2, busy="skip"
                    )
                    notice = await until(
                        sub,
                        lambda e: isinstance(e, NoticeEvent)
                        and e.code == "schedule_skipped"
                        and skipper.id in e.message,
                    )
                    assert notice.message == (
                        f"schedule {skipper.id}: skipped a run because the topic was answering"
                    )
                    await c.remove_schedule(skipper.id)
                listed = {s.id: s for s in await c.list_schedules(t.id)}
                assert list(listed) == [every.id]
                assert not listed[every.id].enabled and listed[every.id].skipped >= 1
                assert listed[every.id].runs >= 2
                rows = (await c.history(t.id)).rows
                keys = [schedule_key(r) for r in rows if schedule_key(r)]
                assert len(keys) == len(set(keys)) >= 2
                assert all(r.status != "queued" for r in rows)
        finally:
            assert await d.terminate() == 0


async def test_kill9_and_restart_never_run_a_due_time_twice(home: Path) -> None:
    paths = Paths.under(home)
    with trio.fail_after(60):
        d = await daemon_proc.start(home)
        async with open_client(paths) as c:
            t = await c.create_topic(title="sched", driver="scripted")
            sched = await c.add_schedule(t.id, "/text tick", every_s=2)
            async with c.attach(t.id) as sub:
                await until(sub, lambda e: isinstance(e, TurnEnded) and e.status == "success")
                # Killed right as the second run's row opens: its row and the schedule's
                # record of it may or may not be on disk; either way it must not run twice.
                second = await until(sub, scheduled_opened)
        await d.kill9()

        d2 = await daemon_proc.start(home)
        try:
            async with open_client(paths) as c:
                status = await c.status()
                assert status.schedules == 1 and status.next_schedule_id == sched.id
                async with c.attach(t.id) as sub:
                    # A later due time runs in the new daemon.
                    later = await until(
                        sub,
                        lambda e: scheduled_opened(e)
                        and schedule_key(e.row) != schedule_key(second.row),
                    )
                    await until(
                        sub, lambda e: isinstance(e, TurnEnded) and e.turn_id == later.row.turn_id
                    )
                await c.pause_schedule(sched.id)
                rows = (await c.history(t.id)).rows
                keys = [schedule_key(r) for r in rows if schedule_key(r)]
                dues = [float(k.rsplit(":", 1)[1]) for k in keys]
                assert len(keys) >= 3
                assert len(set(keys)) == len(keys), keys  # no due time ran twice
                assert dues == sorted(dues)
                stored = (await c.list_schedules())[0]
                assert stored.last_due is not None and stored.last_due >= dues[-1]
                assert all(r.status != "pending" for r in rows)
        finally:
            assert await d2.terminate() == 0


async def test_cli_schedule_commands(home: Path) -> None:
    async def hostd(*args: str, check: bool = True) -> str:
        proc = await trio.run_process(
            [sys.executable, "-m", "hostd", "--home", str(home), *args],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
        out = proc.stdout.decode() + proc.stderr.decode()
        if check:
            assert proc.returncode == 0, out
        else:
            assert proc.returncode != 0, out
        return out

    import msgspec

    from hostd_protocol.client_messages import ScheduleInfo

    with trio.fail_after(60):
        d = await daemon_proc.start(home)
        try:
            async with open_client(Paths.under(home)) as c:
                t = await c.create_topic(driver="scripted")
            out = await hostd(
                "schedule", "add", t.id, "/text hi", "--cron", "0 9 * * 1-5",
                "--tz", "Europe/Berlin", "--busy", "skip", "--json",
            )
            info = msgspec.json.decode(out, type=ScheduleInfo)
            assert (info.cron, info.tz, info.busy, info.enabled) == ("0 9 * * 1-5", "Europe/Berlin", "skip", True)
            assert "next scheduled run" in await hostd("status")
            assert f"paused schedule {info.id}" in await hostd("schedule", "pause", info.id)
            listed = msgspec.json.decode(await hostd("schedule", "list", "--json"), type=list[ScheduleInfo])
            assert [(s.id, s.enabled, s.next_due) for s in listed] == [(info.id, False, None)]
            assert f"resumed schedule {info.id}" in await hostd("schedule", "resume", info.id)
            ran = await hostd("schedule", "run-now", info.id)
            assert ran.startswith(f"ran schedule {info.id}")
            err = await hostd("schedule", "add", t.id, "x", "--cron", "61 * * * *", check=False)
            assert err.startswith("hostd: invalid cron expression '61 * * * *': Bad minute")
            err = await hostd("schedule", "remove", "nope", check=False)
            assert err == "hostd: no schedule with id 'nope' [not_found]\n"
            assert f"removed schedule {info.id}" in await hostd("schedule", "remove", info.id)
            assert "no schedules" in await hostd("schedule", "list")

            def sync_add_and_list() -> list[ScheduleInfo]:
                with SyncClient(Paths.under(home)) as sc:
                    sc.add_schedule(t.id, "/text hi", every_s=3600, enabled=False)
                    return sc.list_schedules(t.id)

            [synced] = await trio.to_thread.run_sync(sync_add_and_list)
            assert (synced.topic_id, synced.every_s, synced.enabled) == (t.id, 3600.0, False)
        finally:
            assert await d.terminate() == 0


async def test_an_assistant_schedule_makes_a_fresh_topic_per_run(home: Path) -> None:
    paths = Paths.under(home)
    (paths.config_dir / "assistants").mkdir(parents=True)
    (paths.config_dir / "assistants" / "daily.toml").write_text('driver = "scripted"\n')
    with trio.fail_after(60):
        d = await daemon_proc.start(home)
        try:
            async with open_client(paths) as c:
                sched = await c.add_schedule("", "/text daily summary", cron="0 9 * * *", assistant="daily")
                assert (sched.topic_id, sched.assistant) == ("", "daily")
                topics = []
                for _ in range(2):
                    ran = await c.run_schedule_now(sched.id)
                    topics.append(ran.last_topic_id)
                    async with c.attach(ran.last_topic_id) as sub:
                        async for ev in sub:
                            if isinstance(ev, Snapshot):
                                rows = ev.rows
                                assert rows[0].id == ran.last_row_id and schedule_key(rows[0])
                                if not ev.active_turn_id and rows[-1].role == "assistant":
                                    break
                            elif isinstance(ev, TurnEnded):
                                break
                    rows = (await c.history(ran.last_topic_id)).rows
                    assert [r.role for r in rows] == ["user", "assistant"]
                    assert rows[-1].status == "success"
                assert len(set(topics)) == 2
                infos = {t.id: t for t in await c.list_topics()}
                assert all(infos[t].assistant == "daily" and sched.id in infos[t].title for t in topics)
                # Deleting a run's topic leaves the schedule in place.
                await c.delete_topic(topics[0])
                assert [s.id for s in await c.list_schedules()] == [sched.id]
                with pytest.raises(ConfigError, match=r"^no assistant named 'nope' \(known: daily\)"):
                    await c.add_schedule("", "x", cron="0 9 * * *", assistant="nope")
        finally:
            assert await d.terminate() == 0
