"""What the schedule core asks the shell to do (`hostd.core.schedules.ScheduleBook`'s
effects): start a run, save or drop a schedule, show a notice."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from hostd_protocol.client_messages import (
    ScheduleInfo,
)
from hostd_protocol.common import SendIntent

__all__ = ["DropSchedule", "Notify", "SaveSchedule", "ScheduleEffect", "StartRun"]


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
