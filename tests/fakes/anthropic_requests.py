"""The fake Anthropic API's view of a request: pure helpers over a parsed Messages body
(the user's texts, tool results, the CLI's system reminders, summary requests) and the
`RecordedRequest` every call to the fake leaves behind. Imported through
`tests.fakes.anthropic_api`."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

SUMMARY_MARKERS = (
    "create a detailed summary",
    "Your task is to create a detailed summary",
)
DEFAULT_MODEL = "claude-fake-1"


# --------------------------------------------------------------------------------------
# Request inspection helpers (pure functions over a parsed request body)
# --------------------------------------------------------------------------------------


def _blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list):
        return [b for b in content if isinstance(b, dict)]
    return []


def _is_reminder(text: str) -> bool:
    return text.lstrip().startswith("<system-reminder>")


def user_texts(body: dict[str, Any]) -> list[str]:
    """All user text blocks (in order) that are not ``<system-reminder>`` blocks."""
    out = []
    for msg in body.get("messages") or []:
        if msg.get("role") != "user":
            continue
        for b in _blocks(msg.get("content")):
            if b.get("type") == "text" and not _is_reminder(b.get("text", "")):
                out.append(b.get("text", ""))
    return out


def last_user_text(body: dict[str, Any]) -> str | None:
    """The last user text block that is not a ``<system-reminder>``, searching user
    messages from the newest backwards (a tool_result-only message is skipped)."""
    for msg in reversed(body.get("messages") or []):
        if msg.get("role") != "user":
            continue
        for b in reversed(_blocks(msg.get("content"))):
            if b.get("type") == "text" and not _is_reminder(b.get("text", "")):
                return str(b.get("text", ""))
    return None


def _tail(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The messages after the last assistant message (what this request adds)."""
    msgs = body.get("messages") or []
    for i in range(len(msgs) - 1, -1, -1):
        if msgs[i].get("role") == "assistant":
            return msgs[i + 1 :]
    return list(msgs)


#: Texts the CLI itself places after a tool_result: they do not start a new prompt.
_CONTINUATION_PREFIXES = (
    "[Request interrupted by user",
    "The user sent a new message while you were working",
)


def last_user_has_tool_result(body: dict[str, Any]) -> bool:
    """True when this request continues a turn after a tool ran: the messages after the
    last assistant message carry a tool_result and no new prompt follows it.

    After an interrupted tool the CLI sends the next prompt in the same user message as
    the (error) tool_result and "[Request interrupted by user for tool use]"; that request
    starts a new turn, so it is not a continuation."""
    seen = False
    for m in _tail(body):
        if m.get("role") != "user":
            continue
        for b in _blocks(m.get("content")):
            if b.get("type") == "tool_result":
                seen = True
            elif seen and b.get("type") == "text":
                t = b.get("text", "")
                if not _is_reminder(t) and not t.lstrip().startswith(_CONTINUATION_PREFIXES):
                    seen = False
    return seen


def _after_tool_result(body: dict[str, Any]) -> list[tuple[str, str]]:
    """(role, text) of every text block that follows the last tool_result, in the
    messages after the last assistant message."""
    out: list[tuple[str, str]] = []
    seen = False
    for m in _tail(body):
        role = m.get("role", "")
        for b in _blocks(m.get("content")):
            if b.get("type") == "tool_result":
                seen, out = True, []
            elif seen and b.get("type") == "text":
                out.append((role, b.get("text", "")))
    return out


def system_reminders_after_tool_result(body: dict[str, Any]) -> list[str]:
    """Injected context that follows a ``tool_result``: this is where PreToolUse /
    PostToolUse hook ``additionalContext`` lands (the injection point for steering).

    The CLI (2.1.332) uses two forms, depending on the model:
      * claude-sonnet-4-5 / haiku-4-5 / 3.x: ``<system-reminder>`` text blocks in the
        same user message, right after the tool_result
        ("<system-reminder>\nPreToolUse:Bash hook additional context: X\n</system-reminder>");
      * the default model (claude-opus-5-5, beta ``per-turn-control-2026-07-01``): a
        separate ``{"role": "system"}`` message after the tool_result message
        ("PreToolUse:Bash hook additional context: X", several hooks joined by blank lines).
    Both are returned (raw text)."""
    return [
        t
        for role, t in _after_tool_result(body)
        if role == "system" or (role == "user" and _is_reminder(t))
    ]


def texts_after_tool_result(body: dict[str, Any]) -> list[str]:
    """All text blocks (reminders, ``system`` messages, plain text) following the last
    tool_result, e.g. a message the CLI merged in while a tool ran ("The user sent a
    new message while you were working: ...")."""
    return [t for _role, t in _after_tool_result(body)]


def is_summary_request(body: dict[str, Any]) -> bool:
    """True when the last user text is the CLI's compaction prompt."""
    t = last_user_text(body) or ""
    return any(m in t for m in SUMMARY_MARKERS)


# --------------------------------------------------------------------------------------
# Recorded requests
# --------------------------------------------------------------------------------------


@dataclass
class RecordedRequest:
    index: int
    path: str  # without the query string
    query: str
    headers: dict[str, str]  # lower-cased names, secrets removed
    body: dict[str, Any]
    received_at: float = field(default_factory=time.monotonic)
    api_key: str = ""  # the x-api-key header (tests of where a key goes read it here only)
    reply_kind: str | None = None
    tool_use_suppressed: bool = False
    client_disconnected: bool = False  # the client went away mid-answer (interrupt)
    finished: bool = False  # the answer was fully written
    #: The pauses (seconds) the answer took before its deltas (`delay`), in order.
    pauses: list[float] = field(default_factory=list)

    # convenience views over the body
    @property
    def last_user_text(self) -> str | None:
        return last_user_text(self.body)

    @property
    def user_texts(self) -> list[str]:
        return user_texts(self.body)

    @property
    def has_tools(self) -> bool:
        return bool(self.body.get("tools"))

    @property
    def tool_names(self) -> list[str]:
        return [t.get("name", "") for t in self.body.get("tools") or []]

    @property
    def last_user_has_tool_result(self) -> bool:
        return last_user_has_tool_result(self.body)

    @property
    def system_reminders_after_tool_result(self) -> list[str]:
        return system_reminders_after_tool_result(self.body)

    @property
    def texts_after_tool_result(self) -> list[str]:
        return texts_after_tool_result(self.body)

    @property
    def is_summary_request(self) -> bool:
        return is_summary_request(self.body)

    @property
    def messages(self) -> list[dict[str, Any]]:
        return self.body.get("messages") or []

    @property
    def model(self) -> str:
        return self.body.get("model") or DEFAULT_MODEL

    @property
    def is_messages(self) -> bool:
        return self.path == "/v1/messages"
