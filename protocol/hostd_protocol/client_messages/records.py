"""Records shared by requests, replies and events: topics, rows, approvals, snapshots,
drivers.
"""

from __future__ import annotations

from typing import Any, Literal

from hostd_protocol.common import (
    AnswerTarget,
    ApprovalOption,
    Chunk,
    CommandInfo,
    CompactionAnchor,
    DriverMode,
    RowRole,
    RowStatus,
    TopicState,
    Usage,
    _Frozen,
)

__all__ = [
    "ApprovalInfo",
    "ApprovalStatus",
    "AssistantInfo",
    "DriverInfo",
    "MessageRow",
    "Snapshot",
    "TopicInfo",
]


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
    #: The commands the topic's agent offers, as last reported (see `CommandsChanged`).
    commands: list[CommandInfo] = []


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
    #: Per-message modes and the send option carrying one (`DriverSpec.modes`; 1.4).
    modes: list[DriverMode] = []
    mode_option: str = ""
    #: The option that takes MCP servers and its shape ("acp" or "mcp.json"; 1.4).
    mcp_option: str = ""
    mcp_format: str = ""
    #: The driver hands a message's images to its model (`DriverSpec.images`; 1.6).
    images: bool = False
    #: A topic of this driver needs a model (its own, its assistant's or its role's): the
    #: driver has no default one (`DriverSpec.needs_model`; 1.7). A window marks Model
    #: required; the daemon refuses a topic without one (`invalid_argument`, field `model`).
    needs_model: bool = False


class AssistantInfo(_Frozen, frozen=True):
    """A configured assistant (`<config>/assistants/<name>.toml`), as `list-assistants`
    shows it (protocol 1.3). Only what a window needs to offer it: never its options, system
    prompt or hooks (an option value could be a secret)."""

    name: str
    description: str = ""
    #: The driver and model it resolves to (roles included); "" when it does not resolve.
    #: An empty `model` with a driver means the driver's default model.
    driver: str = ""
    model: str = ""
    #: The role its `use::<role>` model went through ("" for an explicit model).
    role: str = ""
    #: True when the resolved driver is installed and has a credential (as `list-drivers`).
    available: bool = False
    #: Why it cannot answer now, in one line: its file is broken, its role does not resolve
    #: (both "file:line: ..." when a file is at fault), or its driver is unavailable.
    error: str = ""
    #: True for the built-in `default` (no file of that name): the assistant of a topic that
    #: names none, on the `default` role or else the first ready built-in driver. A daemon
    #: older than this field never lists it (its absence reads as False).
    builtin: bool = False
