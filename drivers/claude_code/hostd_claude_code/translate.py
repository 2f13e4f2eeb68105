"""Translate claude-agent-sdk messages of one turn into hostd driver events (sans-IO).

`Translator.feed(message)` takes one SDK message and returns what the driver must do, in
order: chunks to send, other driver events, and `MESSAGE_START` (call
`TurnContext.message_start()` here, before any chunk of the new message, so the harness can
report a steer boundary). No I/O, no trio: the driver awaits the outputs.

Rules this module guards:

- Only the top-level agent produces chunks: events of sub-agents (`parent_tool_use_id` set) are
  dropped, so a delegated run never writes into the topic's answer.
- Text and thinking come from stream deltas (`include_partial_messages=True`); a tool call is
  sent once, when its `tool_use` block completes, with its input parsed from the JSON deltas;
  a tool result comes from the `UserMessage` that carries its `ToolResultBlock`.
- A whole `AssistantMessage` is turned into chunks only when none of its message was streamed
  (a fallback; synthetic messages such as the API-error text are never chunks: the error is
  carried by the turn end instead).
- Compaction: `status="compacting"` -> `CompactionStart`; the `compact_boundary` that follows a
  successful result -> `CompactionComplete` with an anchor (its summary attached when the
  summary message follows); a success without a boundary -> `CompactionComplete` without
  anchor; a failure -> `CompactionError`. Nothing of the summary is ever a chunk.
- The `ResultMessage` ends the turn; `is_error` decides success (never `subtype`).
- A `TodoWrite` tool call is followed by a `PlanChunk` (its todos as the plan); the
  `system/init` message's `slash_commands` become a `CommandsEvent` (names only: the CLI
  gives no descriptions there).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Final, Literal, TypeAlias

import msgspec
from claude_agent_sdk import (
    AssistantMessage,
    ResultMessage,
    StreamEvent,
    SystemMessage,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    UserMessage,
)

from hostd_protocol.common import (
    Chunk,
    CommandInfo,
    CompactionAnchor,
    PlanChunk,
    PlanEntry,
    PlanStatus,
    TextDelta,
    ThinkingDelta,
    ToolCall,
    ToolResult,
    Usage,
)
from hostd_protocol.driver_messages import (
    ApiRetry,
    CommandsEvent,
    CompactionComplete,
    CompactionError,
    CompactionStart,
    DriverEvent,
    Log,
    ModelCallEnd,
    ModelCallStart,
    ResumeToken,
    UsageEvent,
)


class _MessageStart:
    """Marker output: a new top-level assistant message starts here."""

    def __repr__(self) -> str:
        return "MESSAGE_START"


MESSAGE_START: Final = _MessageStart()

Output: TypeAlias = Chunk | DriverEvent | _MessageStart

#: Longest compaction summary kept in an anchor (it is stored in a marker row).
MAX_SUMMARY_CHARS = 20_000

_CompactionState = Literal["idle", "compacting", "await_boundary", "await_summary"]


@dataclass
class _ToolBlock:
    call_id: str
    name: str
    parts: list[str] = field(default_factory=list)


_PLAN_STATUSES: dict[object, PlanStatus] = {
    "pending": "pending",
    "in_progress": "in_progress",
    "completed": "completed",
}


def with_plan(call: ToolCall) -> list[Output]:
    """A tool call, followed by the plan it sets when it is Claude Code's `TodoWrite`."""
    todos = call.input.get("todos") if call.name == "TodoWrite" else None
    if not isinstance(todos, list):
        return [call]
    entries = [
        PlanEntry(
            content=str(t.get("content", "")),
            status=_PLAN_STATUSES.get(t.get("status"), "pending"),
        )
        for t in todos
        if isinstance(t, dict)
    ]
    return [call, PlanChunk(entries=entries)]


def command_names(data: dict[str, Any]) -> tuple[str, ...] | None:
    """The `system/init` message's slash commands (names only), or None when it has none."""
    names = data.get("slash_commands")
    if not isinstance(names, list):
        return None
    return tuple(n.lstrip("/") for n in names if isinstance(n, str) and n)


def _trigger(value: object) -> Literal["manual", "auto", "reactive"]:
    if value == "manual":
        return "manual"
    if value == "reactive":
        return "reactive"
    return "auto"


def _int(value: object) -> int:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value)
    return 0


def tool_result_text(content: str | list[dict[str, Any]] | None) -> str:
    """A tool result's content as text (non-text blocks become a placeholder)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for block in content:
        if block.get("type") == "text":
            parts.append(str(block.get("text", "")))
        else:
            parts.append(f"[{block.get('type', 'content')}]")
    return "\n".join(parts)


def usage_from_result(result: ResultMessage, cost_base: float = 0.0) -> Usage:
    """The turn's token and cost accounting from its `ResultMessage`.

    The result's tokens are the turn's, but `total_cost_usd` is the CLI process's running
    total: `cost_base` is that total at the end of the previous turn of the same process.
    """
    u = result.usage or {}
    return Usage(
        input_tokens=_int(u.get("input_tokens")),
        output_tokens=_int(u.get("output_tokens")),
        cache_read_tokens=_int(u.get("cache_read_input_tokens")),
        cache_write_tokens=_int(u.get("cache_creation_input_tokens")),
        cost_usd=max(0.0, float(result.total_cost_usd or 0.0) - cost_base),
    )


def result_error_message(result: ResultMessage) -> str:
    """Why an `is_error` result failed, in words (never an empty "no response")."""
    parts: list[str] = []
    if result.result and result.result.strip():
        parts.append(result.result.strip())
    for err in result.errors or []:
        if err and err not in parts:
            parts.append(err)
    details = [f"subtype={result.subtype}"]
    if result.terminal_reason:
        details.append(f"terminal_reason={result.terminal_reason}")
    if result.api_error_status is not None:
        details.append(f"api_error_status={result.api_error_status}")
    head = "; ".join(parts) if parts else "Claude Code reported an error"
    return f"{head} ({', '.join(details)})"


class Translator:
    """Per-turn translation state. Feed every SDK message of the turn in order."""

    def __init__(
        self,
        turn_id: str,
        *,
        manual_compaction: bool = False,
        session_id: str | None = None,
        commands: tuple[str, ...] | None = None,
        cost_base: float = 0.0,
        model_calls: bool = False,
    ) -> None:
        self.turn_id = turn_id
        #: Report each streamed top-level message as a model call (a tracing host asked).
        self.model_calls = model_calls
        #: (message id, model) of the model call in progress, and why it stopped.
        self._call: tuple[str, str] | None = None
        self._stop_reason = ""
        self.cost_base = cost_base
        self.manual_compaction = manual_compaction
        #: The vendor session id last reported (a change emits `ResumeToken`).
        self.session_id = session_id
        #: The command names last reported: the CLI repeats `system/init` at every query, and
        #: a list that did not change is not news to the windows (a change emits `CommandsEvent`).
        self.commands = commands
        #: The turn's `ResultMessage`, once seen: the turn is over.
        self.result: ResultMessage | None = None
        self._blocks: dict[int, _ToolBlock] = {}
        self._streamed_messages: set[str] = set()
        #: Token counts per streamed top-level message (`message_start` / `message_delta`).
        self._stream_usage: dict[str, dict[str, int]] = {}
        self._current_message = ""
        self._compaction: _CompactionState = "idle"
        self._anchor: CompactionAnchor | None = None
        #: The uuid of the turn's last top-level assistant message (its transcript entry):
        #: where a `Checkpoint` of this turn resumes.
        self.last_uuid: str | None = None

    @property
    def compacting(self) -> bool:
        return self._compaction != "idle"

    # --- entry point ------------------------------------------------------------------------

    def feed(self, msg: object) -> list[Output]:
        """Translate one SDK message; returns outputs in the order they must be sent."""
        if isinstance(msg, StreamEvent):
            return self._stream_event(msg)
        if isinstance(msg, SystemMessage):
            return self._system(msg)
        if isinstance(msg, UserMessage):
            return self._user(msg)
        if isinstance(msg, AssistantMessage):
            return self._assistant(msg)
        if isinstance(msg, ResultMessage):
            out = self._settle_compaction()
            self.result = msg
            usage = usage_from_result(msg, self.cost_base)
            if not (usage.input_tokens or usage.output_tokens) and self._stream_usage:
                # An interrupted turn's result carries a cost but no tokens: count the tokens
                # the streamed messages reported instead of showing 0 tokens for a cost.
                usage = msgspec.structs.replace(usage, **self._streamed_tokens())
            out.append(UsageEvent(turn_id=self.turn_id, usage=usage))
            return out
        return []

    def _note_usage(self, usage: Any) -> None:
        """Keep the newest token counts of the current streamed message."""
        if not isinstance(usage, dict):
            return
        counts = self._stream_usage.setdefault(self._current_message, {})
        for key in ("input_tokens", "output_tokens", "cache_read_input_tokens",
                    "cache_creation_input_tokens"):
            if isinstance(usage.get(key), int):
                counts[key] = usage[key]

    def _end_call(self) -> list[Output]:
        """The model call in progress is over: its `ModelCallEnd` (its own tokens)."""
        if self._call is None:
            return []
        (call_id, model), self._call = self._call, None
        counts = self._stream_usage.get(call_id, {})
        usage = Usage(
            input_tokens=counts.get("input_tokens", 0),
            output_tokens=counts.get("output_tokens", 0),
            cache_read_tokens=counts.get("cache_read_input_tokens", 0),
            cache_write_tokens=counts.get("cache_creation_input_tokens", 0),
        )
        return [
            ModelCallEnd(
                turn_id=self.turn_id,
                call_id=call_id,
                finish_reason=self._stop_reason,
                usage=usage,
                response_model=model,
                response_id=call_id,
            )
        ]

    def _streamed_tokens(self) -> dict[str, int]:
        def total(key: str) -> int:
            return sum(c.get(key, 0) for c in self._stream_usage.values())

        return {
            "input_tokens": total("input_tokens"),
            "output_tokens": total("output_tokens"),
            "cache_read_tokens": total("cache_read_input_tokens"),
            "cache_write_tokens": total("cache_creation_input_tokens"),
        }

    def finish(self) -> list[Output]:
        """The turn ended (result, error or interrupt): close an open compaction."""
        out = self._settle_compaction()
        if self._compaction == "compacting":
            self._compaction = "idle"
            out.append(
                CompactionError(turn_id=self.turn_id, message="the turn ended while compacting")
            )
        return out + self._end_call()

    # --- stream events ----------------------------------------------------------------------

    def _stream_event(self, msg: StreamEvent) -> list[Output]:
        if msg.parent_tool_use_id is not None:
            return []  # a sub-agent's stream
        ev = msg.event
        kind = ev.get("type")
        if kind == "message_start":
            out = self._settle_compaction()
            message = ev.get("message") or {}
            if message.get("id"):
                self._streamed_messages.add(str(message["id"]))
            self._current_message = str(message.get("id") or len(self._stream_usage))
            self._note_usage(message.get("usage"))
            self._blocks.clear()
            out.append(MESSAGE_START)
            if self.model_calls:
                out += self._end_call()
                model = str(message.get("model") or "")
                self._call, self._stop_reason = (self._current_message, model), ""
                out.append(
                    ModelCallStart(
                        turn_id=self.turn_id,
                        call_id=self._current_message,
                        model=model,
                        provider="anthropic",
                    )
                )
            return out
        if kind == "message_delta":
            self._note_usage(ev.get("usage"))
            reason = (ev.get("delta") or {}).get("stop_reason")
            if reason:
                self._stop_reason = str(reason)
            return []
        if kind == "message_stop":
            return self._end_call()
        if self._compaction != "idle":
            return []  # the summary request's stream is never part of the answer
        if kind == "content_block_start":
            block = ev.get("content_block") or {}
            if block.get("type") == "tool_use":
                self._blocks[_int(ev.get("index"))] = _ToolBlock(
                    call_id=str(block.get("id", "")), name=str(block.get("name", ""))
                )
            elif block.get("type") == "text" and block.get("text"):
                return [TextDelta(text=str(block["text"]))]
            return []
        if kind == "content_block_delta":
            delta = ev.get("delta") or {}
            dtype = delta.get("type")
            if dtype == "text_delta" and delta.get("text"):
                return [TextDelta(text=str(delta["text"]))]
            if dtype == "thinking_delta" and delta.get("thinking"):
                return [ThinkingDelta(text=str(delta["thinking"]))]
            if dtype == "input_json_delta":
                tool = self._blocks.get(_int(ev.get("index")))
                if tool is not None:
                    tool.parts.append(str(delta.get("partial_json", "")))
            return []
        if kind == "content_block_stop":
            tool = self._blocks.pop(_int(ev.get("index")), None)
            if tool is None:
                return []
            return with_plan(
                ToolCall(call_id=tool.call_id, name=tool.name, input=_parse_input(tool.parts))
            )
        return []

    # --- whole messages ---------------------------------------------------------------------

    def _assistant(self, msg: AssistantMessage) -> list[Output]:
        out = self._settle_compaction()
        if msg.parent_tool_use_id is None and msg.uuid:
            self.last_uuid = msg.uuid
        if (
            msg.parent_tool_use_id is not None
            or msg.error is not None
            or msg.model == "<synthetic>"
            or (msg.message_id is not None and msg.message_id in self._streamed_messages)
        ):
            return out
        # Nothing of this message was streamed: send its blocks whole.
        if msg.message_id is not None:
            self._streamed_messages.add(msg.message_id)
        for block in msg.content:
            if isinstance(block, TextBlock) and block.text:
                out.append(TextDelta(text=block.text))
            elif isinstance(block, ThinkingBlock) and block.thinking:
                out.append(ThinkingDelta(text=block.thinking))
            elif isinstance(block, ToolUseBlock):
                out += with_plan(
                    ToolCall(call_id=block.id, name=block.name, input=dict(block.input))
                )
        return out

    def _user(self, msg: UserMessage) -> list[Output]:
        if msg.parent_tool_use_id is not None:
            return []
        if isinstance(msg.content, str):
            if self._compaction == "await_summary" and self._anchor is not None:
                # The compaction summary: kept in the anchor, never shown as a chunk.
                self._anchor = CompactionAnchor(
                    trigger=self._anchor.trigger,
                    tokens_before=self._anchor.tokens_before,
                    tokens_after=self._anchor.tokens_after,
                    duration_ms=self._anchor.duration_ms,
                    summary=msg.content[:MAX_SUMMARY_CHARS],
                )
                return self._settle_compaction()
            return []
        out = self._settle_compaction()
        for block in msg.content:
            if isinstance(block, ToolResultBlock):
                out.append(
                    ToolResult(
                        call_id=block.tool_use_id,
                        output=tool_result_text(block.content),
                        is_error=bool(block.is_error),
                    )
                )
        return out

    def _system(self, msg: SystemMessage) -> list[Output]:
        data = msg.data
        sub = msg.subtype
        if sub == "init":
            init: list[Output] = []
            names = command_names(data)
            if names is not None and names != self.commands:
                self.commands = names
                init.append(CommandsEvent(commands=[CommandInfo(name=n) for n in names]))
            sid = data.get("session_id")
            if isinstance(sid, str) and sid and sid != self.session_id:
                self.session_id = sid
                init.append(ResumeToken(token=sid))
            return init
        if sub == "status":
            return self._status(data)
        if sub == "compact_boundary":
            meta = data.get("compact_metadata") or data.get("compactMetadata") or {}
            out: list[Output] = []
            if self._compaction == "idle":
                out.append(
                    CompactionStart(turn_id=self.turn_id, trigger=_trigger(meta.get("trigger")))
                )
            self._anchor = CompactionAnchor(
                trigger=_trigger(meta.get("trigger")),
                tokens_before=_int(meta.get("pre_tokens")),
                tokens_after=_int(meta.get("post_tokens")),
                duration_ms=_int(meta.get("duration_ms")),
            )
            self._compaction = "await_summary"
            return out
        if sub == "api_retry":
            status = data.get("error_status")
            return [
                ApiRetry(
                    turn_id=self.turn_id,
                    attempt=_int(data.get("attempt")),
                    max_retries=_int(data.get("max_retries")),
                    retry_delay_ms=_int(data.get("retry_delay_ms")),
                    error_status=status if isinstance(status, int) else None,
                )
            ]
        return []

    def _status(self, data: dict[str, Any]) -> list[Output]:
        out: list[Output] = []
        if data.get("status") == "compacting":
            out.extend(self._settle_compaction())
            if self._compaction == "idle":
                self._compaction = "compacting"
                trigger: Literal["manual", "auto"] = "manual" if self.manual_compaction else "auto"
                out.append(CompactionStart(turn_id=self.turn_id, trigger=trigger))
            return out
        result = data.get("compact_result")
        error = data.get("compact_error")
        if result == "success" and self._compaction == "compacting":
            self._compaction = "await_boundary"
        elif result == "failed" or (error and result != "success"):
            message = str(error or "compaction failed")
            if self._compaction == "idle":
                # The CLI considered compacting and gave up before starting (e.g.
                # "too_few_groups"): nothing changed, so nothing for the user to see.
                out.append(Log(level="info", message=f"compaction skipped: {message}"))
            else:
                self._compaction = "idle"
                self._anchor = None
                out.append(CompactionError(turn_id=self.turn_id, message=message))
        return out

    def _settle_compaction(self) -> list[Output]:
        """Emit the pending `CompactionComplete` once no more details can come."""
        if self._compaction == "await_boundary":
            self._compaction = "idle"
            return [CompactionComplete(turn_id=self.turn_id)]
        if self._compaction == "await_summary":
            anchor, self._anchor = self._anchor, None
            self._compaction = "idle"
            return [CompactionComplete(turn_id=self.turn_id, anchor=anchor)]
        return []


def _parse_input(parts: list[str]) -> dict[str, Any]:
    raw = "".join(parts).strip()
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        return {"_raw": raw}
    return value if isinstance(value, dict) else {"_value": value}
