"""Types shared by both channels: content chunks, capabilities, usage, statuses.

A chunk is one piece of an assistant answer. Drivers emit chunks; the host stores them in the
row's parts and forwards them to windows unchanged, so both channels use these same structs.

Schema evolution (msgspec rules): a new field always has a default, tags never change, and
decoders ignore unknown fields, so an old reader survives a newer writer.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

import msgspec

#: The protocol version both channels speak. Bump the major on an incompatible change; the
#: handshake refuses a different major with `VersionMismatch`.
PROTOCOL_VERSION: tuple[int, int] = (1, 7)

RowStatus = Literal["queued", "pending", "success", "error", "stopped", "draft"]
RowRole = Literal["user", "assistant", "marker"]
TurnStatus = Literal["success", "error", "stopped"]
SendIntent = Literal["start", "steer", "queue", "auto"]
TopicState = Literal["idle", "answering", "compacting", "closed"]


class _Frozen(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Base for wire structs: immutable, keyword-only, defaults not sent."""


# --- chunks -------------------------------------------------------------------------------------


class TextDelta(_Frozen, frozen=True, tag="text"):
    """Visible answer text, appended to the row's current text part."""

    text: str


class ThinkingDelta(_Frozen, frozen=True, tag="thinking"):
    """Model reasoning text; UIs show it collapsed."""

    text: str


class ToolCall(_Frozen, frozen=True, tag="tool-call"):
    """The model asked to run a tool. `input` is the tool's arguments as decoded JSON."""

    call_id: str
    name: str
    input: dict[str, Any] = {}


class ToolResult(_Frozen, frozen=True, tag="tool-result"):
    """The result of the tool call named by `call_id`."""

    call_id: str
    output: str
    is_error: bool = False
    #: How many times the tool ran when it was tried again after retryable failures (the
    #: output is the last attempt's); 0: once.
    attempts: int = 0


PlanStatus = Literal["pending", "in_progress", "completed"]


class PlanEntry(_Frozen, frozen=True):
    """One step of a `PlanChunk`. `priority` is "high", "medium", "low", or "" (not given)."""

    content: str
    status: PlanStatus = "pending"
    priority: str = ""


class PlanChunk(_Frozen, frozen=True, tag="plan"):
    """The agent's plan (a to-do list) as it stands now: the WHOLE plan, replacing any earlier
    one of the answer for display (a Claude Code `TodoWrite`, an ACP `plan` update). A part
    of its own in the row, never merged; a row may hold one per update, in order."""

    entries: list[PlanEntry] = []


Chunk = TextDelta | ThinkingDelta | ToolCall | ToolResult | PlanChunk


class DriverMode(_Frozen, frozen=True):
    """A mode a driver can switch to per message (`DriverSpec.modes`; `hostd acp` offers them
    as ACP session modes): e.g. Claude Code's permission modes."""

    id: str
    name: str = ""
    description: str = ""


class CommandInfo(_Frozen, frozen=True):
    """A command the topic's agent offers (a slash command: the user sends `/name input`)."""

    #: Without the leading "/".
    name: str
    description: str = ""
    #: What to type after the name ("" = the command takes no input).
    input_hint: str = ""


# --- capabilities, usage, compaction ------------------------------------------------------------


class Capabilities(_Frozen, frozen=True):
    """What a driver can do; announced in its handshake and forwarded in turn start."""

    inject_steering: bool = False
    compaction: bool = False
    resume: bool = False
    approvals: bool = False
    warm: bool = False
    #: The driver needs the host to send history with each turn (stateless vendors).
    needs_history: bool = False
    #: The driver can start its vendor session as a copy of another one (`Init.fork_from`).
    #: In the `Ready` that answers an `Init` naming a source, it says whether this session
    #: IS that copy (the vendor remembers the conversation); False there means the driver
    #: started fresh and the host feeds it the history instead.
    fork_session: bool = False
    #: The driver reports a `Checkpoint` at the end of each turn, and `Init.fork_from` may
    #: name one: the vendor session can be resumed as it stood at that point (a rewind).
    rewind_session: bool = False


class SessionSource(_Frozen, frozen=True):
    """A vendor session to start from (`Init.fork_from`): a fork, or a rewind's checkpoint."""

    #: A resume token or a `Checkpoint` token the driver reported.
    token: str
    #: The state dir of the topic whose driver reported `token` ("" = this session's own):
    #: where a driver that keeps vendor files per topic finds the source.
    state_dir: str = ""


class ApprovalOption(_Frozen, frozen=True):
    """One answer a driver offers for an approval (e.g. an ACP agent's permission options).

    `kind` is "allow_once", "allow_always", "reject_once" or "reject_always" (other values
    are possible from newer drivers: a window shows `label` and treats the kind as opaque).
    """

    id: str
    label: str = ""
    kind: str = ""

    @property
    def allows(self) -> bool:
        """Whether choosing this option allows the tool call."""
        return self.kind.startswith("allow")


class Usage(_Frozen, frozen=True):
    """Token and cost accounting for (part of) a turn. Fields the vendor does not report are 0."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost_usd: float = 0.0


def sum_usage(figures: Iterable[Usage | None]) -> Usage:
    """The sum of usage figures (None: no figure); the one place usage is added up: a turn's
    answers, a topic's turns, a window's total."""
    total = Usage()
    for u in figures:
        if u is not None:
            total = Usage(
                input_tokens=total.input_tokens + u.input_tokens,
                output_tokens=total.output_tokens + u.output_tokens,
                cache_read_tokens=total.cache_read_tokens + u.cache_read_tokens,
                cache_write_tokens=total.cache_write_tokens + u.cache_write_tokens,
                cost_usd=total.cost_usd + u.cost_usd,
            )
    return total


class CompactionAnchor(_Frozen, frozen=True):
    """Where a compaction happened and what it did; stored as a marker row."""

    trigger: Literal["manual", "auto", "reactive"] = "auto"
    tokens_before: int = 0
    tokens_after: int = 0
    duration_ms: int = 0
    summary: str = ""


#: The image types an attachment may have.
ImageMediaType = Literal["image/png", "image/jpeg", "image/gif", "image/webp"]


def image_type_of(data: bytes) -> ImageMediaType | None:
    """What image `data` is, by its first bytes (its signature), whatever name or type it
    was given: None when it is none of `ImageMediaType`. A vendor refuses an image whose
    bytes do not match its declared type, mid-turn; the daemon refuses it at send time."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


class Attachment(_Frozen, frozen=True):
    """A file sent along with a user message (protocol 1.5): an image, as base64. Drivers
    that take images (`DriverSpec.images`) pass it on (Claude Code: an image block; OpenAI:
    an `image_url` part; ACP: an image block); a message with images to another driver is
    refused."""

    media_type: ImageMediaType
    #: The bytes, base64 (standard alphabet, padded).
    data: str
    #: The file name, for display.
    name: str = ""


class HistoryMessage(_Frozen, frozen=True):
    """One message of conversation history, as sent to stateless drivers or by clients."""

    role: Literal["system", "user", "assistant"]
    #: The visible text (the row's text parts, joined): what a driver that knows no tools reads.
    text: str
    id: str = ""
    #: An answer that ran tools: its text and tool parts in the order they happened (thinking
    #: left out), so a stateless driver can rebuild its tool calls and their results. Empty
    #: for a message without tools (then `text` is all there is).
    parts: list[Chunk] = []
    #: A user message's images (protocol 1.5), so a stateless driver shows them again on
    #: later turns.
    attachments: list[Attachment] = []


class AnswerTarget(_Frozen, frozen=True):
    """Who answers one lane of a multi-answer turn (`SendMessage.also`, `TurnStarted.lanes`,
    `MessageRow.target`): an assistant (its config resolves driver and model), or a driver
    with an optional model. Fields left empty fall back to the topic's: a target with only
    `model` runs the topic's driver with that model. At least one field must be set."""

    assistant: str = ""
    driver: str = ""
    model: str = ""
