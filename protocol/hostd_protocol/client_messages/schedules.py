"""Scheduled prompts on the client <-> host channel: the schedule record and its requests."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from hostd_protocol.common import _Frozen

__all__ = [
    "AddSchedule",
    "ListSchedules",
    "MissedPolicy",
    "RemoveSchedule",
    "RunScheduleNow",
    "SCHEDULE_RUN_PREFIX",
    "ScheduleBusy",
    "ScheduleInfo",
    "ScheduleRunStatus",
    "SetScheduleEnabled",
    "scheduled_by",
]

#: The prefix of every scheduled run's `client_msg_id` (`schedule:<schedule id>:<due>`), the
#: one mark that tells a window a user row was sent by a schedule, not typed by the user.
SCHEDULE_RUN_PREFIX = "schedule:"


def scheduled_by(meta: Mapping[str, Any]) -> str:
    """The id of the schedule whose run stored a user row with this `meta` ("" for a message a
    window sent): what a window shows such a row as, instead of "you". Every window reads it
    here (Python) or with `scheduledBy` (TypeScript client): one rule, documented in
    docs/protocol.md "Scheduled prompts"."""
    key = meta.get("client_msg_id", "")
    if not isinstance(key, str) or not key.startswith(SCHEDULE_RUN_PREFIX):
        return ""
    return key[len(SCHEDULE_RUN_PREFIX) :].partition(":")[0]


ScheduleBusy = Literal["queue", "skip"]
"""What a due run does when its topic is answering: wait in the queue, or skip this due time."""

MissedPolicy = Literal["run-once", "skip"]
"""What happens to due times that passed while the daemon was down: one run at start, or none."""

ScheduleRunStatus = Literal["", "running", "success", "error", "stopped", "skipped"]


class ScheduleInfo(_Frozen, frozen=True, kw_only=True):
    """A scheduled prompt: `text` is sent to `topic_id` at every due time, or, when
    `assistant` is set instead, to a fresh topic of that assistant created for each run.

    Exactly one of `cron` (a 5-field cron expression evaluated in the IANA time zone `tz`) or
    `every_s` (an interval in seconds from `created_at`) is set. Times are Unix seconds.
    The `last_*` fields describe the latest run (or skipped due time).
    """

    id: str
    topic_id: str = ""
    text: str
    cron: str = ""
    every_s: float = 0.0
    tz: str = "UTC"
    busy: ScheduleBusy = "queue"
    missed: MissedPolicy = "run-once"
    enabled: bool = True
    created_at: float = 0.0
    #: Due times at or before this one are not run (set at creation and at resume).
    active_since: float = 0.0
    #: The next due time, or None when paused or when the cron expression never fires again.
    next_due: float | None = None
    #: The latest due time handled (run or skipped); a restart never runs it again.
    last_due: float | None = None
    last_run_at: float = 0.0
    last_status: ScheduleRunStatus = ""
    last_error: str = ""
    #: The user row the latest run stored in the topic.
    last_row_id: str = ""
    runs: int = 0
    #: Failed runs in a row (reset by a successful one).
    failures: int = 0
    skipped: int = 0
    #: Create a topic of this assistant for every run (then `topic_id` is empty).
    assistant: str = ""
    #: The topic of the latest run (`topic_id`, or the one created for it).
    last_topic_id: str = ""


class AddSchedule(_Frozen, frozen=True, kw_only=True, tag="add-schedule"):
    """Create a schedule on a topic, or (`assistant`) one that creates a topic per run.
    Answered by `ScheduleResult`."""

    id: int
    topic_id: str = ""
    text: str
    cron: str = ""
    every_s: float = 0.0
    tz: str = "UTC"
    busy: ScheduleBusy = "queue"
    missed: MissedPolicy = "run-once"
    enabled: bool = True
    assistant: str = ""


class ListSchedules(_Frozen, frozen=True, tag="list-schedules"):
    """All schedules, or those of `topic_id`. Answered by `ScheduleListResult`."""

    id: int
    topic_id: str = ""


class RemoveSchedule(_Frozen, frozen=True, tag="remove-schedule"):
    id: int
    schedule_id: str


class SetScheduleEnabled(_Frozen, frozen=True, tag="set-schedule-enabled"):
    """Pause (`enabled=False`) or resume a schedule. Due times passed while paused never run."""

    id: int
    schedule_id: str
    enabled: bool


class RunScheduleNow(_Frozen, frozen=True, tag="run-schedule-now"):
    """Send the schedule's message now, outside its due times. Answered by `ScheduleResult`."""

    id: int
    schedule_id: str
