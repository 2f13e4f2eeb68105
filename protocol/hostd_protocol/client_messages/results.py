"""What a `Reply` carries: one result type per request kind, and the `Result` union."""

from __future__ import annotations

from typing import Literal

from hostd_protocol.client_messages.records import (
    AssistantInfo,
    DriverInfo,
    MessageRow,
    Snapshot,
    TopicInfo,
)
from hostd_protocol.client_messages.schedules import ScheduleInfo
from hostd_protocol.common import Chunk, Usage, _Frozen

__all__ = [
    "AssistantListResult",
    "AttachResult",
    "DriverListResult",
    "Empty",
    "HistoryResult",
    "Pong",
    "Result",
    "RewindResult",
    "RowContent",
    "ScheduleListResult",
    "ScheduleResult",
    "SendDisposition",
    "SendResult",
    "StatusResult",
    "TopicListResult",
    "TopicResult",
    "TurnUsage",
    "UsageTotals",
]


class Empty(_Frozen, frozen=True, tag="empty"):
    """A request that returns nothing but success."""


class TopicResult(_Frozen, frozen=True, tag="topic"):
    topic: TopicInfo


class TopicListResult(_Frozen, frozen=True, tag="topic-list"):
    topics: list[TopicInfo]
    #: More topics follow: `ListTopics(after=<id of the last one here>)`.
    has_more: bool = False


class AttachResult(_Frozen, frozen=True, tag="attached"):
    """Answer to `Attach`.

    mode "snapshot": `snapshot` is set; live events with seq > snapshot.seq follow.
    mode "replay": missed events follow, then `ReplayEnd`, then live events.
    """

    topic_id: str
    mode: Literal["snapshot", "replay"]
    snapshot: Snapshot | None = None


SendDisposition = Literal["started", "steered", "queued"]


class SendResult(_Frozen, frozen=True, tag="sent"):
    """The message is committed to the store. `disposition` says what happened to it."""

    row_id: str
    disposition: SendDisposition
    turn_id: str = ""
    position: int = 0


class RewindResult(_Frozen, frozen=True, tag="rewound"):
    """Answer to `Rewind`: the rows that left the visible history, in position order."""

    row_ids: list[str] = []


class HistoryResult(_Frozen, frozen=True, tag="history-page"):
    """At most `limit` rows and `limits.MAX_REPLY_BYTES`, never zero rows when any exist
    before `before_position`: paging with `before_position = rows[0].position` always moves."""

    rows: list[MessageRow]
    has_more: bool = False


class RowContent(_Frozen, frozen=True, tag="row-content"):
    """A piece of a row's parts (answer to `ReadRow`): `parts` starts at (`part`, `offset`);
    a part cut by the piece's size continues at (`next_part`, `next_offset`)."""

    row_id: str
    parts: list[Chunk]
    part: int = 0
    offset: int = 0
    next_part: int = 0
    next_offset: int = 0
    done: bool = True


class StatusResult(_Frozen, frozen=True, tag="daemon-status"):
    pid: int
    version: str
    uptime_s: float
    topics: int = 0
    active_turns: int = 0
    connections: int = 0
    drivers_running: int = 0
    warm_drivers: int = 0
    data_dir: str = ""
    socket_path: str = ""
    #: Enabled schedules, and the soonest due time among them (None: nothing due).
    schedules: int = 0
    next_schedule_id: str = ""
    next_schedule_due: float | None = None


class DriverListResult(_Frozen, frozen=True, tag="driver-list"):
    drivers: list[DriverInfo]


class AssistantListResult(_Frozen, frozen=True, tag="assistant-list"):
    """Answer to `ListAssistants`: every assistant file, sorted by name; a broken one is
    listed with its `error` (the request itself does not fail for it)."""

    assistants: list[AssistantInfo] = []


class Pong(_Frozen, frozen=True, tag="pong"):
    time: float = 0.0


class TurnUsage(_Frozen, frozen=True):
    turn_id: str
    usage: Usage


class UsageTotals(_Frozen, frozen=True, tag="usage-totals"):
    """Answer to `GetUsage`. `turns` is filled only when a topic was asked for."""

    topics: dict[str, Usage] = {}
    turns: list[TurnUsage] = []


class ScheduleResult(_Frozen, frozen=True, tag="schedule"):
    schedule: ScheduleInfo


class ScheduleListResult(_Frozen, frozen=True, tag="schedule-list"):
    schedules: list[ScheduleInfo]


Result = (
    Empty
    | TopicResult
    | TopicListResult
    | AttachResult
    | SendResult
    | RewindResult
    | HistoryResult
    | RowContent
    | StatusResult
    | DriverListResult
    | AssistantListResult
    | Pong
    | UsageTotals
    | ScheduleResult
    | ScheduleListResult
)
