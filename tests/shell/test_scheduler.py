"""The scheduler service on trio's mock clock: it sleeps until due times, sends runs, records
outcomes, skips busy topics and overlapping runs, and never reruns a stored due time.

The daemon side (`ScheduleTarget`, `ScheduleStore`) is a small in-memory double that satisfies
the same Protocols; the real daemon is exercised in tests/e2e/test_schedules_e2e.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
import trio
import trio.lowlevel
import trio.testing

from hostd.core.schedules import Notify, ScheduleBook, StartRun
from hostd.shell.scheduler import Scheduler, wall_following
from hostd_protocol.client_messages import (
    MessageRow,
    RowOpened,
    ScheduleInfo,
    SendResult,
    TurnEnded,
)
from hostd_protocol.errors import TopicBusy

ORIGIN = 1_800_000_000.0


@dataclass
class Daemonish:
    """Records sends; answers like a topic that is busy (or not) and whose runs end at once."""

    busy: bool = False
    active_rows: set[str] = field(default_factory=set)
    sent: list[tuple[float, StartRun]] = field(default_factory=list)
    notices: list[Notify] = field(default_factory=list)
    saved: dict[str, ScheduleInfo] = field(default_factory=dict)
    scheduler: Scheduler | None = None
    topics: int = 0

    async def send_scheduled(self, run: StartRun) -> tuple[str, SendResult]:
        if self.busy and run.intent == "start":
            raise TopicBusy(f"topic {run.topic_id} is answering")
        if run.assistant:
            # A run in a new topic starts only once its due time is stored.
            assert run.due is not None and self.saved[run.schedule_id].last_due == run.due
            self.topics += 1
            run = StartRun(**{**{f: getattr(run, f) for f in run.__slots__}, "topic_id": f"new{self.topics}"})
        await trio.sleep(0.01)  # the commit
        row_id = f"r{len(self.sent) + 1}"
        self.sent.append((trio.current_time(), run))
        assert self.scheduler is not None
        row = MessageRow(
            id=row_id, topic_id=run.topic_id, role="user", status="success", position=1,
            turn_id=f"t{row_id}", meta={"client_msg_id": run.client_msg_id},
        )
        self.scheduler.observe(run.topic_id, RowOpened(topic_id=run.topic_id, seq=1, row=row))
        return run.topic_id, SendResult(row_id=row_id, disposition="started", turn_id=f"t{row_id}")

    def run_active(self, info: ScheduleInfo) -> bool:
        return info.last_row_id in self.active_rows

    def notify(self, notice: Notify) -> None:
        self.notices.append(notice)

    def save_schedule(self, info: ScheduleInfo) -> int:
        self.saved[info.id] = info
        return 1

    def drop_schedule(self, schedule_id: str) -> int:
        self.saved.pop(schedule_id, None)
        return 1

    async def wait_committed(self, gen: int | None = None) -> None:
        await trio.lowlevel.checkpoint()


def start(d: Daemonish, stored: list[ScheduleInfo] = (), *, booted_at: float = ORIGIN) -> Scheduler:  # type: ignore[assignment]
    book = ScheduleBook(stored, booted_at=booted_at)
    d.scheduler = Scheduler(book, d, d, wall=wall_following(ORIGIN), max_sleep=30.0)
    return d.scheduler


async def test_runs_fire_on_trio_time_each_due_time_once(autojump_clock: trio.testing.MockClock) -> None:
    d = Daemonish()
    s = start(d)
    async with trio.open_nursery() as nursery:
        await nursery.start(s.serve)
        info = await s.add(ScheduleInfo(id="sc1", topic_id="tp1", text="tick", every_s=5))
        assert info.next_due == ORIGIN + 5
        await trio.sleep(17)
        nursery.cancel_scope.cancel()
    assert [round(t, 2) for t, _ in d.sent] == [5.01, 10.01, 15.01]
    assert [r.due for _, r in d.sent] == [ORIGIN + 5, ORIGIN + 10, ORIGIN + 15]
    assert len({r.client_msg_id for _, r in d.sent}) == 3
    stored = d.saved["sc1"]
    assert (stored.runs, stored.last_due, stored.last_status, stored.next_due) == (3, ORIGIN + 15, "running", ORIGIN + 20)


async def test_a_paused_schedule_sleeps_and_a_resumed_one_counts_from_then(
    autojump_clock: trio.testing.MockClock,
) -> None:
    d = Daemonish()
    s = start(d)
    async with trio.open_nursery() as nursery:
        await nursery.start(s.serve)
        await s.add(ScheduleInfo(id="sc1", topic_id="tp1", text="tick", every_s=5, enabled=False))
        await trio.sleep(100)
        assert d.sent == []
        await s.set_enabled("sc1", True)  # at t=100: next due 105 (counted from creation)
        await trio.sleep(6)
        nursery.cancel_scope.cancel()
    assert [r.due for _, r in d.sent] == [ORIGIN + 105]


async def test_busy_skip_and_overlap_are_skipped_with_notices(autojump_clock: trio.testing.MockClock) -> None:
    d = Daemonish(busy=True)
    s = start(d)
    async with trio.open_nursery() as nursery:
        await nursery.start(s.serve)
        await s.add(ScheduleInfo(id="skip", topic_id="tp1", text="a", every_s=5, busy="skip"))
        await s.add(ScheduleInfo(id="queue", topic_id="tp1", text="b", every_s=5, busy="queue"))
        await trio.sleep(6)
        # The queued run's row is still waiting: the next due time must not pile up behind it.
        d.active_rows.add(d.saved["queue"].last_row_id)
        await trio.sleep(5)
        nursery.cancel_scope.cancel()
    assert [r.schedule_id for _, r in d.sent] == ["queue"]
    assert d.saved["skip"].skipped == 2 and d.saved["skip"].last_status == "skipped"
    assert d.saved["queue"].skipped == 1 and d.saved["queue"].runs == 1
    assert [n.code for n in d.notices] == ["schedule_skipped"] * 3
    assert sum("still queued or answering" in n.message for n in d.notices) == 1


async def test_outcomes_are_recorded_and_run_now_refuses_overlap(autojump_clock: trio.testing.MockClock) -> None:
    d = Daemonish()
    s = start(d)
    await s.add(ScheduleInfo(id="sc1", topic_id="tp1", text="x", cron="0 0 1 1 *"))
    info = await s.run_now("sc1")
    assert info.last_status == "running" and info.runs == 1
    s.observe("tp1", TurnEnded(topic_id="tp1", seq=9, turn_id="tr1", status="error", error="driver crashed"))
    assert (d.saved["sc1"].last_status, d.saved["sc1"].last_error, d.saved["sc1"].failures) == (
        "error", "driver crashed", 1,
    )
    d.active_rows.add("r1")
    with pytest.raises(TopicBusy, match=r"^the previous run of schedule sc1 is still queued or answering$"):
        await s.run_now("sc1")


async def test_a_restart_runs_missed_due_times_by_policy_and_never_twice(
    autojump_clock: trio.testing.MockClock,
) -> None:
    d = Daemonish()
    s = start(d)
    async with trio.open_nursery() as nursery:
        await nursery.start(s.serve)
        await s.add(ScheduleInfo(id="once", topic_id="tp1", text="a", every_s=10, missed="run-once"))
        await s.add(ScheduleInfo(id="skip", topic_id="tp1", text="b", every_s=10, missed="skip"))
        await trio.sleep(11)
        nursery.cancel_scope.cancel()
    assert len(d.sent) == 2
    stored = list(d.saved.values())
    # "Down" from t=11 to t=55 (the mock clock moves on); the new daemon boots at t=55.
    await trio.sleep(44)
    d2 = Daemonish(saved=dict(d.saved))
    s2 = start(d2, stored, booted_at=ORIGIN + trio.current_time())
    async with trio.open_nursery() as nursery:
        await nursery.start(s2.serve)
        await trio.sleep(1)
        nursery.cancel_scope.cancel()
    # run-once: the latest missed due time (50) once; skip: nothing. 20, 30, 40 (and 50) reported.
    assert [(r.schedule_id, r.due) for _, r in d2.sent] == [("once", ORIGIN + 50)]
    assert {n.code for n in d2.notices} == {"schedule_missed"}
    assert (d2.saved["once"].skipped, d2.saved["skip"].skipped) == (3, 4)
    assert d2.saved["skip"].last_due == ORIGIN + 50 and d2.saved["skip"].next_due == ORIGIN + 60


async def test_an_assistant_schedule_saves_each_due_time_before_its_run(
    autojump_clock: trio.testing.MockClock,
) -> None:
    d = Daemonish()
    s = start(d)
    async with trio.open_nursery() as nursery:
        await nursery.start(s.serve)
        await s.add(ScheduleInfo(id="sc1", assistant="daily", text="report", every_s=5))
        await trio.sleep(11)
        nursery.cancel_scope.cancel()
    assert [r.due for _, r in d.sent] == [ORIGIN + 5, ORIGIN + 10]
    assert (d.saved["sc1"].last_topic_id, d.saved["sc1"].runs) == ("new2", 2)
