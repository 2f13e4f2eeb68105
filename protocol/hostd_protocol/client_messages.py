"""The client <-> host channel: requests from windows, replies and topic events from the daemon.

Connection life:

1. client -> `Hello` (protocol version). The first frame also picks the encoding for the whole
   connection: a body starting with `{` is JSON, anything else msgpack. The host answers
   `Welcome` or `ErrorReply(code="version_mismatch" | "handshake_error")` and closes.
2. client -> requests, each with a client-chosen integer `id`; each is answered by exactly one
   `Reply(id, result)` or `ErrorReply(id, code, message)`. Replies may come out of order.
3. After `Attach`, the host pushes topic events (the `*Event` types below). Each carries the
   topic's `seq`, strictly increasing per topic, so a window can detect gaps and reconnect with
   `Attach(since=seq)`: it gets exactly the missed events and then `ReplayEnd`, or `Resync` when
   the replay buffer no longer reaches back that far (take a fresh snapshot with `Attach`).

Rows: a topic's history is a list of `MessageRow`s ordered by `position`. A window rebuilds it
from the `Attach` snapshot plus `RowOpened` / `RowAppended` / `RowUpdated` / `RowRemoved`.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from hostd_protocol.common import (
    AnswerTarget,
    ApprovalOption,
    Capabilities,
    Chunk,
    CompactionAnchor,
    HistoryMessage,
    RowRole,
    RowStatus,
    SendIntent,
    TopicState,
    TurnStatus,
    Usage,
    _Frozen,
)

# --- shared records -----------------------------------------------------------------------------


class TopicInfo(_Frozen, frozen=True):
    """A topic as clients see it."""

    id: str
    title: str = ""
    assistant: str = ""
    driver: str = ""
    model: str = ""
    working_dir: str = ""
    state: TopicState = "idle"
    created_at: float = 0.0
    updated_at: float = 0.0
    #: The latest event seq of the topic.
    seq: int = 0
    options: dict[str, Any] = {}


class MessageRow(_Frozen, frozen=True):
    """One row of a topic's history.

    `parts` holds the content; consecutive text (or thinking) deltas are merged into one part.
    A `marker` row (compaction anchor) has `anchor` set and is not a message.
    """

    id: str
    topic_id: str
    role: RowRole
    status: RowStatus
    position: int
    turn_id: str = ""
    parts: list[Chunk] = []
    error: str = ""
    error_code: str = ""
    anchor: CompactionAnchor | None = None
    created_at: float = 0.0
    updated_at: float = 0.0
    #: Set on a finished assistant row that produced no output at all.
    empty: bool = False
    meta: dict[str, Any] = {}
    #: The row left the visible history (a rewind, regenerate or edit-and-resend removed
    #: it). Only `History(all=True)` returns such rows; a snapshot never holds one.
    superseded: bool = False
    #: Multi-answer turns (`SendMessage.also`): which answer this row is (0 = the topic's own
    #: driver, 1.. = `also` in order). 0 on every other row.
    lane: int = 0
    #: An answer of a multi-answer turn that was not chosen (`ChooseAnswer`): shown, but not
    #: part of the history later turns see.
    alternative: bool = False
    #: Who wrote this answer; set on every answer row of a multi-answer turn (lane 0 too).
    target: AnswerTarget | None = None
    #: The answer's own token usage; set on the answer rows of a multi-answer turn when
    #: their lane ends.
    usage: Usage | None = None


ApprovalStatus = Literal["open", "allowed", "denied", "timed_out", "cancelled"]


class ApprovalInfo(_Frozen, frozen=True):
    """A tool-permission request from a driver, answerable by any window."""

    id: str
    topic_id: str
    turn_id: str
    tool: str
    input: dict[str, Any] = {}
    description: str = ""
    status: ApprovalStatus = "open"
    answered_by: str = ""
    reason: str = ""
    created_at: float = 0.0
    #: The driver's answers beyond allow / deny (`AnswerApproval.option_id` picks one).
    options: list[ApprovalOption] = []
    #: The option chosen, once answered with one.
    option_id: str = ""
    #: The lane (answer) of a multi-answer turn whose driver asks; 0 otherwise.
    lane: int = 0


class Snapshot(_Frozen, frozen=True):
    """Everything a window needs to draw a topic, consistent as of event `seq`."""

    topic: TopicInfo
    seq: int
    rows: list[MessageRow] = []
    approvals: list[ApprovalInfo] = []
    active_turn_id: str = ""
    #: True when older rows exist than the ones included (page with `History`).
    truncated: bool = False


class DriverInfo(_Frozen, frozen=True):
    """A driver found through the `hostd.drivers` entry point group."""

    name: str
    available: bool
    description: str = ""
    version: str = ""
    #: Why the driver is unavailable, and what to do about it.
    reason: str = ""
    #: The credential the driver would use, in words ("" when the driver has no check).
    credential: str = ""
    #: False when the driver's check found no credential (see `fix`).
    credential_ok: bool = True
    #: What to do when `credential_ok` is false; or a warning about the credential.
    fix: str = ""


# --- client -> host -----------------------------------------------------------------------------


class Hello(_Frozen, frozen=True, tag="hello"):
    """Handshake; must be the first frame."""

    protocol_version: tuple[int, int]
    client: str = ""
    #: An opaque token; required only on an (opt-in) network listener.
    token: str = ""


class CreateTopic(_Frozen, frozen=True, tag="create-topic"):
    id: int
    title: str = ""
    assistant: str = ""
    driver: str = ""
    model: str = ""
    working_dir: str = ""
    options: dict[str, Any] = {}


class ListTopics(_Frozen, frozen=True, tag="list-topics"):
    """Topics in creation order, as many as fit in one reply (`limits.MAX_REPLY_BYTES`).
    `has_more` in the answer: ask again with `after` = the id of the last topic received."""

    id: int
    after: str = ""


class GetTopic(_Frozen, frozen=True, tag="get-topic"):
    id: int
    topic_id: str


class RenameTopic(_Frozen, frozen=True, tag="rename-topic"):
    id: int
    topic_id: str
    title: str


class DeleteTopic(_Frozen, frozen=True, tag="delete-topic"):
    id: int
    topic_id: str


class Attach(_Frozen, frozen=True, tag="attach"):
    """Subscribe to a topic. Without `since`: snapshot then live events. With `since`: replay."""

    id: int
    topic_id: str
    since: int | None = None
    #: How many of the newest rows the snapshot carries (older ones via `History`).
    max_rows: int = 500


class Detach(_Frozen, frozen=True, tag="detach"):
    id: int
    topic_id: str


class SendMessage(_Frozen, frozen=True, tag="send"):
    """A user message. `intent` says what to do if a turn is running (see `SendIntent`)."""

    id: int
    topic_id: str
    text: str
    intent: SendIntent = "auto"
    #: Client-chosen idempotency key: a resend with the same key is not stored twice.
    client_msg_id: str = ""
    #: Per-send option overrides, merged over assistant and topic options.
    options: dict[str, Any] = {}
    #: Messages the client sends along (its own transcript); overlap with history is removed.
    history: list[HistoryMessage] = []
    #: More answers to the same message, each in its own assistant row (lane 1, 2, ...),
    #: streaming at the same time as the topic's own (lane 0). Such a turn is never steered:
    #: intent `steer` is refused while one runs, `auto` queues. See `ChooseAnswer`.
    also: list[AnswerTarget] = []


class Stop(_Frozen, frozen=True, tag="stop"):
    id: int
    topic_id: str


class AnswerApproval(_Frozen, frozen=True, tag="answer-approval"):
    id: int
    topic_id: str
    approval_id: str
    allow: bool
    reason: str = ""
    #: One of the approval's `options` (its kind must agree with `allow`); empty: plain
    #: allow / deny.
    option_id: str = ""


class EditQueued(_Frozen, frozen=True, tag="edit-queued"):
    id: int
    topic_id: str
    row_id: str
    text: str


class DiscardQueued(_Frozen, frozen=True, tag="discard-queued"):
    id: int
    topic_id: str
    row_id: str


class SendNow(_Frozen, frozen=True, tag="send-now"):
    """Stop the running turn and run the queued row `row_id` next."""

    id: int
    topic_id: str
    row_id: str


class ContinueTurn(_Frozen, frozen=True, tag="continue"):
    """Continue the last failed or stopped turn from its stored resume data."""

    id: int
    topic_id: str


class History(_Frozen, frozen=True, tag="history"):
    """A page of rows, newest first from `before_position` (exclusive), returned oldest first.
    `all`: superseded rows (removed by a rewind) are included, marked `superseded`."""

    id: int
    topic_id: str
    before_position: int | None = None
    limit: int = 100
    all: bool = False


class Rewind(_Frozen, frozen=True, tag="rewind"):
    """Remove every history row after `row_id` (and `row_id` itself when `include`) from the
    visible history. The rows stay in the store as superseded (`History(all=True)`); windows
    get `RowsRemoved`. The vendor session is replaced, so the next turn starts from the
    history that is left. Refused (`topic_busy`) while a turn runs, unless `stop`: then the
    turn is stopped and the rewind happens at its end. Answered by `RewindResult`."""

    id: int
    topic_id: str
    row_id: str
    include: bool = False
    stop: bool = False


class Regenerate(_Frozen, frozen=True, tag="regenerate"):
    """Answer the last user message again: it and everything after it are superseded (as by
    `Rewind(include=True)`) and its text is sent again as a new message, in one request.
    `stop` as for `Rewind`. Answered by `SendResult`."""

    id: int
    topic_id: str
    stop: bool = False
    client_msg_id: str = ""


class EditResend(_Frozen, frozen=True, tag="edit-resend"):
    """Edit a sent user message and send it again: `row_id` and everything after it are
    superseded, then `text` is sent as a new message (with the old row's options). `stop` as
    for `Rewind`. Answered by `SendResult`."""

    id: int
    topic_id: str
    row_id: str
    text: str
    stop: bool = False
    client_msg_id: str = ""


class ForkTopic(_Frozen, frozen=True, tag="fork-topic"):
    """A new topic whose history is `topic_id`'s up to and including `row_id` (a finished
    row), with the same assistant, driver, model, working dir and options. The original is
    untouched. `title` defaults to one naming the origin. Answered by `TopicResult`."""

    id: int
    topic_id: str
    row_id: str
    title: str = ""


class ChooseAnswer(_Frozen, frozen=True, tag="choose-answer"):
    """Pick the answer of a multi-answer turn the conversation continues from: `row_id` (an
    answer row with a `target`) loses `alternative`, the other answers of its turn get it
    (`RowUpdated`). Later turns' history holds only the chosen answer. Without a choice, a
    turn ends with its first successful answer chosen (lane 0 when it succeeded). Allowed
    while that turn runs (the choice holds at its end); refused (`topic_busy`) while a later
    turn runs. Answered by `Empty`."""

    id: int
    topic_id: str
    row_id: str


class ReadRow(_Frozen, frozen=True, tag="read-row"):
    """One piece of a stored row's content, from part `part`, character `offset` of it (for a
    row too big for a snapshot or history page). Answered by `RowContent`; continue from its
    `next_part` / `next_offset` until `done`."""

    id: int
    topic_id: str
    row_id: str
    part: int = 0
    offset: int = 0


class PrewarmTopic(_Frozen, frozen=True, tag="prewarm"):
    id: int
    topic_id: str


class Status(_Frozen, frozen=True, tag="status"):
    id: int


class ListDrivers(_Frozen, frozen=True, tag="list-drivers"):
    id: int


class Ping(_Frozen, frozen=True, tag="ping"):
    id: int


class GetUsage(_Frozen, frozen=True, tag="get-usage"):
    """Token and cost totals, stored per turn (they survive a restart): per topic, and per
    turn of `topic_id` when one is given. Answered by `UsageTotals`."""

    id: int
    topic_id: str = ""


class WatchTopics(_Frozen, frozen=True, tag="watch-topics"):
    """Subscribe this connection to topic-list changes, so a topic list never polls.

    Answered by `TopicListResult` (the list now, paged like `ListTopics`: with `has_more`, ask
    `ListTopics(after=...)` for the rest); every later create, rename or delete (by any window)
    then arrives as `TopicsChanged`, with none missed in between. Watching again is harmless;
    `UnwatchTopics` or closing the connection ends it.
    """

    id: int


class UnwatchTopics(_Frozen, frozen=True, tag="unwatch-topics"):
    """Stop `WatchTopics`. Answered by `Empty`."""

    id: int


class Shutdown(_Frozen, frozen=True, tag="shutdown"):
    """Stop the daemon gracefully: stop turns, flush the store, remove the socket."""

    id: int


# --- schedules (client -> host) -----------------------------------------------------------------

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


ClientMessage = (
    Hello
    | CreateTopic
    | ListTopics
    | GetTopic
    | RenameTopic
    | DeleteTopic
    | Attach
    | Detach
    | SendMessage
    | Stop
    | AnswerApproval
    | EditQueued
    | DiscardQueued
    | SendNow
    | ContinueTurn
    | History
    | Rewind
    | Regenerate
    | EditResend
    | ForkTopic
    | ChooseAnswer
    | ReadRow
    | PrewarmTopic
    | Status
    | ListDrivers
    | Ping
    | Shutdown
    | GetUsage
    | AddSchedule
    | ListSchedules
    | RemoveSchedule
    | SetScheduleEnabled
    | RunScheduleNow
    | WatchTopics
    | UnwatchTopics
)

# --- results (inside `Reply`) -------------------------------------------------------------------


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
    | Pong
    | UsageTotals
    | ScheduleResult
    | ScheduleListResult
)

# --- host -> client -----------------------------------------------------------------------------


class Welcome(_Frozen, frozen=True, tag="welcome"):
    protocol_version: tuple[int, int]
    server_version: str = ""
    max_frame_size: int = 0
    connection_id: str = ""


class Reply(_Frozen, frozen=True, tag="reply"):
    id: int
    result: Result


class ErrorReply(_Frozen, frozen=True, tag="error"):
    """A typed error. `id` is None for errors not tied to a request (e.g. framing)."""

    code: str
    message: str
    id: int | None = None
    details: dict[str, Any] = {}


class RowOpened(_Frozen, frozen=True, tag="row-opened"):
    """A row appeared (user message stored, queued message, assistant answer, marker)."""

    topic_id: str
    seq: int
    row: MessageRow


class RowAppended(_Frozen, frozen=True, tag="row-appended"):
    """Content for an open row. Consecutive text deltas may arrive merged."""

    topic_id: str
    seq: int
    row_id: str
    chunk: Chunk


class RowUpdated(_Frozen, frozen=True, tag="row-updated"):
    """A row changed. Fields left None are unchanged."""

    topic_id: str
    seq: int
    row_id: str
    status: RowStatus | None = None
    position: int | None = None
    turn_id: str | None = None
    error: str | None = None
    error_code: str | None = None
    empty: bool | None = None
    #: Replaces all parts (used when a queued message is edited).
    parts: list[Chunk] | None = None
    #: A multi-answer turn's answer was chosen (False) or not (True): see `ChooseAnswer`.
    alternative: bool | None = None
    #: The answer's own usage (multi-answer rows, at their lane's end).
    usage: Usage | None = None


class RowRemoved(_Frozen, frozen=True, tag="row-removed"):
    topic_id: str
    seq: int
    row_id: str


class RowsRemoved(_Frozen, frozen=True, tag="rows-removed"):
    """Rows left the visible history (`reason` "rewind"); they are kept in the store as
    superseded. Drop them from the window's transcript."""

    topic_id: str
    seq: int
    row_ids: list[str]
    reason: str = ""


class TurnStarted(_Frozen, frozen=True, tag="turn-started"):
    topic_id: str
    seq: int
    turn_id: str
    driver: str = ""
    model: str = ""
    #: What the topic's driver can do, valid only when `capabilities_known`.
    capabilities: Capabilities = Capabilities()
    #: False when no driver handshake has told the host yet (a topic's first turn after the
    #: daemon started): `capabilities` is then a placeholder, and `driver-ready` follows with
    #: the real set as soon as the driver is up.
    capabilities_known: bool = False
    #: A multi-answer turn: who answers in each lane, lane 0 (the topic's own) first. Empty
    #: for an ordinary turn (one answer).
    lanes: list[AnswerTarget] = []


class DriverReady(_Frozen, frozen=True, tag="driver-ready"):
    """The topic's driver session started and said what it can do (e.g. `inject_steering`).

    Sent when the capabilities become known or change, including in the middle of a turn whose
    `TurnStarted` said `capabilities_known: false`.
    """

    topic_id: str
    seq: int
    capabilities: Capabilities = Capabilities()


class TurnEnded(_Frozen, frozen=True, tag="turn-ended"):
    """Exactly one per turn, whatever happened. A multi-answer turn ends once, when every
    lane has ended (each answer row has its own final status): `success` when any answer
    succeeded, else `stopped` when it was stopped, else `error` with the first lane's error."""

    topic_id: str
    seq: int
    turn_id: str
    status: TurnStatus
    error: str = ""
    error_code: str = ""
    #: True when the turn produced no output at all (not a plain success).
    empty: bool = False


class StateChanged(_Frozen, frozen=True, tag="state-changed"):
    topic_id: str
    seq: int
    state: TopicState


class Rolled(_Frozen, frozen=True, tag="rolled"):
    """A steer boundary: `closed_row_id` (A1a) ended, `steer_row_id` (U2) placed after it,
    `new_row_id` (A2) opened. The matching row events precede this one with lower seqs."""

    topic_id: str
    seq: int
    turn_id: str
    closed_row_id: str
    steer_row_ids: list[str]
    new_row_id: str


class ApprovalRequested(_Frozen, frozen=True, tag="approval-requested"):
    topic_id: str
    seq: int
    approval: ApprovalInfo


class ApprovalResolved(_Frozen, frozen=True, tag="approval-resolved"):
    topic_id: str
    seq: int
    approval_id: str
    status: ApprovalStatus
    answered_by: str = ""
    reason: str = ""
    option_id: str = ""


class UsageUpdated(_Frozen, frozen=True, tag="usage-updated"):
    """The turn's usage so far (all its lanes together, so it can replace the last figure of
    the turn); in a multi-answer turn `lane` says whose figure changed and `lane_usage` is it."""

    topic_id: str
    seq: int
    turn_id: str
    usage: Usage
    lane: int = 0
    lane_usage: Usage | None = None


class NoticeEvent(_Frozen, frozen=True, tag="notice"):
    """Something to show the user that is not part of the answer (e.g. API retry, resume lost,
    store write failed)."""

    topic_id: str
    seq: int
    code: str
    message: str
    level: Literal["info", "warning", "error"] = "info"


class TopicChanged(_Frozen, frozen=True, tag="topic-changed"):
    topic_id: str
    seq: int
    topic: TopicInfo


class TopicDeleted(_Frozen, frozen=True, tag="topic-deleted"):
    topic_id: str
    seq: int


TopicListChange = Literal["created", "changed", "deleted"]


class TopicsChanged(_Frozen, frozen=True, tag="topics-changed"):
    """A topic was created, changed (renamed) or deleted; sent to connections that sent
    `WatchTopics`. Not a topic event: it has no `seq` (the connection keeps the order)."""

    change: TopicListChange
    topic_id: str
    #: The topic as it is now; None for `deleted`.
    topic: TopicInfo | None = None


class ReplayEnd(_Frozen, frozen=True, tag="replay-end"):
    """End of an `Attach(since=...)` replay; `seq` is the last replayed (or `since`)."""

    topic_id: str
    seq: int


class Resync(_Frozen, frozen=True, tag="resync"):
    """This window missed events the host can no longer replay. Take a fresh snapshot."""

    topic_id: str
    seq: int
    reason: str = ""


TopicEvent = (
    RowOpened
    | RowAppended
    | RowUpdated
    | RowRemoved
    | RowsRemoved
    | TurnStarted
    | DriverReady
    | TurnEnded
    | StateChanged
    | Rolled
    | ApprovalRequested
    | ApprovalResolved
    | UsageUpdated
    | NoticeEvent
    | TopicChanged
    | TopicDeleted
    | ReplayEnd
    | Resync
)

ServerMessage = (
    Welcome
    | Reply
    | ErrorReply
    | RowOpened
    | RowAppended
    | RowUpdated
    | RowRemoved
    | RowsRemoved
    | TurnStarted
    | TurnEnded
    | StateChanged
    | Rolled
    | ApprovalRequested
    | ApprovalResolved
    | UsageUpdated
    | NoticeEvent
    | TopicChanged
    | TopicDeleted
    | ReplayEnd
    | Resync
    | DriverReady
    | TopicsChanged
)


def request_id_of(msg: msgspec.Struct) -> int | None:
    """The request id of a client message, or None for `Hello`."""
    value = getattr(msg, "id", None)
    return value if isinstance(value, int) else None
