"""What the fake Anthropic API answers: reply kinds (text, tool use, thinking, HTTP errors,
a hang, a compaction summary) and the rules that pick one for a request. Imported through
`tests.fakes.anthropic_api`."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tests.fakes.anthropic_requests import (
    RecordedRequest,
)

# --------------------------------------------------------------------------------------
# Replies
# --------------------------------------------------------------------------------------


@dataclass(kw_only=True)
class Reply:
    """Common fields (keyword-only). ``input_tokens`` None means the server's
    default (``default_input_tokens``); set it high to trigger auto-compaction."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0
    delay: float = 0.0  # seconds slept before each delta (mid-stream interrupts)
    kind = "reply"


@dataclass
class Text(Reply):
    text: str = "OK."
    chunks: int = 3  # number of text_delta events (at most len(text))
    stop_reason: str = "end_turn"
    kind = "text"


@dataclass
class ToolUse(Reply):
    name: str = "Bash"
    input: dict[str, Any] = field(default_factory=dict)
    id: str | None = None  # generated when None
    text_before: str | None = None  # optional text block before the tool_use block
    kind = "tool_use"


@dataclass
class Thinking(Reply):
    thinking: str = "Let me think."
    text: str = "OK."
    signature: str = "fake-signature"
    chunks: int = 2
    kind = "thinking"


@dataclass
class HTTPError(Reply):
    status: int = 529
    error_type: str = "overloaded_error"
    message: str = "Overloaded"
    kind = "error"


@dataclass
class Hang(Reply):
    """Streams ``text_before`` (if any) and then blocks until ``release()`` (or the
    client disconnects, or the server stops); once released it finishes with
    ``text_after``. ``started`` is set when the hang begins. The events are shared by
    every request the reply answers: use one ``Hang`` per request (``times=1``)."""

    text_before: str = "Working"
    text_after: str = " done."
    started: threading.Event = field(default_factory=threading.Event)
    released: threading.Event = field(default_factory=threading.Event)
    kind = "hang"

    def release(self) -> None:
        self.released.set()

    def wait_started(self, timeout: float = 30.0) -> bool:
        return self.started.wait(timeout)


@dataclass
class CompactSummary(Reply):
    summary: str = "The user and the assistant had a short conversation."
    analysis: str = "Reviewing the conversation."
    chunks: int = 2
    kind = "compact_summary"

    @property
    def text(self) -> str:
        return f"<analysis>\n{self.analysis}\n</analysis>\n\n<summary>\n{self.summary}\n</summary>"


def text(t: str = "OK.", *, chunks: int = 3, delay: float = 0.0, **kw: Any) -> Text:
    return Text(text=t, chunks=chunks, delay=delay, **kw)


def tool_use(name: str = "Bash", input: dict[str, Any] | None = None, **kw: Any) -> ToolUse:
    if input is None:
        input = {"command": "echo hi", "description": "Print hi"}
    return ToolUse(name=name, input=input, **kw)


def thinking(thought: str = "Let me think.", answer: str = "OK.", **kw: Any) -> Thinking:
    return Thinking(thinking=thought, text=answer, **kw)


def http_error(status: int, error_type: str, message: str, **kw: Any) -> HTTPError:
    return HTTPError(status=status, error_type=error_type, message=message, **kw)


def overloaded() -> HTTPError:
    return HTTPError(status=529, error_type="overloaded_error", message="Overloaded")


def prompt_too_long(tokens: int = 250_000, limit: int = 200_000) -> HTTPError:
    return HTTPError(
        status=400,
        error_type="invalid_request_error",
        message=f"prompt is too long: {tokens} tokens > {limit} maximum",
    )


def hang(text_before: str = "Working", text_after: str = " done.", **kw: Any) -> Hang:
    return Hang(text_before=text_before, text_after=text_after, **kw)


def compact_summary(
    summary: str = "The user and the assistant had a short conversation.", **kw: Any
) -> CompactSummary:
    return CompactSummary(summary=summary, **kw)


# --------------------------------------------------------------------------------------
# Rules and predicates
# --------------------------------------------------------------------------------------

Predicate = Callable[[RecordedRequest], bool]
ReplySpec = Reply | Callable[[RecordedRequest], Reply]


@dataclass
class Rule:
    predicate: Predicate
    reply: ReplySpec
    times: int | None = None  # None: unlimited
    used: int = 0

    def exhausted(self) -> bool:
        return self.times is not None and self.used >= self.times


def always(_req: RecordedRequest) -> bool:
    return True


def user_says(expected: str) -> Predicate:
    """The last (non-reminder) user text equals ``expected`` (whitespace-stripped)
    and the last user message is not a tool_result (so a follow-up request in the
    same turn does not match again)."""

    def pred(req: RecordedRequest) -> bool:
        return (
            not req.last_user_has_tool_result
            and (req.last_user_text or "").strip() == expected.strip()
        )

    return pred


def user_text_contains(needle: str, *, fresh: bool = True) -> Predicate:
    """The last user text contains ``needle``; with ``fresh`` (default) only when
    the last user message is not a tool_result."""

    def pred(req: RecordedRequest) -> bool:
        if fresh and req.last_user_has_tool_result:
            return False
        return needle in (req.last_user_text or "")

    return pred


def has_tool_result(req: RecordedRequest) -> bool:
    return req.last_user_has_tool_result


def has_tools(req: RecordedRequest) -> bool:
    return req.has_tools


def no_tools(req: RecordedRequest) -> bool:
    return not req.has_tools


def summary_request(req: RecordedRequest) -> bool:
    return req.is_summary_request


RuleLike = Rule | tuple[Any, ...]


def _to_rule(r: RuleLike) -> Rule:
    if isinstance(r, Rule):
        return r
    if isinstance(r, tuple) and len(r) in (2, 3):
        return Rule(*r)
    raise TypeError(f"not a rule: {r!r}")
