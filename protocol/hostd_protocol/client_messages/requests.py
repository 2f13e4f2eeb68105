"""Client -> host: the requests a window sends (each with its own integer `id`), and the
`ClientMessage` union the host decodes them with.
"""

from __future__ import annotations

from typing import Any

import msgspec

from hostd_protocol.client_messages.schedules import (
    AddSchedule,
    ListSchedules,
    RemoveSchedule,
    RunScheduleNow,
    SetScheduleEnabled,
)
from hostd_protocol.common import AnswerTarget, Attachment, HistoryMessage, SendIntent, _Frozen

__all__ = [
    "AnswerApproval",
    "Attach",
    "ChooseAnswer",
    "ClientMessage",
    "ContinueTurn",
    "CreateTopic",
    "DeleteTopic",
    "Detach",
    "DiscardQueued",
    "EditQueued",
    "EditResend",
    "ForkTopic",
    "GetTopic",
    "GetUsage",
    "Hello",
    "History",
    "ListAssistants",
    "ListDrivers",
    "ListTopics",
    "Ping",
    "PrewarmTopic",
    "ReadRow",
    "Regenerate",
    "RenameTopic",
    "Rewind",
    "SendMessage",
    "SendNow",
    "Shutdown",
    "Status",
    "Stop",
    "UnwatchTopics",
    "WatchTopics",
    "request_id_of",
]


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
    #: Images sent with the text (protocol 1.5), at most `MAX_ATTACHMENT_BYTES` together;
    #: stored with the user row (`meta["attachments"]`). Such a message never steers.
    attachments: list[Attachment] = []


class Stop(_Frozen, frozen=True, tag="stop"):
    id: int
    topic_id: str
    #: One answer of the running multi-answer turn to stop (its row id, protocol 1.2); the
    #: other answers go on and the turn ends when the last has ended. Empty: the whole turn.
    #: A 1.1 daemon ignores the field and stops the whole turn: check the version first.
    row_id: str = ""


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


class ListAssistants(_Frozen, frozen=True, tag="list-assistants"):
    """The configured assistants and what each resolves to (protocol 1.3), answered by
    `AssistantListResult`. `profile` resolves `use::<role>` models as a topic of that
    profile would."""

    id: int
    profile: str = ""


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
    | ListAssistants
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


def request_id_of(msg: msgspec.Struct) -> int | None:
    """The request id of a client message, or None for `Hello`."""
    value = getattr(msg, "id", None)
    return value if isinstance(value, int) else None
