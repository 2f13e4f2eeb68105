"""The sans-IO schedule core: due times (across DST changes), missed runs, overlap, outcomes.

Time is an argument everywhere, so "the clock" here is a plain float the tests move.
"""

from __future__ import annotations

import itertools
import math
from datetime import datetime
from zoneinfo import ZoneInfo

import msgspec
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from hostd.core.schedules import (
    DropSchedule,
    Notify,
    SaveSchedule,
    ScheduleBook,
    StartRun,
    due_between,
    next_due_after,
)
from hostd_protocol.client_messages import (
    MessageRow,
    RowOpened,
    RowRemoved,
    RowUpdated,
    ScheduleInfo,
    SendResult,
    TopicDeleted,
    TurnEnded,
)
from hostd_protocol.common import TextDelta
from hostd_protocol.errors import InvalidArgument, NotFound, TopicBusy

BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")
T0 = 1_800_000_000.0  # 2027-01-15, a plain winter day


def local(tz: ZoneInfo, *args: int, fold: int = 0) -> float:
    return datetime(*args, tzinfo=tz, fold=fold).timestamp()  # type: ignore[misc]


def cron(expr: str, tz: str = "UTC", **kw: object) -> ScheduleInfo:
    fields: dict[str, object] = {"text": "report", "topic_id": "tp1", **kw}
    return ScheduleInfo(id="sc1", cron=expr, tz=tz, **fields)  # type: ignore[arg-type]


def every(seconds: float, **kw: object) -> ScheduleInfo:
    return ScheduleInfo(id="sc1", topic_id="tp1", text="report", every_s=seconds, **kw)  # type: ignore[arg-type]


def chain(info: ScheduleInfo, start: float, n: int) -> list[float]:
    out, t = [], start
    for _ in range(n):
        nxt = next_due_after(info, t)
        assert nxt is not None
        out.append(nxt)
        t = nxt
    return out


def wall(ts: float, tz: ZoneInfo) -> str:
    return datetime.fromtimestamp(ts, tz).isoformat()


# --- due times ----------------------------------------------------------------------------------


def test_interval_due_times_count_from_creation() -> None:
    info = every(10, created_at=T0)
    assert next_due_after(info, T0) == T0 + 10
    assert next_due_after(info, T0 + 10) == T0 + 20
    assert next_due_after(info, T0 + 10.5) == T0 + 20
    assert next_due_after(info, T0 - 100) == T0 + 10  # never at or before creation
    window = due_between(info, T0 + 10, T0 + 45)
    assert (window.count, window.first, window.latest) == (3, T0 + 20, T0 + 40)
    assert due_between(info, T0 + 41, T0 + 49).count == 0


def test_cron_spring_forward_runs_a_skipped_time_once_after_the_gap() -> None:
    # Europe/Berlin, 2026-03-29: 02:00 CET jumps to 03:00 CEST; 02:30 does not exist.
    info = cron("30 2 * * *", "Europe/Berlin")
    dues = chain(info, local(BERLIN, 2026, 3, 28, 12, 0), 3)
    assert [wall(d, BERLIN) for d in dues] == [
        "2026-03-29T03:00:00+02:00",  # the missing 02:30 runs at the first minute after the gap
        "2026-03-30T02:30:00+02:00",
        "2026-03-31T02:30:00+02:00",
    ]
    # The real spacing around the change: 23.5 h, then 23.5 h.
    assert dues[1] - dues[0] == 23.5 * 3600


def test_cron_fall_back_runs_a_fixed_time_once_and_wildcards_in_both_copies() -> None:
    # Europe/Berlin, 2026-10-25: 03:00 CEST falls back to 02:00 CET; 02:xx happens twice.
    daily = cron("30 2 * * *", "Europe/Berlin")
    dues = chain(daily, local(BERLIN, 2026, 10, 24, 12, 0), 2)
    assert [wall(d, BERLIN) for d in dues] == [
        "2026-10-25T02:30:00+02:00",
        "2026-10-26T02:30:00+01:00",
    ]
    assert dues[1] - dues[0] == 25 * 3600  # one day that lasted 25 hours
    half_hourly = cron("*/30 * * * *", "Europe/Berlin")
    dues = chain(half_hourly, local(BERLIN, 2026, 10, 25, 1, 45), 5)
    assert [wall(d, BERLIN) for d in dues] == [
        "2026-10-25T02:00:00+02:00",
        "2026-10-25T02:30:00+02:00",
        "2026-10-25T02:00:00+01:00",
        "2026-10-25T02:30:00+01:00",
        "2026-10-25T03:00:00+01:00",
    ]
    assert all(b - a == 1800 for a, b in itertools.pairwise(dues))


def test_cron_across_us_dst_in_its_own_zone() -> None:
    # America/New_York: 2026-03-08 springs forward, 2026-11-01 falls back.
    info = cron("0 9 * * *", "America/New_York")
    spring = chain(info, local(NEW_YORK, 2026, 3, 7, 12), 2)
    assert [wall(d, NEW_YORK) for d in spring] == [
        "2026-03-08T09:00:00-04:00",
        "2026-03-09T09:00:00-04:00",
    ]
    assert spring[0] - local(NEW_YORK, 2026, 3, 7, 9) == 23 * 3600
    fall = chain(info, local(NEW_YORK, 2026, 10, 31, 12), 2)
    assert fall[1] - fall[0] == 24 * 3600
    assert fall[0] - local(NEW_YORK, 2026, 10, 31, 9) == 25 * 3600


def test_cron_window_counts_and_finds_the_latest_past_the_scan_cap() -> None:
    info = cron("* * * * *")
    window = due_between(info, T0, T0 + 600)
    assert window.count == 10 and not window.capped
    long = due_between(info, T0, T0 + 7 * 86400 + 30)
    assert long.capped and long.count == 1000
    assert long.latest == T0 + 7 * 86400  # T0 is on a whole minute


@given(
    start=st.floats(min_value=0, max_value=1e6),
    step=st.floats(min_value=1, max_value=1e4),
    a=st.floats(min_value=0, max_value=1e7),
    b=st.floats(min_value=0, max_value=1e7),
)
@settings(max_examples=300, deadline=None)
# Float rounding put the division's estimate one step off: these failed before the due times
# were corrected against the products themselves.
@example(start=777919.6275767153, step=2.7352276845006616, a=778704.637922167, b=780028.4881214653)
@example(start=501127.8045941382, step=1.6253748989122798, a=502000.63091485406, b=501543.9005682597)
def test_interval_window_agrees_with_stepping(start: float, step: float, a: float, b: float) -> None:
    info = every(step, created_at=start)
    lo, hi = min(a, b), max(a, b)
    window = due_between(info, lo, hi)
    if window.count:
        assert window.first is not None and window.latest is not None
        assert lo < window.first <= window.latest <= hi
        assert next_due_after(info, window.latest) > hi  # type: ignore[operator]
    nxt = next_due_after(info, lo)
    assert nxt is not None and nxt > lo
    assert (window.count > 0) == (nxt <= hi)


# --- validation ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("info", "message"),
    [
        (cron("61 * * * *"), r"^invalid cron expression '61 \* \* \* \*': Bad minute; use 5 fields"),
        (cron("* * * * *", "Mars/Olympus"), r"^unknown time zone 'Mars/Olympus'; use an IANA name"),
        (every(0.5), r"^the interval must be between 1 s and 3650 days, not 0.5 s$"),
        (every(-60), r"^the interval must be between 1 s and 3650 days, not -60 s$"),
        (every(math.nan), r"^the interval must be between 1 s and 3650 days, not nan s$"),
        # Due times past year 9999 broke every listing of schedules (`hostd schedule list`).
        (every(99999999999 * 86400.0), r"^the interval must be between 1 s and 3650 days"),
        (cron("0 0 30 2 *"), r"^invalid cron expression '0 0 30 2 \*': Bad day-of-month"),
        (ScheduleInfo(id="sc1", topic_id="t", text="x"), r"^give exactly one of a cron"),
        (ScheduleInfo(id="sc1", topic_id="t", text="x", cron="* * * * *", every_s=5), r"^give exactly one"),
        (cron("* * * * *", text="  "), r"^the schedule's message is empty"),
        (cron("* * * * *", assistant="daily"), r"^give exactly one of a topic \(runs go there\) or an assistant"),
        (cron("* * * * *", topic_id=""), r"^give exactly one of a topic"),
    ],
)
def test_bad_schedules_are_refused_with_a_clear_error(info: ScheduleInfo, message: str) -> None:
    book = ScheduleBook([], booted_at=T0)
    with pytest.raises(InvalidArgument, match=message):
        book.add(info, T0)
    assert book.schedules() == []


def test_unknown_schedule_is_not_found() -> None:
    book = ScheduleBook([], booted_at=T0)
    with pytest.raises(NotFound, match=r"^no schedule with id 'nope'$"):
        book.set_enabled("nope", False, T0)


# --- the book: due runs -------------------------------------------------------------------------


def added(info: ScheduleInfo, now: float = T0, booted_at: float = T0 - 100) -> ScheduleBook:
    book = ScheduleBook([], booted_at=booted_at)
    book.add(info, now)
    return book


def sent(
    book: ScheduleBook, run: StartRun, now: float, row: str = "r1", turn: str = "t1", topic: str = ""
) -> None:
    row_obj = MessageRow(
        id=row, topic_id=topic or run.topic_id, role="user", status="success", position=1, turn_id=turn,
        parts=[TextDelta(text=run.text)], meta={"client_msg_id": run.client_msg_id},
    )
    assert book.observe(run.topic_id, RowOpened(topic_id=run.topic_id, seq=1, row=row_obj)) == []
    book.run_sent(
        run.schedule_id, SendResult(row_id=row, disposition="started", turn_id=turn), now, topic_id=topic
    )


def test_an_interval_schedule_fires_each_due_time_once() -> None:
    book = added(every(5))
    info = book.get("sc1")
    assert info.next_due == T0 + 5
    assert book.next_wake() == info
    assert book.collect(T0 + 4.9) == []
    [run] = book.collect(T0 + 5.01)
    assert run == StartRun("sc1", "tp1", "report", "queue", f"schedule:sc1:{T0 + 5!r}", T0 + 5)
    # Until the send is answered the schedule is not collected again.
    assert book.starting("sc1") and book.collect(T0 + 11) == []
    sent(book, run, T0 + 5.02)
    info = book.get("sc1")
    assert (info.last_due, info.next_due, info.runs, info.last_status) == (T0 + 5, T0 + 10, 1, "running")
    assert book.collect(T0 + 5.5) == []
    [again] = book.collect(T0 + 10)
    assert again.due == T0 + 10 and again.client_msg_id != run.client_msg_id


def test_busy_skip_sends_with_intent_start_and_a_refusal_is_a_skip() -> None:
    book = added(every(5, busy="skip"))
    [run] = book.collect(T0 + 5)
    assert run.intent == "start"
    effects = book.run_refused("sc1", "topic_busy", "topic tp1 is answering", T0 + 5)
    save, notice = effects
    assert isinstance(save, SaveSchedule) and isinstance(notice, Notify)
    assert (save.schedule.last_status, save.schedule.skipped, save.schedule.failures) == ("skipped", 1, 0)
    assert save.schedule.last_due == T0 + 5  # that due time is done with
    assert notice.code == "schedule_skipped"
    assert not book.starting("sc1")


def test_a_failed_send_is_recorded_with_its_error() -> None:
    book = added(every(5))
    book.collect(T0 + 5)
    save, notice = book.run_refused("sc1", "topic_closed", "topic tp1 is closed", T0 + 5)
    assert isinstance(save, SaveSchedule) and isinstance(notice, Notify)
    assert (save.schedule.last_status, save.schedule.last_error) == ("error", "topic tp1 is closed")
    assert save.schedule.failures == 1 and notice.level == "error"


def test_a_due_time_never_overlaps_the_previous_run() -> None:
    book = added(every(5))
    [run] = book.collect(T0 + 5)
    sent(book, run, T0 + 5)
    effects = book.collect(T0 + 10, running={"sc1"})
    assert [type(e) for e in effects] == [SaveSchedule, Notify]
    save = effects[0]
    assert isinstance(save, SaveSchedule)
    assert (save.schedule.last_status, save.schedule.skipped, save.schedule.last_due) == ("skipped", 1, T0 + 10)
    assert save.schedule.next_due == T0 + 15
    with pytest.raises(TopicBusy, match=r"^the previous run of schedule sc1 is still queued"):
        book.run_now("sc1", T0 + 11, running=True)


def test_the_run_outcome_comes_from_the_turn_end_even_before_the_send_returns() -> None:
    book = added(every(5))
    [run] = book.collect(T0 + 5)
    row = MessageRow(
        id="r1", topic_id="tp1", role="user", status="success", position=1, turn_id="t1",
        meta={"client_msg_id": run.client_msg_id},
    )
    book.observe("tp1", RowOpened(topic_id="tp1", seq=1, row=row))
    # A fast turn can end while the send waits for its commit.
    assert book.observe("tp1", TurnEnded(topic_id="tp1", seq=2, turn_id="t1", status="error", error="boom")) == []
    [save] = book.run_sent("sc1", SendResult(row_id="r1", disposition="started", turn_id="t1"), T0 + 5)
    assert isinstance(save, SaveSchedule)
    assert (save.schedule.last_status, save.schedule.last_error, save.schedule.failures) == ("error", "boom", 1)


def test_a_queued_run_ends_with_its_later_turn_or_as_a_draft() -> None:
    book = added(every(5))
    [run] = book.collect(T0 + 5)
    queued = MessageRow(
        id="r1", topic_id="tp1", role="user", status="queued", position=9,
        meta={"client_msg_id": run.client_msg_id},
    )
    book.observe("tp1", RowOpened(topic_id="tp1", seq=1, row=queued))
    book.run_sent("sc1", SendResult(row_id="r1", disposition="queued"), T0 + 5)
    assert book.get("sc1").last_status == "running"
    book.observe("tp1", RowUpdated(topic_id="tp1", seq=2, row_id="r1", status="success", turn_id="t9"))
    [save] = book.observe("tp1", TurnEnded(topic_id="tp1", seq=3, turn_id="t9", status="success"))
    assert isinstance(save, SaveSchedule) and save.schedule.last_status == "success"
    # The next run is stopped before it leaves the queue.
    [run2] = book.collect(T0 + 10)
    queued2 = msgspec.structs.replace(queued, id="r2", meta={"client_msg_id": run2.client_msg_id})
    book.observe("tp1", RowOpened(topic_id="tp1", seq=4, row=queued2))
    book.run_sent("sc1", SendResult(row_id="r2", disposition="queued"), T0 + 10)
    [save] = book.observe("tp1", RowUpdated(topic_id="tp1", seq=5, row_id="r2", status="draft"))
    assert isinstance(save, SaveSchedule) and save.schedule.last_status == "stopped"
    # Events of rows that are not runs change nothing.
    assert book.observe("tp1", RowRemoved(topic_id="tp1", seq=6, row_id="other")) == []


def test_a_resent_key_after_a_restart_records_no_outcome_of_its_own() -> None:
    book = added(every(5))
    [_run] = book.collect(T0 + 5)
    # The runtime knew the key: no row opened, the old result came back.
    [save] = book.run_sent("sc1", SendResult(row_id="r-old", disposition="started"), T0 + 5)
    assert isinstance(save, SaveSchedule)
    assert save.schedule.last_status == "" and "before hostd restarted" in save.schedule.last_error


def test_pause_and_resume_never_replay_the_paused_due_times() -> None:
    book = added(every(5, missed="run-once"))
    paused, _ = book.set_enabled("sc1", False, T0 + 1)
    assert paused.next_due is None and book.next_wake() is None
    assert book.collect(T0 + 100) == []
    resumed, [save] = book.set_enabled("sc1", True, T0 + 101)
    assert isinstance(save, SaveSchedule)
    assert resumed.next_due == T0 + 105 and book.collect(T0 + 104) == []
    [run] = book.collect(T0 + 105)
    assert isinstance(run, StartRun) and run.due == T0 + 105
    assert book.set_enabled("sc1", True, T0 + 106)[1] == []  # no change, nothing saved


def test_removing_the_topic_removes_its_schedules() -> None:
    book = added(every(5))
    assert book.observe("tp1", TopicDeleted(topic_id="tp1", seq=3)) == [DropSchedule("sc1")]
    assert book.schedules() == []


def test_an_assistant_schedule_creates_a_topic_per_run_and_follows_the_latest() -> None:
    info = ScheduleInfo(id="sc1", assistant="daily", text="summary", every_s=60)
    book = added(info)
    [claim, run] = book.collect(T0 + 60)
    # Saved before the run: a fresh topic has no row in which a resent key could be found.
    assert isinstance(claim, SaveSchedule) and claim.schedule.last_due == T0 + 60
    assert isinstance(run, StartRun) and (run.topic_id, run.assistant) == ("", "daily")
    sent(book, run, T0 + 60, topic="tp-new")
    stored = book.get("sc1")
    assert (stored.topic_id, stored.last_topic_id, stored.runs) == ("", "tp-new", 1)
    # Deleting the run's topic keeps the schedule; its notices go to the latest run's topic.
    assert book.observe("tp-new", TopicDeleted(topic_id="tp-new", seq=1)) == []
    [save, notice] = book.collect(T0 + 120, running={"sc1"})
    assert isinstance(save, SaveSchedule) and save.schedule.last_status == "skipped"
    assert isinstance(notice, Notify) and notice.topic_id == "tp-new"


def test_run_now_sends_outside_the_due_times() -> None:
    book = added(every(3600))
    [run] = book.run_now("sc1", T0 + 7, running=False)
    assert isinstance(run, StartRun) and run.due is None
    assert run.client_msg_id.startswith("schedule:sc1:now:")
    sent(book, run, T0 + 7)
    info = book.get("sc1")
    assert info.runs == 1 and info.next_due == T0 + 3600 and info.last_due is None


# --- missed runs (the daemon was down) ----------------------------------------------------------


def restarted(info: ScheduleInfo, booted_at: float) -> ScheduleBook:
    return ScheduleBook([info], booted_at=booted_at)


def stored_after_one_run(**kw: object) -> ScheduleInfo:
    book = added(every(60, **kw))
    [run] = book.collect(T0 + 60)
    sent(book, run, T0 + 60)
    return book.get("sc1")


def test_missed_run_once_runs_the_latest_missed_due_time_once_and_reports_the_rest() -> None:
    stored = stored_after_one_run(missed="run-once")
    # hostd was down from T0+70 to T0+400: due times 120, 180, 240, 300, 360 passed.
    book = restarted(stored, booted_at=T0 + 400)
    assert book.get("sc1").next_due == T0 + 120
    notice, run = book.collect(T0 + 400.5)
    assert isinstance(run, StartRun) and run.due == T0 + 360
    assert isinstance(notice, Notify) and notice.code == "schedule_missed"
    assert notice.message == (
        "schedule sc1: 4 due times were missed while hostd was not running "
        "(2027-01-15T08:02:00+00:00 to 2027-01-15T08:05:00+00:00); ran the one due "
        "2027-01-15T08:06:00+00:00"
    )
    sent(book, run, T0 + 400.6, row="r2", turn="t2")
    info = book.get("sc1")
    assert (info.last_due, info.skipped, info.runs, info.next_due) == (T0 + 360, 4, 2, T0 + 420)
    assert book.collect(T0 + 401) == []


def test_missed_skip_runs_nothing_and_reports_every_missed_due_time() -> None:
    stored = stored_after_one_run(missed="skip")
    book = restarted(stored, booted_at=T0 + 400)
    save, notice = book.collect(T0 + 400.5)
    assert isinstance(save, SaveSchedule) and isinstance(notice, Notify)
    assert save.schedule.last_due == T0 + 360 and save.schedule.skipped == 5
    assert save.schedule.last_status == "skipped" and save.schedule.next_due == T0 + 420
    assert save.schedule.last_error == notice.message
    assert notice.message.endswith("none was run (missed-run policy: skip)")
    assert notice.message.startswith("schedule sc1: 5 due times were missed while hostd was not")
    [run] = book.collect(T0 + 420)  # the first due time after the start runs as usual
    assert isinstance(run, StartRun) and run.due == T0 + 420


def test_a_due_time_later_than_the_grace_counts_as_missed_while_running() -> None:
    book = added(every(100, missed="skip"))
    # The machine slept through the due time (the daemon was running but not scheduled).
    save, notice = book.collect(T0 + 100 + 61)
    assert isinstance(save, SaveSchedule) and isinstance(notice, Notify)
    assert notice.message.startswith("schedule sc1: 1 due time was missed (2027-01-15T08:01:40")
    assert [type(e) for e in added(every(100, missed="skip")).collect(T0 + 100 + 59)] == [StartRun]


def test_a_restart_never_runs_a_handled_due_time_again() -> None:
    # kill -9 right after the run's row was stored but before the schedule was: the stored
    # schedule still has last_due = None, and the new daemon starts before the next due time.
    book = added(every(60))
    [run] = book.collect(T0 + 60)
    lost = book.get("sc1")  # what the store still has: nothing about this run
    assert lost.last_due == T0 + 60  # in memory only
    stale = msgspec.structs.replace(lost, last_due=None)
    again = restarted(stale, booted_at=T0 + 65)
    [rerun] = again.collect(T0 + 65)
    # Same due time, same key: the topic runtime returns the first row instead of a second.
    assert rerun.client_msg_id == run.client_msg_id  # type: ignore[union-attr]
    # Once saved, the handled due time is never collected again.
    saved = restarted(book.get("sc1"), booted_at=T0 + 65)
    assert saved.collect(T0 + 65) == []


@given(steps=st.lists(st.floats(min_value=0.01, max_value=400), min_size=1, max_size=40))
@settings(max_examples=200, deadline=None)
def test_due_times_run_in_order_and_never_twice(steps: list[float]) -> None:
    book = added(every(7, missed="run-once"))
    now, fired = T0, []
    for step in steps:
        now += step
        for eff in book.collect(now):
            if isinstance(eff, StartRun):
                fired.append(eff.due)
                sent(book, eff, now, row=f"r{len(fired)}", turn=f"t{len(fired)}")
        # The next due time is always in the future and after every handled one.
        info = book.get("sc1")
        assert info.next_due is not None and info.next_due > now
    assert fired == sorted(set(fired))
