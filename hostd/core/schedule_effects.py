"""What the schedule core asks the shell to do (`hostd.core.schedules.ScheduleBook`'s
effects): start a run, save or drop a schedule, show a notice."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from hostd_protocol.client_messages import (
    SCHEDULE_RUN_PREFIX,
    ScheduleInfo,
    scheduled_by,
)
from hostd_protocol.common import SendIntent

__all__ = [
    "KEY_PREFIX",
    "DropSchedule",
    "Notify",
    "SaveSchedule",
    "ScheduleEffect",
    "StartRun",
    "run_key",
    "scheduled_by",
]

#: The prefix of every scheduled run's `client_msg_id`, so windows can tell it apart
#: (`scheduled_by` reads it; both live in hostd-protocol, shared by every window).
KEY_PREFIX = SCHEDULE_RUN_PREFIX


def run_key(schedule_id: str, due: float | None, now: float) -> str:
    """A run's `client_msg_id`: `schedule:<id>:<due>`, or `schedule:<id>:now:<now>` for a
    run-now (unique per due time, so a resend after a crash is not stored twice)."""
    when = f"now:{now!r}" if due is None else repr(due)
    return f"{KEY_PREFIX}{schedule_id}:{when}"


@dataclass(frozen=True, slots=True)
class StartRun:
    """Send `text` to `topic_id` as a user message; `due` is None for `run_now`. With
    `assistant` set (and no `topic_id`), create a topic of that assistant for this run."""

    schedule_id: str
    topic_id: str
    text: str
    intent: SendIntent
    client_msg_id: str
    due: float | None
    assistant: str = ""


@dataclass(frozen=True, slots=True)
class SaveSchedule:
    schedule: ScheduleInfo


@dataclass(frozen=True, slots=True)
class DropSchedule:
    schedule_id: str


@dataclass(frozen=True, slots=True)
class Notify:
    topic_id: str
    code: str
    message: str
    level: Literal["info", "warning", "error"] = "info"


ScheduleEffect = StartRun | SaveSchedule | DropSchedule | Notify
