"""The host <-> driver channel: commands the host sends, events a driver sends back.

A driver is a subprocess; frames travel on its stdin (commands) and stdout (events). Its
stderr is free text that the host keeps a tail of for error messages.

Session life, in order:

1. host -> `Init` (protocol version, options, resume token, working dir). The driver answers
   `Ready` (its name, version, capabilities) or `DriverFatal` and exits. Nothing else is valid
   before `Ready`.
2. host -> `Prewarm` (optional): connect to the vendor now rather than at the first `Send`.
   The driver answers `Warmed` when it is truly ready to take a turn at once.
3. host -> `Send(turn_id, ...)`: one turn. The driver emits chunks and other events tagged
   with that `turn_id` and ends it with exactly one `TurnEnd(turn_id)`. One turn at a time.
   During the turn the host may send `Redirect` (a steer), `Interrupt`, `ApprovalResponse`;
   the driver may take back an `ApprovalRequest` it no longer waits on (`ApprovalWithdrawn`).
4. host -> `Close`: the driver ends any turn, releases the vendor session and exits 0.

Steering: a driver with `inject_steering` keeps a redirected text pending, injects it at its
next safe point and reports `SteerInjected`; at the next top-level message start it reports
`SteerBoundary` before any chunk of that message. Steers still pending when the turn ends are
reported in `SteerUndelivered` before `TurnEnd`.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from hostd_protocol.common import (
    ApprovalOption,
    Attachment,
    Capabilities,
    Chunk,
    CommandInfo,
    CompactionAnchor,
    HistoryMessage,
    SessionSource,
    TurnStatus,
    Usage,
    _Frozen,
)

# --- host -> driver -----------------------------------------------------------------------------


class Init(_Frozen, frozen=True, tag="init"):
    """First command: configure the session. Answered by `Ready` or `DriverFatal`."""

    protocol_version: tuple[int, int]
    model: str = ""
    working_dir: str = ""
    resume_token: str | None = None
    system_prompt: str = ""
    #: Driver-specific options (e.g. permission mode, scenario for the scripted driver).
    options: dict[str, Any] = {}
    #: A private folder the host keeps for this topic, where the driver may keep its own
    #: files (vendor config, transcripts) instead of the working dir ("" = none given).
    state_dir: str = ""
    #: Start the vendor session as a copy of this one instead of a new one (a fork, or a
    #: rewind to a `Checkpoint`); only with `resume_token` None. A driver declaring
    #: `fork_session` in its `Ready` took it; one that ignores it starts fresh.
    fork_from: SessionSource | None = None
    #: The host traces turns (OpenTelemetry): report each vendor model call with
    #: `ModelCallStart` / `ModelCallEnd`. False (and from an old host): send neither.
    report_model_calls: bool = False


class Prewarm(_Frozen, frozen=True, tag="prewarm"):
    """Connect to the vendor now, so the next `Send` starts at once. Answered by `Warmed`."""


class Send(_Frozen, frozen=True, tag="send"):
    """Start one turn with the user's text."""

    turn_id: str
    text: str
    #: Id of the user row, so steer/undelivered reports can name rows consistently.
    message_id: str = ""
    #: Conversation history for drivers whose capabilities say `needs_history`.
    history: list[HistoryMessage] = []
    options: dict[str, Any] = {}
    #: The W3C trace context of the host's span for this turn (`00-<trace>-<span>-01`), ""
    #: when the host does not trace: a driver that makes its own spans (or calls a vendor
    #: that reads the `traceparent` header) puts them under it.
    traceparent: str = ""
    #: Images the user sent with `text` (protocol 1.5).
    attachments: list[Attachment] = []


class Redirect(_Frozen, frozen=True, tag="redirect"):
    """A steer: text the user sent while the turn runs. Inject it without interrupting."""

    turn_id: str
    steer_id: str
    text: str


class Interrupt(_Frozen, frozen=True, tag="interrupt"):
    """Stop the turn now. The driver ends it with `TurnEnd(status="stopped")`."""

    turn_id: str


class ApprovalResponse(_Frozen, frozen=True, tag="approval-response"):
    """The answer to an `ApprovalRequest` (first window to answer wins, or a timeout)."""

    approval_id: str
    allow: bool
    reason: str = ""
    #: The chosen `ApprovalOption.id` when the request offered options and the window chose
    #: one; `allow` then agrees with the option's kind.
    option_id: str = ""


class Close(_Frozen, frozen=True, tag="close"):
    """End the session and exit cleanly."""


HostCommand = Init | Prewarm | Send | Redirect | Interrupt | ApprovalResponse | Close


# --- driver -> host -----------------------------------------------------------------------------


class Ready(_Frozen, frozen=True, tag="ready"):
    """Handshake answer to `Init`."""

    protocol_version: tuple[int, int]
    driver: str
    version: str = ""
    capabilities: Capabilities = Capabilities()
    model: str = ""


class Warmed(_Frozen, frozen=True, tag="warmed"):
    """Answer to `Prewarm`: the vendor session is connected."""


class ChunkEvent(_Frozen, frozen=True, tag="chunk"):
    """A piece of the answer for `turn_id`."""

    turn_id: str
    chunk: Chunk


class SteerInjected(_Frozen, frozen=True, tag="steer-injected"):
    """The steer `steer_id` was handed to the model (it will see it in its next request)."""

    turn_id: str
    steer_id: str


class SteerBoundary(_Frozen, frozen=True, tag="steer-boundary"):
    """The model started a new top-level message after injected steers: roll the answer."""

    turn_id: str
    #: The steers this boundary answers, in injection order.
    steer_ids: list[str] = []


class SteerUndelivered(_Frozen, frozen=True, tag="steer-undelivered"):
    """These steers were never injected in this turn; the host runs them as next turns."""

    turn_id: str
    steer_ids: list[str]


class CompactionStart(_Frozen, frozen=True, tag="compaction-start"):
    """The vendor began compacting the conversation."""

    turn_id: str = ""
    trigger: Literal["manual", "auto", "reactive"] = "auto"


class CompactionComplete(_Frozen, frozen=True, tag="compaction-complete"):
    """Compaction finished; `anchor` is absent when the vendor gave no boundary details."""

    turn_id: str = ""
    anchor: CompactionAnchor | None = None


class CompactionError(_Frozen, frozen=True, tag="compaction-error"):
    """Compaction failed."""

    turn_id: str = ""
    message: str = ""


class ResumeToken(_Frozen, frozen=True, tag="resume-token"):
    """Opaque token that lets a new driver process continue this vendor session."""

    token: str


class Checkpoint(_Frozen, frozen=True, tag="checkpoint"):
    """Where the vendor session stands at the end of `turn_id` (drivers declaring
    `rewind_session`; sent before its `TurnEnd`): a token `Init.fork_from` accepts to start
    a session that remembers the conversation up to that turn and nothing after it."""

    turn_id: str
    token: str


class ApprovalRequest(_Frozen, frozen=True, tag="approval-request"):
    """The model wants to run a tool that needs the user's permission."""

    turn_id: str
    approval_id: str
    tool: str
    input: dict[str, Any] = {}
    description: str = ""
    #: Answers the driver offers beyond allow / deny (e.g. "allow always"); may be empty.
    options: list[ApprovalOption] = []


class ApprovalWithdrawn(_Frozen, frozen=True, tag="approval-withdrawn"):
    """The driver no longer wants an answer to its `ApprovalRequest` `approval_id` (protocol
    1.7): the vendor withdrew the question (an ACP agent's `$/cancel_request`, a Claude CLI
    control cancel), the driver's own wait ended (its `approval_timeout`), or the code that
    asked was cancelled. The host closes the approval for every window with `reason`; a
    later answer is refused. Sent only to a host of protocol >= 1.7 (`Init.protocol_version`);
    an answer already on its way is dropped by the driver."""

    turn_id: str
    approval_id: str
    #: Why, in words for the user ("the agent withdrew its permission request").
    reason: str = ""


class UsageEvent(_Frozen, frozen=True, tag="usage"):
    """Token/cost usage so far for `turn_id` (cumulative for the turn)."""

    turn_id: str
    usage: Usage


class ModelCallStart(_Frozen, frozen=True, tag="model-call-start"):
    """The driver sent one request to the model (sent only when `Init.report_model_calls`).

    `call_id` is the driver's own, unique within the turn; `ModelCallEnd` names it.
    """

    turn_id: str
    call_id: str
    #: The model asked for ("" = the session's model).
    model: str = ""
    #: The vendor, as the GenAI conventions name it (`openai`, `anthropic`, ...; "" = unknown).
    provider: str = ""


class ModelCallEnd(_Frozen, frozen=True, tag="model-call-end"):
    """The model call `call_id` finished (its answer streamed, or it failed)."""

    turn_id: str
    call_id: str
    #: Why the model stopped, in the vendor's words (`stop`, `tool_calls`, `end_turn`...).
    finish_reason: str = ""
    #: This call's own tokens, when the vendor reported them.
    usage: Usage | None = None
    #: The model that answered and the vendor's id of the response, when known.
    response_model: str = ""
    response_id: str = ""
    #: Set when the call failed (no `finish_reason` then).
    error: str = ""


class ApiRetry(_Frozen, frozen=True, tag="api-retry"):
    """The vendor API failed and the driver is retrying."""

    turn_id: str = ""
    attempt: int = 0
    max_retries: int = 0
    retry_delay_ms: int = 0
    error_status: int | None = None


class Notice(_Frozen, frozen=True, tag="notice"):
    """Something the user should see that is not part of the answer.

    E.g. `code="resume_failed"` when a stored session could not be resumed and the driver
    started fresh.
    """

    code: str
    message: str
    turn_id: str = ""


class CommandsEvent(_Frozen, frozen=True, tag="commands"):
    """The commands the agent offers now (the whole list, replacing the previous one); any
    time, also outside a turn (e.g. right after the vendor session opened)."""

    commands: list[CommandInfo] = []


class Log(_Frozen, frozen=True, tag="log"):
    """A log line for the daemon's log (never shown as answer text)."""

    level: Literal["debug", "info", "warning", "error"] = "info"
    message: str = ""


class TurnEnd(_Frozen, frozen=True, tag="turn-end"):
    """The turn is over. Exactly one per `Send`."""

    turn_id: str
    status: TurnStatus
    error: str = ""
    #: A stable error code from `hostd_protocol.errors` when status is "error".
    error_code: str = ""


class DriverFatal(_Frozen, frozen=True, tag="driver-fatal"):
    """The driver cannot go on (bad init, missing credentials). It exits after sending this."""

    code: str
    message: str


DriverEvent = (
    Ready
    | Warmed
    | ChunkEvent
    | SteerInjected
    | SteerBoundary
    | SteerUndelivered
    | CompactionStart
    | CompactionComplete
    | CompactionError
    | ResumeToken
    | Checkpoint
    | ApprovalRequest
    | ApprovalWithdrawn
    | UsageEvent
    | ModelCallStart
    | ModelCallEnd
    | ApiRetry
    | Notice
    | CommandsEvent
    | Log
    | TurnEnd
    | DriverFatal
)

HOST_COMMAND_TYPES: tuple[type[msgspec.Struct], ...] = (
    Init,
    Prewarm,
    Send,
    Redirect,
    Interrupt,
    ApprovalResponse,
    Close,
)
DRIVER_EVENT_TYPES: tuple[type[msgspec.Struct], ...] = (
    Ready,
    Warmed,
    ChunkEvent,
    SteerInjected,
    SteerBoundary,
    SteerUndelivered,
    CompactionStart,
    CompactionComplete,
    CompactionError,
    ResumeToken,
    Checkpoint,
    ApprovalRequest,
    ApprovalWithdrawn,
    UsageEvent,
    ModelCallStart,
    ModelCallEnd,
    ApiRetry,
    Notice,
    CommandsEvent,
    Log,
    TurnEnd,
    DriverFatal,
)
