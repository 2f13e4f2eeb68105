"""Host -> client: the handshake answer, replies, and the topic events windows rebuild
their rows from (`TopicEvent`); `ServerMessage` is every frame the host sends.
"""

from __future__ import annotations

from typing import Any, Literal

from hostd_protocol.client_messages.records import (
    ApprovalInfo,
    ApprovalStatus,
    MessageRow,
    TopicInfo,
)
from hostd_protocol.client_messages.results import Result
from hostd_protocol.common import (
    AnswerTarget,
    Capabilities,
    Chunk,
    CommandInfo,
    RowStatus,
    TopicState,
    TurnStatus,
    Usage,
    _Frozen,
)

__all__ = [
    "ApprovalRequested",
    "ApprovalResolved",
    "CommandsChanged",
    "DriverReady",
    "ErrorReply",
    "NoticeEvent",
    "ReplayEnd",
    "Reply",
    "Resync",
    "Rolled",
    "RowAppended",
    "RowOpened",
    "RowRemoved",
    "RowUpdated",
    "RowsRemoved",
    "SINCE_VERSION",
    "ServerMessage",
    "StateChanged",
    "TopicChanged",
    "TopicDeleted",
    "TopicEvent",
    "TopicListChange",
    "TopicsChanged",
    "TurnEnded",
    "TurnStarted",
    "UsageUpdated",
    "Welcome",
]


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


class RowAppended(_Frozen, frozen=True, tag="row-appended", gc=False):
    """Content for an open row. Consecutive text deltas may arrive merged."""

    # gc=False: one is made per streamed chunk and a topic's replay buffer keeps up to
    # 10,000, so with many streaming topics they were most of what the cyclic GC walked (a
    # full collection paused the daemon ~200 ms at 200 topics, issue 22 finding 5). A frozen
    # event of strings, ints and chunks cannot be part of a reference cycle.

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
    #: Replaces the row's meta (e.g. a vendor checkpoint kept at a turn's end).
    meta: dict[str, Any] | None = None


class RowRemoved(_Frozen, frozen=True, tag="row-removed"):
    topic_id: str
    seq: int
    row_id: str


class RowsRemoved(_Frozen, frozen=True, tag="rows-removed"):
    """Rows left the visible history (`reason` "rewind"); they are kept in the store as
    superseded. Drop them from the window's transcript. Sent to clients whose hello declared
    protocol 1.4 or later; an older one gets `Resync` in its place (`SINCE_VERSION`)."""

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


class CommandsChanged(_Frozen, frozen=True, tag="commands-changed"):
    """The commands the topic's agent offers changed (the whole list, replacing the previous
    one; `Snapshot.commands` is the list at attach time). A user runs one by sending
    `/name input` as an ordinary message."""

    topic_id: str
    seq: int
    commands: list[CommandInfo] = []


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


#: Events a window is sent only when its hello declared at least this protocol version; an
#: older window is sent `Resync` in their place (it attaches again and its snapshot is right),
#: which every version understands. Only events a window cannot skip safely are here:
#: `rows-removed` came with rewind without a version of its own, and a window that skips it
#: as unknown (the documented rule) would keep showing the rows a rewind cut.
SINCE_VERSION: dict[type, tuple[int, int]] = {RowsRemoved: (1, 4)}


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
    | CommandsChanged
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
    | CommandsChanged
)
