"""Turns as OpenTelemetry GenAI spans, sans-IO: runtime events in, span operations out.

`SpanMapper` watches what a tracing daemon already has, the topic events its runtimes emit
and the events its drivers send, and says which spans open and close and which span events
happen, as plain values (`OpenSpan`, `CloseSpan`, `SpanEvent`). It imports no OpenTelemetry:
`hostd.shell.otel` applies the operations to the SDK. Time comes in as an argument
(nanoseconds since the epoch, what OTLP carries).

The spans, after the GenAI semantic conventions (gen_ai.* attributes):

- `invoke_agent <agent>` per turn, from `turn-started` to `turn-ended`: provider, request
  model, conversation id (the topic id), token usage (the turn's last `usage-updated`), finish
  reason (the last model call's, else the turn's status), `error.type` when it failed;
- `chat <model>` per model call a driver reports (`model-call-start` / `model-call-end`), a
  child of the turn's span: provider, models, response id, finish reason, the call's usage,
  `hostd.api_retries` (the driver's `api-retry` events during the call);
- `execute_tool <name>` per tool call (a `tool-call` chunk to its `tool-result`), a child of
  the turn's span (the tool runs after the model call that asked for it ended): tool name,
  call id, `hostd.tool.status`, `hostd.tool.retries` (failed calls of the same tool that came
  right before this one in the turn: the model trying again);
- span events on the turn's span: `hostd.steer` (a steer arrived), `hostd.steer.injected`,
  `hostd.roll` (the answer rolled at a steer boundary), `hostd.queue` (a message was queued),
  `hostd.approval.requested` / `hostd.approval.resolved`, `hostd.compaction.start` /
  `.complete` / `.error`, `hostd.api_retry`.

Rules this module guards:

- Every span opened is closed exactly once: a turn's end closes its open chat and tool spans
  first (status from the turn), a deleted topic closes its turn; an operation for a span
  that is not open is never produced.
- Content (prompt, answer text, tool arguments and results) is recorded only when
  `capture_content` is set (`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`); each piece
  is capped at `MAX_CONTENT` characters. Options, environment, system prompts and headers are
  never recorded. What the mapper sees has passed the driver boundary's redaction.
- A streamed text chunk costs one type test when content is not captured (the bench's
  per-chunk figure).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from hostd_protocol.client_messages import (
    ApprovalRequested,
    ApprovalResolved,
    Rolled,
    RowAppended,
    RowOpened,
    RowUpdated,
    TopicDeleted,
    TopicEvent,
    TurnEnded,
    TurnStarted,
    UsageUpdated,
)
from hostd_protocol.common import TextDelta, ToolCall, ToolResult, Usage
from hostd_protocol.driver_messages import (
    ApiRetry,
    ChunkEvent,
    CompactionComplete,
    CompactionError,
    CompactionStart,
    DriverEvent,
    ModelCallEnd,
    ModelCallStart,
    SteerInjected,
)

__all__ = ["CloseSpan", "OpenSpan", "SpanEvent", "SpanMapper", "SpanOp", "provider_of"]

#: Characters of one captured piece of content (a prompt, an answer, a tool's result).
MAX_CONTENT = 16_384
#: A steer row's provisional position (docs/protocol.md, "Steer rows"): queued rows below it.
STEER_POSITION = 2**40

Attrs = dict[str, Any]

#: The provider (`gen_ai.provider.name`) of the built-in drivers whose vendor is fixed.
_PROVIDERS = {"claude-code": "anthropic", "openai": "openai"}


def provider_of(driver: str) -> str:
    """The GenAI provider name of a driver's vendor; the driver's name when it has no fixed one."""
    return _PROVIDERS.get(driver, driver)


@dataclass(frozen=True, slots=True)
class OpenSpan:
    """Start span `key` (`parent`: the key of an open span, or None for a root)."""

    key: str
    name: str
    parent: str | None
    start_ns: int
    attrs: Attrs
    kind: Literal["internal", "client"] = "internal"


@dataclass(frozen=True, slots=True)
class CloseSpan:
    """End span `key`, adding `attrs`; `error` set: the span's status is ERROR with it."""

    key: str
    end_ns: int
    attrs: Attrs
    error: str | None = None


@dataclass(frozen=True, slots=True)
class SpanEvent:
    """A span event on open span `key`."""

    key: str
    name: str
    time_ns: int
    attrs: Attrs


SpanOp = OpenSpan | CloseSpan | SpanEvent


@dataclass
class _Turn:
    turn_id: str
    key: str
    topic_id: str
    provider: str
    chats: dict[str, str] = field(default_factory=dict)  # driver call id -> span key
    chat_retries: dict[str, int] = field(default_factory=dict)
    tools: dict[str, tuple[str, str]] = field(default_factory=dict)  # call id -> (key, name)
    #: Per tool name: how many calls of it failed in a row, most recent last.
    failed_in_row: dict[str, int] = field(default_factory=dict)
    usage: Usage | None = None
    finish_reason: str = ""
    output: list[str] = field(default_factory=list)
    output_len: int = 0


def _cap(text: str) -> str:
    return text if len(text) <= MAX_CONTENT else text[:MAX_CONTENT] + "…"


def _usage_attrs(usage: Usage | None) -> Attrs:
    if usage is None:
        return {}
    attrs: Attrs = {
        "gen_ai.usage.input_tokens": usage.input_tokens,
        "gen_ai.usage.output_tokens": usage.output_tokens,
    }
    if usage.cache_read_tokens:
        attrs["gen_ai.usage.cache_read.input_tokens"] = usage.cache_read_tokens
    if usage.cache_write_tokens:
        attrs["gen_ai.usage.cache_creation.input_tokens"] = usage.cache_write_tokens
    if usage.cost_usd:
        attrs["hostd.usage.cost_usd"] = usage.cost_usd
    return attrs


def _messages(role: str, text: str, finish_reason: str = "") -> str:
    """One message in the conventions' JSON shape (`gen_ai.input.messages` / `output`)."""
    msg: Attrs = {"role": role, "parts": [{"type": "text", "content": _cap(text)}]}
    if finish_reason:
        msg["finish_reason"] = finish_reason
    return json.dumps([msg], ensure_ascii=False)


_STATUS_REASON = {"success": "stop", "stopped": "cancelled", "error": "error"}


class SpanMapper:
    """The span operations of every topic's turns (see the module docstring).

    Args:
        capture_content: Record prompts, answers and tool arguments/results.
    """

    def __init__(self, *, capture_content: bool = False) -> None:
        self.capture_content = capture_content
        self._turns: dict[str, _Turn] = {}  # turn id -> turn
        self._by_topic: dict[str, _Turn] = {}  # topic id -> its running turn
        #: Captured user text per row id, until the row's turn starts (capture only).
        self._prompts: dict[str, str] = {}
        self._next_prompt: dict[str, str] = {}  # topic id -> text of the row starting now

    def open_spans(self) -> int:
        """How many turns are being traced (a test's and a leak check's figure)."""
        return len(self._turns)

    def turn_key(self, turn_id: str) -> str | None:
        """The span key of a running turn (its trace context goes to the driver)."""
        turn = self._turns.get(turn_id)
        return turn.key if turn is not None else None

    # --- topic events ---------------------------------------------------------------------------

    def topic_event(
        self, topic_id: str, event: TopicEvent, now_ns: int, agent: str = ""
    ) -> list[SpanOp]:
        """An event a topic emitted. `agent`: the assistant's name, read on `turn-started`."""
        if type(event) is RowAppended:  # the streamed chunk: the common case, first
            turn = self._by_topic.get(topic_id)
            if turn is None:
                return []
            chunk = event.chunk
            if type(chunk) is TextDelta:
                if self.capture_content and turn.output_len < MAX_CONTENT:
                    turn.output.append(chunk.text)
                    turn.output_len += len(chunk.text)
                return []
            if type(chunk) is ToolCall:
                return self._tool_call(turn, chunk, now_ns)
            if type(chunk) is ToolResult:
                return self._tool_result(turn, chunk, now_ns)
            return []
        if isinstance(event, TurnStarted):
            return self._turn_started(topic_id, event, now_ns, agent)
        if isinstance(event, TurnEnded):
            return self._turn_ended(
                event.turn_id, event.status, event.error, event.error_code, now_ns
            )
        if isinstance(event, UsageUpdated):
            turn = self._turns.get(event.turn_id)
            if turn is not None:
                turn.usage = event.usage
            return []
        if isinstance(event, RowOpened | RowUpdated):
            return self._row(topic_id, event, now_ns)
        turn = self._by_topic.get(topic_id)
        if isinstance(event, TopicDeleted):
            if turn is None:
                return []
            return self._turn_ended(turn.turn_id, "stopped", "topic deleted", "", now_ns)
        if turn is None:
            return []
        if isinstance(event, Rolled):
            return [
                SpanEvent(
                    turn.key,
                    "hostd.roll",
                    now_ns,
                    {
                        "hostd.row.closed_id": event.closed_row_id,
                        "hostd.row.steer_ids": list(event.steer_row_ids),
                        "hostd.row.new_id": event.new_row_id,
                    },
                )
            ]
        if isinstance(event, ApprovalRequested):
            a = event.approval
            return [
                SpanEvent(
                    turn.key,
                    "hostd.approval.requested",
                    now_ns,
                    {"hostd.approval.id": a.id, "gen_ai.tool.name": a.tool},
                )
            ]
        if isinstance(event, ApprovalResolved):
            attrs: Attrs = {
                "hostd.approval.id": event.approval_id,
                "hostd.approval.status": event.status,
            }
            if event.answered_by:
                attrs["hostd.approval.answered_by"] = event.answered_by
            if event.option_id:
                attrs["hostd.approval.option_id"] = event.option_id
            return [SpanEvent(turn.key, "hostd.approval.resolved", now_ns, attrs)]
        return []

    def _row(self, topic_id: str, event: RowOpened | RowUpdated, now_ns: int) -> list[SpanOp]:
        if isinstance(event, RowUpdated):
            # A queued row that starts now: its captured text is the next turn's prompt.
            if self.capture_content and event.status == "success" and event.turn_id:
                text = self._prompts.pop(event.row_id, None)
                if text is not None:
                    self._next_prompt[topic_id] = text
            return []
        row = event.row
        if row.role != "user":
            return []
        if self.capture_content:
            text = "".join(p.text for p in row.parts if isinstance(p, TextDelta))
            if row.status == "queued":
                self._prompts[row.id] = text
                while len(self._prompts) > 1000:  # rows deleted while queued: bounded
                    self._prompts.pop(next(iter(self._prompts)))
            elif row.status == "success":
                self._next_prompt[topic_id] = text
        turn = self._by_topic.get(topic_id)
        if row.status != "queued" or turn is None:
            return []
        steer = row.position >= STEER_POSITION
        return [
            SpanEvent(
                turn.key,
                "hostd.steer" if steer else "hostd.queue",
                now_ns,
                {"hostd.row.id": row.id},
            )
        ]

    def _turn_started(
        self, topic_id: str, event: TurnStarted, now_ns: int, agent: str
    ) -> list[SpanOp]:
        ops: list[SpanOp] = []
        old = self._by_topic.get(topic_id)
        if old is not None:  # never two at once; close the stale one rather than leak it
            ops += self._turn_ended(old.turn_id, "error", "superseded by another turn", "", now_ns)
        provider = provider_of(event.driver)
        turn = _Turn(
            turn_id=event.turn_id, key=f"turn:{event.turn_id}", topic_id=topic_id, provider=provider
        )
        self._turns[event.turn_id] = turn
        self._by_topic[topic_id] = turn
        name = agent or event.driver
        attrs: Attrs = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.provider.name": provider,
            "gen_ai.agent.name": name,
            "gen_ai.conversation.id": topic_id,
            "hostd.driver": event.driver,
            "hostd.turn.id": event.turn_id,
        }
        if event.model:
            attrs["gen_ai.request.model"] = event.model
        if event.lanes:
            attrs["hostd.lanes"] = len(event.lanes)
        prompt = self._next_prompt.pop(topic_id, None)
        if self.capture_content and prompt is not None:
            attrs["gen_ai.input.messages"] = _messages("user", prompt)
        ops.append(OpenSpan(turn.key, f"invoke_agent {name}", None, now_ns, attrs))
        return ops

    def _turn_ended(
        self, turn_id: str, status: str, error: str, code: str, now_ns: int
    ) -> list[SpanOp]:
        turn = self._turns.pop(turn_id, None)
        if turn is None:
            return []
        if self._by_topic.get(turn.topic_id) is turn:
            del self._by_topic[turn.topic_id]
        failed = (error or status) if status == "error" else None
        ops: list[SpanOp] = []
        for call_id, key in turn.chats.items():
            attrs: Attrs = {"hostd.api_retries": turn.chat_retries.get(call_id, 0)}
            ops.append(CloseSpan(key, now_ns, attrs, failed))
        for key, _name in turn.tools.values():
            ops.append(CloseSpan(key, now_ns, {"hostd.tool.status": status}, failed))
        reason = turn.finish_reason if status == "success" and turn.finish_reason else ""
        reason = reason or _STATUS_REASON.get(status, status)
        attrs = {"gen_ai.response.finish_reasons": [reason], "hostd.turn.status": status}
        attrs.update(_usage_attrs(turn.usage))
        if status == "error":
            attrs["error.type"] = code or "error"
        if self.capture_content and turn.output:
            attrs["gen_ai.output.messages"] = _messages("assistant", "".join(turn.output), reason)
        ops.append(CloseSpan(turn.key, now_ns, attrs, failed))
        return ops

    def _tool_call(self, turn: _Turn, chunk: ToolCall, now_ns: int) -> list[SpanOp]:
        if chunk.call_id in turn.tools:
            return []  # the same call reported twice: one span
        key = f"tool:{turn.turn_id}:{chunk.call_id}"
        turn.tools[chunk.call_id] = (key, chunk.name)
        attrs: Attrs = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": chunk.name,
            "gen_ai.tool.call.id": chunk.call_id,
            "gen_ai.tool.type": "function",
            "hostd.tool.retries": turn.failed_in_row.get(chunk.name, 0),
        }
        if self.capture_content:
            attrs["gen_ai.tool.call.arguments"] = _cap(json.dumps(chunk.input, ensure_ascii=False))
        return [OpenSpan(key, f"execute_tool {chunk.name}", turn.key, now_ns, attrs)]

    def _tool_result(self, turn: _Turn, chunk: ToolResult, now_ns: int) -> list[SpanOp]:
        entry = turn.tools.pop(chunk.call_id, None)
        if entry is None:
            return []
        key, name = entry
        if chunk.is_error:
            turn.failed_in_row[name] = turn.failed_in_row.get(name, 0) + 1
        else:
            turn.failed_in_row.pop(name, None)
        attrs: Attrs = {"hostd.tool.status": "error" if chunk.is_error else "success"}
        if self.capture_content:
            attrs["gen_ai.tool.call.result"] = _cap(chunk.output)
        error = (_cap(chunk.output) or "tool failed") if chunk.is_error else None
        return [CloseSpan(key, now_ns, attrs, error)]

    # --- driver events --------------------------------------------------------------------------

    def driver_event(self, event: DriverEvent, now_ns: int) -> list[SpanOp]:
        """An event of a turn's driver (model calls, steer injections, compaction, retries)."""
        if type(event) is ChunkEvent:  # chunks are traced from the topic's `row-appended`
            return []
        turn = self._turns.get(getattr(event, "turn_id", "") or "")
        if turn is None:
            return []
        if isinstance(event, ModelCallStart):
            return self._model_call_start(turn, event, now_ns)
        if isinstance(event, ModelCallEnd):
            return self._model_call_end(turn, event, now_ns)
        if isinstance(event, ApiRetry):
            for call_id in turn.chats:
                turn.chat_retries[call_id] = turn.chat_retries.get(call_id, 0) + 1
            attrs: Attrs = {"hostd.attempt": event.attempt, "hostd.max_retries": event.max_retries}
            if event.error_status is not None:
                attrs["http.response.status_code"] = event.error_status
            return [SpanEvent(turn.key, "hostd.api_retry", now_ns, attrs)]
        if isinstance(event, SteerInjected):
            return [
                SpanEvent(
                    turn.key, "hostd.steer.injected", now_ns, {"hostd.steer.id": event.steer_id}
                )
            ]
        if isinstance(event, CompactionStart):
            return [
                SpanEvent(
                    turn.key,
                    "hostd.compaction.start",
                    now_ns,
                    {"hostd.compaction.trigger": event.trigger},
                )
            ]
        if isinstance(event, CompactionComplete):
            attrs = {}
            if event.anchor is not None:
                attrs = {
                    "hostd.compaction.tokens_before": event.anchor.tokens_before,
                    "hostd.compaction.tokens_after": event.anchor.tokens_after,
                }
            return [SpanEvent(turn.key, "hostd.compaction.complete", now_ns, attrs)]
        if isinstance(event, CompactionError):
            return [
                SpanEvent(
                    turn.key,
                    "hostd.compaction.error",
                    now_ns,
                    {"hostd.compaction.error": event.message},
                )
            ]
        return []

    def _model_call_start(self, turn: _Turn, event: ModelCallStart, now_ns: int) -> list[SpanOp]:
        if event.call_id in turn.chats:
            return []
        key = f"chat:{turn.turn_id}:{event.call_id}"
        turn.chats[event.call_id] = key
        provider = event.provider or turn.provider
        attrs: Attrs = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": provider}
        if event.model:
            attrs["gen_ai.request.model"] = event.model
        name = f"chat {event.model}" if event.model else "chat"
        return [OpenSpan(key, name, turn.key, now_ns, attrs, kind="client")]

    def _model_call_end(self, turn: _Turn, event: ModelCallEnd, now_ns: int) -> list[SpanOp]:
        key = turn.chats.pop(event.call_id, None)
        if key is None:
            return []
        attrs: Attrs = {"hostd.api_retries": turn.chat_retries.pop(event.call_id, 0)}
        if event.finish_reason:
            attrs["gen_ai.response.finish_reasons"] = [event.finish_reason]
            turn.finish_reason = event.finish_reason
        if event.response_model:
            attrs["gen_ai.response.model"] = event.response_model
        if event.response_id:
            attrs["gen_ai.response.id"] = event.response_id
        attrs.update(_usage_attrs(event.usage))
        if event.error:
            attrs["error.type"] = "model_call_failed"
        return [CloseSpan(key, now_ns, attrs, event.error or None)]
