"""Scheduled prompts, sans-IO: when is a schedule due, and what happens at each due time.

A schedule (`ScheduleInfo`, the wire record) sends its `text` to its topic at every due time:
a 5-field cron expression evaluated in an IANA time zone, or an interval in seconds counted
from its creation. `ScheduleBook` holds every schedule and answers the shell's questions;
time always comes in as an argument (Unix seconds) and everything to do goes out as effects:

- `StartRun`: send the text to the topic as an ordinary user message (`intent`, and
  `client_msg_id`, a durable key unique to (schedule, due time)); report the outcome with
  `run_sent` or `run_refused`.
- `SaveSchedule` / `DropSchedule`: hand to the store.
- `Notify`: show a notice to the topic's windows (skipped due times, failed runs).

Rules this module guards:

1. A due time is handled at most once: `last_due` moves forward before the run is started, and
   the run's `client_msg_id` is derived from the due time, so a restart after a kill -9 that
   lost the `last_due` update resends the same key, which the topic runtime does not store
   twice. A schedule that makes a topic per run has no such row to find: its `last_due` is
   saved before the run starts (at most once, rather than exactly once).
2. Due times that passed while the daemon was down (before `booted_at`), or that are later
   than `grace` (a suspended laptop), are *missed*: policy `run-once` runs the latest of them
   once, `skip` runs none. Every due time not run is counted in `skipped` and reported.
3. Runs never overlap: a due time that finds the previous run of the same schedule still
   queued or answering is skipped (reported), so a failing or slow schedule cannot pile up
   messages. Whether a run is still going is the shell's input (`running`), read from the
   topic runtime, so it holds across restarts too.
4. Busy topic: intent `queue` waits behind the running turn; `skip` sends with intent
   `start`, which the runtime refuses while a turn runs, and that due time counts as skipped.
5. Pausing and resuming never replays the paused period: due times at or before
   `active_since` (set at creation and at resume) are never run.

When a schedule is due (cron via `cronsim`, intervals, windows of due times) is
`hostd.core.schedule_times`; the effects are `hostd.core.schedule_effects`. Both are
re-exported here.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Set
from dataclasses import dataclass, field

import msgspec

from hostd.core.schedule_effects import (
    KEY_PREFIX,
    DropSchedule,
    Notify,
    SaveSchedule,
    ScheduleEffect,
    StartRun,
    run_key,
    scheduled_by,
)
from hostd.core.schedule_times import (
    MISSED_SCAN_CAP,
    DueWindow,
    _cron,
    check_cron,
    describe_time,
    due_between,
    next_due_after,
    zone,
)
from hostd_protocol.client_messages import (
    RowAppended,
    RowOpened,
    RowRemoved,
    RowUpdated,
    ScheduleInfo,
    SendResult,
    TopicDeleted,
    TopicEvent,
    TurnEnded,
)
from hostd_protocol.common import SendIntent
from hostd_protocol.errors import InvalidArgument, NotFound, TopicBusy

#: The shortest interval a schedule may have (a guard against a typo like `--every 0.001`).
MIN_INTERVAL_S = 1.0
#: The longest: ten years. Longer is a typo too (`--every 99999999999d`), and its due times
#: would lie past what a date can hold (year 9999), so no window could show them.
MAX_INTERVAL_S = 3650 * 86400.0
#: How late a due time may be handled and still count as on time rather than missed.
DEFAULT_GRACE_S = 60.0
#: Longest message text a schedule stores (the same order as a pasted prompt).
MAX_TEXT_CHARS = 100_000


# --- the book -----------------------------------------------------------------------------------


@dataclass(slots=True)
class _Run:
    """A run between `StartRun` and its end, as the book sees it through events."""

    schedule_id: str
    key: str
    sent: bool = False
    row_id: str = ""
    turn_id: str = ""
    outcome: tuple[str, str] | None = None  # (status, error) seen before `run_sent`


@dataclass(slots=True)
class _Index:
    by_key: dict[str, _Run] = field(default_factory=dict)
    by_row: dict[str, _Run] = field(default_factory=dict)
    by_turn: dict[str, _Run] = field(default_factory=dict)

    def drop(self, run: _Run) -> None:
        self.by_key.pop(run.key, None)
        self.by_row.pop(run.row_id, None)
        self.by_turn.pop(run.turn_id, None)


class ScheduleBook:
    """Every schedule of the daemon, and the decisions at each due time (see module doc).

    Args:
        schedules: The stored schedules.
        booted_at: When this daemon started (Unix seconds): due times before it were missed.
        grace: How late a due time may be handled and still run as on time.
    """

    def __init__(
        self,
        schedules: Iterable[ScheduleInfo],
        *,
        booted_at: float,
        grace: float = DEFAULT_GRACE_S,
    ) -> None:
        self._booted_at = booted_at
        self._grace = grace
        self._all: dict[str, ScheduleInfo] = {}
        self._runs = _Index()
        #: Schedules whose `StartRun` is out and not yet answered by run_sent / run_refused.
        self._starting: set[str] = set()
        for info in schedules:
            # Recomputed rather than trusted: the time zone database may have changed.
            self._all[info.id] = self._with_next(info)

    # --- queries --------------------------------------------------------------------------

    def get(self, schedule_id: str) -> ScheduleInfo:
        """Raises NotFound for an unknown id."""
        info = self._all.get(schedule_id)
        if info is None:
            raise NotFound(
                f"no schedule with id {schedule_id!r}", details={"schedule_id": schedule_id}
            )
        return info

    def schedules(self, topic_id: str = "") -> list[ScheduleInfo]:
        """All schedules (of `topic_id` when given), oldest first."""
        found = [s for s in self._all.values() if not topic_id or s.topic_id == topic_id]
        return sorted(found, key=lambda s: (s.created_at, s.id))

    def next_wake(self) -> ScheduleInfo | None:
        """The enabled schedule due soonest, or None when nothing is due ever."""
        due = [s for s in self._all.values() if s.enabled and s.next_due is not None]
        return min(due, key=lambda s: (s.next_due, s.id), default=None)

    def starting(self, schedule_id: str) -> bool:
        """True while a `StartRun` of this schedule waits for run_sent / run_refused."""
        return schedule_id in self._starting

    # --- requests -------------------------------------------------------------------------

    def add(self, info: ScheduleInfo, now: float) -> tuple[ScheduleInfo, list[ScheduleEffect]]:
        """Validate and add a new schedule (`info.id` chosen by the caller).

        Raises:
            InvalidArgument: no or both of cron / every_s, a bad cron expression, time zone,
                interval, intent or policy, or an empty or oversized text.
        """
        if info.id in self._all:
            raise InvalidArgument(f"schedule {info.id!r} exists already")
        if bool(info.topic_id) == bool(info.assistant):
            raise InvalidArgument(
                "give exactly one of a topic (runs go there) or an assistant (a new topic per run)"
            )
        if not info.text.strip():
            raise InvalidArgument("the schedule's message is empty; give the text to send")
        if len(info.text) > MAX_TEXT_CHARS:
            raise InvalidArgument(f"the schedule's message is longer than {MAX_TEXT_CHARS} characters")
        if info.every_s and not (MIN_INTERVAL_S <= info.every_s <= MAX_INTERVAL_S):  # NaN too
            raise InvalidArgument(
                f"the interval must be between {MIN_INTERVAL_S:g} s and "
                f"{MAX_INTERVAL_S / 86400:g} days, not {info.every_s:g} s"
            )
        if bool(info.cron.strip()) == bool(info.every_s):
            raise InvalidArgument("give exactly one of a cron expression or an interval (every_s)")
        if info.cron:
            check_cron(info.cron.strip())
        zone(info.tz)
        if info.busy not in ("queue", "skip"):
            raise InvalidArgument(f"unknown busy intent {info.busy!r}; use queue or skip")
        if info.missed not in ("run-once", "skip"):
            raise InvalidArgument(f"unknown missed-run policy {info.missed!r}; use run-once or skip")
        fresh = msgspec.structs.replace(
            info,
            cron=info.cron.strip(),
            created_at=now,
            active_since=now,
            last_due=None,
            last_run_at=0.0,
            last_status="",
            last_error="",
            last_row_id="",
            last_topic_id="",
            runs=0,
            failures=0,
            skipped=0,
        )
        fresh = self._with_next(fresh)
        self._all[fresh.id] = fresh
        return fresh, [SaveSchedule(fresh)]

    def remove(self, schedule_id: str) -> list[ScheduleEffect]:
        """Raises NotFound for an unknown id. A run already sent is not taken back."""
        self.get(schedule_id)
        del self._all[schedule_id]
        for run in [r for r in self._runs.by_key.values() if r.schedule_id == schedule_id]:
            self._runs.drop(run)
        return [DropSchedule(schedule_id)]

    def set_enabled(
        self, schedule_id: str, enabled: bool, now: float
    ) -> tuple[ScheduleInfo, list[ScheduleEffect]]:
        """Pause or resume. Resuming counts due times from `now` on (rule 5); a no-op change
        changes nothing."""
        info = self.get(schedule_id)
        if info.enabled == enabled:
            return info, []
        if enabled:
            info = msgspec.structs.replace(info, enabled=True, active_since=now)
        else:
            info = msgspec.structs.replace(info, enabled=False)
        return self._save(self._with_next(info))

    def run_now(self, schedule_id: str, now: float, *, running: bool) -> list[ScheduleEffect]:
        """Start a run outside the due times (its due times are unchanged).

        Args:
            running: The previous run of this schedule is still queued or answering.

        Raises:
            NotFound: unknown schedule.
            TopicBusy: the previous run is still going (runs never overlap).
        """
        info = self.get(schedule_id)
        if running or schedule_id in self._starting:
            raise TopicBusy(
                f"the previous run of schedule {schedule_id} is still queued or answering",
                details={"schedule_id": schedule_id, "row_id": info.last_row_id},
            )
        return [self._start(info, None, run_key(schedule_id, None, now))]

    def collect(self, now: float, running: Set[str] = frozenset()) -> list[ScheduleEffect]:
        """Every decision due at `now`, for every enabled schedule whose next due time passed.

        Args:
            running: Ids of schedules whose previous run is still queued or answering.
        """
        out: list[ScheduleEffect] = []
        for info in sorted(self._all.values(), key=lambda s: (s.next_due or 0.0, s.id)):
            if info.enabled and info.next_due is not None and info.next_due <= now:
                if info.id not in self._starting:
                    out.extend(self._due(info, now, info.id in running))
        return out

    # --- outcomes -------------------------------------------------------------------------

    def run_sent(
        self, schedule_id: str, result: SendResult, now: float, *, topic_id: str = ""
    ) -> list[ScheduleEffect]:
        """The run's message was accepted (`result` is the topic's answer to the send;
        `topic_id` the topic it went to, when the schedule creates one per run)."""
        self._starting.discard(schedule_id)
        info = self._all.get(schedule_id)
        if info is None:  # removed while the send was in flight
            return []
        run = self._runs.by_row.get(result.row_id)
        status, error = "running", ""
        if run is None:
            # No row was opened: the runtime recognised the key and returned the message it
            # stored before a restart. That run's outcome belongs to the previous daemon.
            status, error = "", "sent before hostd restarted; its outcome was not recorded"
        elif run.outcome is not None:
            status, error = run.outcome
            self._runs.drop(run)
        else:
            run.sent = True
        info = msgspec.structs.replace(
            info,
            last_run_at=now,
            last_row_id=result.row_id,
            last_topic_id=topic_id or info.topic_id,
            runs=info.runs + 1,
            last_status=status,
            last_error=error,
        )
        if status in ("success", "error"):
            info = _count_outcome(info, status)
        return list(self._save(info)[1])

    def run_refused(
        self, schedule_id: str, code: str, message: str, now: float
    ) -> list[ScheduleEffect]:
        """The send raised a typed error (`code`, `message`). A busy topic with intent `skip`
        is a skipped due time; anything else is a failed run."""
        self._starting.discard(schedule_id)
        for run in [r for r in self._runs.by_key.values() if r.schedule_id == schedule_id]:
            self._runs.drop(run)
        info = self._all.get(schedule_id)
        if info is None:
            return []
        if code == TopicBusy.code and info.busy == "skip":
            info = msgspec.structs.replace(
                info,
                last_status="skipped",
                last_error="the topic was answering",
                skipped=info.skipped + 1,
            )
            note = Notify(
                _notice_topic(info),
                "schedule_skipped",
                f"schedule {info.id}: skipped a run because the topic was answering",
            )
        else:
            info = msgspec.structs.replace(
                info,
                last_status="error",
                last_error=message,
                last_run_at=now,
                failures=info.failures + 1,
            )
            note = Notify(
                _notice_topic(info),
                "schedule_failed",
                f"schedule {info.id}: run failed: {message}",
                "error",
            )
        return [*self._save(info)[1], note]

    def observe(self, topic_id: str, event: TopicEvent) -> list[ScheduleEffect]:
        """Follow a topic's events to learn how a run ended (called for every event)."""
        if type(event) is RowAppended:
            return []  # the bulk of a stream (one per chunk read): says nothing about runs
        if isinstance(event, RowOpened):
            key = event.row.meta.get("client_msg_id")
            run = self._runs.by_key.get(key) if isinstance(key, str) else None
            if run is not None:
                run.row_id = event.row.id
                self._runs.by_row[run.row_id] = run
                if event.row.turn_id:
                    run.turn_id = event.row.turn_id
                    self._runs.by_turn[run.turn_id] = run
            return []
        if isinstance(event, RowUpdated):
            run = self._runs.by_row.get(event.row_id)
            if run is None:
                return []
            if event.turn_id:
                run.turn_id = event.turn_id
                self._runs.by_turn[run.turn_id] = run
            if event.status == "draft":
                return self._ended(run, "stopped", "handed back as a draft when a turn was stopped")
            return []
        if isinstance(event, RowRemoved):
            run = self._runs.by_row.get(event.row_id)
            return [] if run is None else self._ended(run, "stopped", "removed from the queue")
        if isinstance(event, TurnEnded):
            run = self._runs.by_turn.get(event.turn_id)
            if run is None:
                return []
            return self._ended(run, event.status, event.error)
        if isinstance(event, TopicDeleted):
            out: list[ScheduleEffect] = []
            for info in [s for s in self.schedules() if topic_id and s.topic_id == topic_id]:
                out.extend(self.remove(info.id))
            return out
        return []

    # --- internals ------------------------------------------------------------------------

    def _due(self, info: ScheduleInfo, now: float, running: bool) -> list[ScheduleEffect]:
        since = max(info.active_since, info.last_due if info.last_due is not None else -math.inf)
        window = due_between(info, since, now)
        if window.latest is None:  # next_due was stale (clock moved back): recompute
            self._all[info.id] = self._with_next(info)
            return []
        latest = window.latest
        on_time = latest >= self._booted_at and now - latest <= self._grace
        run = on_time or info.missed == "run-once"
        not_run = window.count - 1 if run else window.count
        out: list[ScheduleEffect] = []
        info = msgspec.structs.replace(info, last_due=latest)
        if not_run:
            info = msgspec.structs.replace(info, skipped=info.skipped + not_run)
            out.append(self._missed_notice(info, window, not_run, run))
        if run and running:
            info = msgspec.structs.replace(
                info,
                last_status="skipped",
                last_error="the previous run was still queued or answering",
                skipped=info.skipped + 1,
            )
            out.append(
                Notify(
                    _notice_topic(info),
                    "schedule_skipped",
                    f"schedule {info.id}: skipped the run due {describe_time(latest, info.tz)} "
                    "because its previous run is still queued or answering",
                )
            )
            run = False
        if not run:
            if not on_time:
                # Windows are rarely attached when a restart reports missed runs: the record
                # keeps the notice's text so `schedule list` can still tell.
                missed = out[0]
                assert isinstance(missed, Notify)
                info = msgspec.structs.replace(
                    info, last_status="skipped", last_error=missed.message
                )
            return [*self._save(self._with_next(info))[1], *out]
        info = self._with_next(info)
        self._all[info.id] = info
        start = self._start(info, latest, run_key(info.id, latest, now))
        if info.assistant:
            # A run in a fresh topic has no earlier row to find its key in: the due time is
            # saved (and committed by the shell) before the run, so a kill -9 loses at most
            # that run rather than running it twice.
            return [*out, SaveSchedule(info), start]
        # Saved by run_sent / run_refused: the run's key makes a resend after a crash harmless.
        return [*out, start]

    def _missed_notice(
        self, info: ScheduleInfo, window: DueWindow, not_run: int, ran: bool
    ) -> Notify:
        """Name the due times that did not run: all of the window, or all but its latest."""
        assert window.first is not None and window.latest is not None
        many = f"at least {not_run}" if window.capped else str(not_run)
        verb = "due time was" if not_run == 1 else "due times were"
        # The last one not run: the latest when none ran, else the one before the latest.
        last = window.latest if not ran else self._before(info, window.latest)
        span = describe_time(window.first, info.tz)
        if not_run > 1 and last is not None:
            span += f" to {describe_time(last, info.tz)}"
        why = " while hostd was not running" if window.first < self._booted_at else ""
        if ran:
            outcome = f"ran the one due {describe_time(window.latest, info.tz)}"
        else:
            outcome = "none was run (missed-run policy: skip)"
        text = f"schedule {info.id}: {many} {verb} missed{why} ({span}); {outcome}"
        return Notify(_notice_topic(info), "schedule_missed", text, "warning")

    @staticmethod
    def _before(info: ScheduleInfo, t: float) -> float | None:
        if info.every_s > 0:
            return t - info.every_s
        try:
            return next(_cron(info.cron, t, zone(info.tz), reverse=True)).timestamp()
        except StopIteration:
            return None

    def _start(self, info: ScheduleInfo, due: float | None, key: str) -> StartRun:
        run = _Run(info.id, key)
        self._runs.by_key[key] = run
        self._starting.add(info.id)
        intent: SendIntent = "queue" if info.busy == "queue" else "start"
        return StartRun(info.id, info.topic_id, info.text, intent, key, due, info.assistant)

    def _ended(self, run: _Run, status: str, error: str) -> list[ScheduleEffect]:
        if not run.sent:
            run.outcome = (status, error)  # run_sent records it
            return []
        self._runs.drop(run)
        info = self._all.get(run.schedule_id)
        if info is None or info.last_row_id != run.row_id:
            return []
        info = msgspec.structs.replace(info, last_status=status, last_error=error)
        return list(self._save(_count_outcome(info, status))[1])

    def _with_next(self, info: ScheduleInfo) -> ScheduleInfo:
        if not info.enabled:
            return msgspec.structs.replace(info, next_due=None)
        since = max(info.active_since, info.last_due if info.last_due is not None else -math.inf)
        return msgspec.structs.replace(info, next_due=next_due_after(info, since))

    def _save(self, info: ScheduleInfo) -> tuple[ScheduleInfo, list[ScheduleEffect]]:
        self._all[info.id] = info
        return info, [SaveSchedule(info)]


def _notice_topic(info: ScheduleInfo) -> str:
    """Where a schedule's notices go: its topic, or the topic of its latest run ("" = none)."""
    return info.topic_id or info.last_topic_id


def _count_outcome(info: ScheduleInfo, status: str) -> ScheduleInfo:
    if status == "success":
        return msgspec.structs.replace(info, failures=0)
    if status == "error":
        return msgspec.structs.replace(info, failures=info.failures + 1)
    return info


__all__ = [
    "DEFAULT_GRACE_S",
    "KEY_PREFIX",
    "MAX_INTERVAL_S",
    "MIN_INTERVAL_S",
    "MISSED_SCAN_CAP",
    "DropSchedule",
    "DueWindow",
    "Notify",
    "SaveSchedule",
    "ScheduleBook",
    "ScheduleEffect",
    "StartRun",
    "check_cron",
    "describe_time",
    "due_between",
    "next_due_after",
    "run_key",
    "scheduled_by",
    "zone",
]
