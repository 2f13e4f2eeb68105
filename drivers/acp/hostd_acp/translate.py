"""ACP `session/update` payloads to hostd driver events, sans-IO.

One `UpdateTranslator` per prompt: `feed(raw_update)` returns what to send to the host;
`finish()` flushes what is still open when the prompt's answer arrives.

Mapping:
- `agent_message_chunk` (text) -> `TextDelta`; other content blocks (image, resource) ->
  a short text placeholder, so the answer says something was there.
- `agent_thought_chunk` -> `ThinkingDelta`.
- `tool_call` -> `ToolCall`, sent once the input is known: claude-agent-acp announces a
  call with an empty `rawInput` while the model still streams it and refines it with a
  `tool_call_update` carrying the full input. The call is announced at the first of: an
  update with input, a permission request, a terminal status, any other output, `finish()`.
- `tool_call_update` with status `completed` / `failed` -> `ToolResult` (content blocks as
  text, diffs as a small unified header plus the new text); one result per call.
- `plan` -> a `PlanChunk` (the whole plan); `current_mode_update` -> `Notice(code="mode")`;
  `usage_update` -> `UsageEvent` (cost); `available_commands_update` -> nothing here (a
  session-level update: `commands_event` turns it into a `CommandsEvent` whenever it comes);
  `config_option_update`, `session_info_update`, `user_message_chunk` -> nothing (logged
  at debug by the caller); unknown kinds -> `Log(debug)`.
- A malformed update -> `Log(warning)`; never an exception.

Rules this module guards: output sizes are bounded (`max_text` per rendered tool result or
notice), and a tool call never gets two results or a result before its call.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import msgspec

from hostd_acp.schema import (
    CommandsUpdate,
    ContentChunk,
    ModeUpdate,
    PlanUpdate,
    ToolCallFields,
    UpdateKind,
    UsageUpdate,
)
from hostd_protocol.common import (
    CommandInfo,
    PlanChunk,
    PlanEntry,
    PlanStatus,
    TextDelta,
    ThinkingDelta,
    ToolCall,
    ToolResult,
    Usage,
)
from hostd_protocol.driver_messages import CommandsEvent, Log, Notice, UsageEvent

Output: TypeAlias = (
    TextDelta | ThinkingDelta | ToolCall | ToolResult | PlanChunk | Notice | UsageEvent | Log
)

#: Bound on one rendered tool result / notice text.
DEFAULT_MAX_TEXT = 64 * 1024

_TERMINAL = ("completed", "failed")
_IGNORED_KINDS = frozenset(
    {
        "available_commands_update",
        "config_option_update",
        "session_info_update",
        "user_message_chunk",
    }
)

_kind_decoder = msgspec.json.Decoder(UpdateKind)
_chunk_decoder = msgspec.json.Decoder(ContentChunk)
_tool_decoder = msgspec.json.Decoder(ToolCallFields)
_plan_decoder = msgspec.json.Decoder(PlanUpdate)
_mode_decoder = msgspec.json.Decoder(ModeUpdate)
_usage_decoder = msgspec.json.Decoder(UsageUpdate)
_commands_decoder = msgspec.json.Decoder(CommandsUpdate)
_PLAN_STATUSES: dict[str, PlanStatus] = {
    "pending": "pending",
    "in_progress": "in_progress",
    "completed": "completed",
}


def commands_event(raw_update: msgspec.Raw | bytes) -> CommandsEvent | Log:
    """An `available_commands_update` as the host's `CommandsEvent` (a malformed one: a
    warning `Log`)."""
    try:
        update = _commands_decoder.decode(raw_update)
    except msgspec.DecodeError as exc:
        return Log(level="warning", message=f"dropped a malformed command list: {exc}")
    return CommandsEvent(
        commands=[
            CommandInfo(
                name=c.name,
                description=c.description,
                input_hint=c.input.hint if c.input is not None else "",
            )
            for c in update.available_commands
        ]
    )


def plan_chunk(entries: list[Any]) -> PlanChunk:
    """ACP plan entries as hostd's plan (an unknown status reads as pending)."""
    return PlanChunk(
        entries=[
            PlanEntry(
                content=e.content,
                status=_PLAN_STATUSES.get(e.status, "pending"),
                priority=e.priority,
            )
            for e in entries
        ]
    )


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[... {len(text) - limit} more characters]"


def content_text(block: dict[str, Any]) -> str:
    """A content block (text, image, resource, ...) as text for the transcript."""
    kind = block.get("type")
    if kind == "text":
        return str(block.get("text", ""))
    if kind == "resource_link":
        return f"[{block.get('name') or block.get('uri', 'resource')}]"
    if kind == "resource":
        res = block.get("resource") or {}
        if isinstance(res, dict) and "text" in res:
            return str(res.get("text", ""))
        return f"[resource {res.get('uri', '') if isinstance(res, dict) else ''}]"
    return f"[{kind or 'content'}]"


def tool_content_text(items: list[dict[str, Any]]) -> str:
    """ToolCallContent items as one text: content blocks, diffs, terminals."""
    parts: list[str] = []
    for item in items:
        kind = item.get("type")
        if kind == "content":
            inner = item.get("content")
            parts.append(content_text(inner) if isinstance(inner, dict) else "")
        elif kind == "diff":
            path = item.get("path", "")
            old = item.get("oldText")
            header = f"--- {path}\n+++ {path}" if old is not None else f"+++ {path} (new file)"
            parts.append(f"{header}\n{item.get('newText', '')}")
        elif kind == "terminal":
            parts.append(f"[terminal {item.get('terminalId', '')}]")
    return "\n".join(p for p in parts if p)


def _raw_output_text(raw: Any) -> str:
    if raw is None:
        return ""
    if isinstance(raw, str):
        return raw
    if isinstance(raw, list):
        texts = [content_text(b) for b in raw if isinstance(b, dict)]
        if texts:
            return "\n".join(texts)
    return json.dumps(raw, ensure_ascii=False, default=str)


@dataclass
class _Tool:
    call_id: str
    name: str = ""
    input: dict[str, Any] = field(default_factory=dict)
    announced: bool = False
    finished: bool = False
    content: list[dict[str, Any]] = field(default_factory=list)
    raw_output: Any = None


def _tool_name(fields: ToolCallFields, previous: str = "") -> str:
    meta = fields._meta or {}
    claude = meta.get("claudeCode") if isinstance(meta, dict) else None
    if isinstance(claude, dict) and isinstance(claude.get("toolName"), str):
        return str(claude["toolName"])
    return previous or fields.title or fields.kind or "tool"


class UpdateTranslator:
    """Translate the updates of one prompt, in order."""

    def __init__(self, max_text: int = DEFAULT_MAX_TEXT) -> None:
        self.max_text = max_text
        self._tools: dict[str, _Tool] = {}
        self._order: list[str] = []
        #: Whether anything visible was produced (for "empty answer" diagnostics).
        self.produced = False

    # --- public ---------------------------------------------------------------------------

    def feed(self, raw_update: msgspec.Raw | bytes) -> list[Output]:
        try:
            kind = _kind_decoder.decode(raw_update).session_update
        except msgspec.DecodeError as exc:
            return [Log(level="warning", message=f"dropped a malformed session/update: {exc}")]
        try:
            return self._dispatch(kind, raw_update)
        except msgspec.DecodeError as exc:
            return [Log(level="warning", message=f"dropped a malformed {kind} update: {exc}")]

    def announce(self, call_id: str, fields: ToolCallFields | None = None) -> list[Output]:
        """Make sure the host has seen `call_id`'s ToolCall (e.g. before its approval)."""
        tool = self._tools.get(call_id)
        if tool is None:
            if fields is None:
                return []
            tool = self._new_tool(fields)
        elif fields is not None:
            self._merge(tool, fields)
        return self._announce(tool)

    def tool_name(self, call_id: str) -> str:
        """The name a call was (or will be) announced under; empty when unknown."""
        tool = self._tools.get(call_id)
        return tool.name if tool is not None else ""

    def finish(self) -> list[Output]:
        """The prompt ended: announce calls still waiting for their input."""
        out: list[Output] = []
        for call_id in self._order:
            out += self._announce(self._tools[call_id])
        return out

    # --- internals ------------------------------------------------------------------------

    def _dispatch(self, kind: str, raw: msgspec.Raw | bytes) -> list[Output]:
        if kind in ("agent_message_chunk", "agent_thought_chunk"):
            chunk = _chunk_decoder.decode(raw)
            text = content_text(chunk.content)
            if not text:
                return []
            out = self._flush_pending()
            self.produced = True
            if kind == "agent_message_chunk":
                out.append(TextDelta(text=text))
            else:
                out.append(ThinkingDelta(text=text))
            return out
        if kind == "tool_call":
            return self._tool_call(_tool_decoder.decode(raw))
        if kind == "tool_call_update":
            return self._tool_update(_tool_decoder.decode(raw))
        if kind == "plan":
            out = self._flush_pending()
            self.produced = True
            return [*out, plan_chunk(_plan_decoder.decode(raw).entries)]
        if kind == "current_mode_update":
            mode = _mode_decoder.decode(raw)
            return [Notice(code="mode", message=f"mode: {mode.current_mode_id}")]
        if kind == "usage_update":
            usage = _usage_decoder.decode(raw)
            if usage.cost is None:
                return []
            return [UsageEvent(turn_id="", usage=Usage(cost_usd=usage.cost.amount))]
        if kind in _IGNORED_KINDS:
            return []
        return [Log(level="debug", message=f"ignored session/update kind {kind!r}")]

    def _new_tool(self, fields: ToolCallFields) -> _Tool:
        tool = _Tool(call_id=fields.tool_call_id)
        self._tools[tool.call_id] = tool
        self._order.append(tool.call_id)
        self._merge(tool, fields)
        return tool

    @staticmethod
    def _merge(tool: _Tool, fields: ToolCallFields) -> None:
        tool.name = _tool_name(fields, tool.name)
        if isinstance(fields.raw_input, dict) and fields.raw_input and not tool.announced:
            tool.input = fields.raw_input
        if fields.content:
            tool.content = list(fields.content)
        if fields.raw_output is not None:
            tool.raw_output = fields.raw_output

    def _announce(self, tool: _Tool) -> list[Output]:
        if tool.announced:
            return []
        tool.announced = True
        self.produced = True
        return [ToolCall(call_id=tool.call_id, name=tool.name, input=tool.input)]

    def _flush_pending(self, keep: str = "") -> list[Output]:
        out: list[Output] = []
        for call_id in self._order:
            if call_id != keep:
                out += self._announce(self._tools[call_id])
        return out

    def _tool_call(self, fields: ToolCallFields) -> list[Output]:
        tool = self._tools.get(fields.tool_call_id)
        if tool is None:
            out = self._flush_pending()
            tool = self._new_tool(fields)
        else:
            out = []
            self._merge(tool, fields)
        if tool.input:
            out += self._announce(tool)
        return out + self._maybe_result(tool, fields.status)

    def _tool_update(self, fields: ToolCallFields) -> list[Output]:
        tool = self._tools.get(fields.tool_call_id)
        if tool is None:
            # An update for a call we never saw (e.g. it started before a load): show it.
            tool = self._new_tool(fields)
        else:
            self._merge(tool, fields)
        out: list[Output] = []
        if tool.input:
            out += self._announce(tool)
        return out + self._maybe_result(tool, fields.status)

    def _maybe_result(self, tool: _Tool, status: str | None) -> list[Output]:
        if status not in _TERMINAL or tool.finished:
            return []
        out = self._announce(tool)
        tool.finished = True
        text = tool_content_text(tool.content) or _raw_output_text(tool.raw_output)
        out.append(
            ToolResult(
                call_id=tool.call_id,
                output=_clip(text, self.max_text),
                is_error=status == "failed",
            )
        )
        return out
