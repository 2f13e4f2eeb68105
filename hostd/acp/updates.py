"""hostd rows and topic events as ACP `session/update` payloads, sans-IO.

`hostd acp` shows a topic to an editor: what a window rebuilds from rows and events, the
editor gets as ACP updates. No I/O here: `updates_for_row` (history replay at
`session/load`), `updates_for_chunk` (live `row-appended`), `commands_update`.

Mapping (docs/acp.md has the whole table):
- text / thinking -> `agent_message_chunk` / `agent_thought_chunk` (a user row's text ->
  `user_message_chunk`; a scheduled run's starts with `schedule <id>: ` and carries
  `_meta.hostd.scheduledBy`, so the editor does not show it as if the user typed it);
- a tool call -> `tool_call` (title, kind from the tool's name, `locations` from a path in
  its input, `diff` content for an edit or a write, `rawInput`), its result ->
  `tool_call_update` with status `completed` / `failed`, the output as text content;
- a plan chunk -> `plan` (entries with content, status, priority: `medium` when not given);
- the command list -> `available_commands_update`.

Rules this module guards: every payload satisfies ACP schema v1's required fields (a
strict client validates them), and nothing here raises on odd input (a tool input that is
not what a known tool takes just has no locations or diff).
"""

from __future__ import annotations

from typing import Any

import msgspec

from hostd_protocol.client_messages import ApprovalInfo, MessageRow, scheduled_by
from hostd_protocol.common import (
    Chunk,
    CommandInfo,
    DriverMode,
    PlanChunk,
    TextDelta,
    ThinkingDelta,
    ToolCall,
    ToolResult,
    TurnStatus,
)

__all__ = [
    "commands_update",
    "mode_state",
    "permission_answer",
    "permission_request",
    "stop_reason",
    "tool_kind",
    "updates_for_chunk",
    "updates_for_row",
]

Update = dict[str, Any]

#: Tool names (Claude Code's, and common lowercase ones) -> ACP `ToolKind`.
_KINDS = {
    "read": "read",
    "notebookread": "read",
    "edit": "edit",
    "multiedit": "edit",
    "write": "edit",
    "notebookedit": "edit",
    "bash": "execute",
    "shell": "execute",
    "killshell": "execute",
    "grep": "search",
    "glob": "search",
    "ls": "search",
    "websearch": "search",
    "webfetch": "fetch",
    "fetch": "fetch",
    "todowrite": "think",
    "task": "think",
    "exitplanmode": "switch_mode",
}
_PATH_KEYS = ("file_path", "path", "notebook_path")


def tool_kind(name: str) -> str:
    """The ACP tool kind of a tool name (`other` when unknown)."""
    return _KINDS.get(name.lower().split("__")[-1], "other")


def _text_block(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _tool_call(call: ToolCall) -> Update:
    inp = call.input
    update: Update = {
        "sessionUpdate": "tool_call",
        "toolCallId": call.call_id,
        "title": _title(call),
        "kind": tool_kind(call.name),
        "status": "in_progress",
        "rawInput": inp,
    }
    path = next((inp[k] for k in _PATH_KEYS if isinstance(inp.get(k), str)), None)
    if path:
        update["locations"] = [{"path": path}]
        diff = _diff(call.name.lower(), path, inp)
        if diff is not None:
            update["content"] = [diff]
    return update


def _title(call: ToolCall) -> str:
    inp = call.input
    for key in (*_PATH_KEYS, "command", "pattern", "url", "query", "description"):
        value = inp.get(key)
        if isinstance(value, str) and value:
            short = " ".join(value.split())
            return f"{call.name} {short[:120]}"
    return call.name or "tool"


def _diff(name: str, path: str, inp: dict[str, Any]) -> dict[str, Any] | None:
    if name == "edit" and isinstance(inp.get("new_string"), str):
        old = inp.get("old_string")
        return {
            "type": "diff",
            "path": path,
            "oldText": old if isinstance(old, str) else None,
            "newText": inp["new_string"],
        }
    if name == "write" and isinstance(inp.get("content"), str):
        return {"type": "diff", "path": path, "oldText": None, "newText": inp["content"]}
    return None


def _tool_result(result: ToolResult) -> Update:
    return {
        "sessionUpdate": "tool_call_update",
        "toolCallId": result.call_id,
        "status": "failed" if result.is_error else "completed",
        "content": [{"type": "content", "content": _text_block(result.output)}],
    }


def _plan(plan: PlanChunk) -> Update:
    return {
        "sessionUpdate": "plan",
        "entries": [
            {
                "content": e.content,
                "status": e.status,
                "priority": e.priority if e.priority in ("high", "medium", "low") else "medium",
            }
            for e in plan.entries
        ],
    }


def updates_for_chunk(chunk: Chunk, *, user: bool = False) -> list[Update]:
    """One chunk of a row as updates (an empty text gives none)."""
    if isinstance(chunk, TextDelta):
        if not chunk.text:
            return []
        kind = "user_message_chunk" if user else "agent_message_chunk"
        return [{"sessionUpdate": kind, "content": _text_block(chunk.text)}]
    if isinstance(chunk, ThinkingDelta):
        if not chunk.text:
            return []
        return [{"sessionUpdate": "agent_thought_chunk", "content": _text_block(chunk.text)}]
    if isinstance(chunk, ToolCall):
        return [_tool_call(chunk)]
    if isinstance(chunk, ToolResult):
        return [_tool_result(chunk)]
    if isinstance(chunk, PlanChunk):
        return [_plan(chunk)]
    return []


def updates_for_row(row: MessageRow) -> list[Update]:
    """A stored row as the updates that replay it (history at `session/load`). Queued and
    draft messages are not history; markers (compaction) have no ACP form."""
    if row.status in ("queued", "draft") or row.role == "marker":
        return []
    user = row.role == "user"
    out: list[Update] = []
    for part in row.parts:
        out += updates_for_chunk(part, user=user)
    schedule = scheduled_by(row.meta) if user else ""
    if schedule:
        # ACP has no author on a user message: the label is the text's first words (as
        # `hostd chat` shows `schedule sc1 >`), the id in `_meta` for an editor that reads it.
        label = {"sessionUpdate": "user_message_chunk", "content": _text_block(
            f"schedule {schedule}: ")}
        out = [label, *out]
        for update in out:
            update["_meta"] = {"hostd": {"scheduledBy": schedule}}
    return out


def commands_update(commands: list[CommandInfo]) -> Update:
    """The agent's command list as `available_commands_update`."""
    return {
        "sessionUpdate": "available_commands_update",
        "availableCommands": [
            {
                "name": c.name,
                "description": c.description or c.name,
                **({"input": {"hint": c.input_hint}} if c.input_hint else {}),
            }
            for c in commands
        ],
    }


def mode_state(modes: list[DriverMode], current: str) -> dict[str, Any] | None:
    """A session's ACP `modes` from its driver's (`DriverSpec.modes`); None: it has none."""
    if not modes:
        return None
    return {
        "currentModeId": current if any(m.id == current for m in modes) else modes[0].id,
        "availableModes": [
            {
                "id": m.id,
                "name": m.name or m.id,
                **({"description": m.description} if m.description else {}),
            }
            for m in modes
        ],
    }


def stop_reason(status: TurnStatus) -> str:
    """A turn's end as the prompt's `stopReason` (an error is answered as a JSON-RPC
    error instead: ACP has no stop reason for it)."""
    return "cancelled" if status == "stopped" else "end_turn"


#: Default answers when the driver offers no options of its own.
_DEFAULT_OPTIONS = [
    {"optionId": "allow", "name": "Allow", "kind": "allow_once"},
    {"optionId": "reject", "name": "Deny", "kind": "reject_once"},
]


def permission_request(session_id: str, approval: ApprovalInfo) -> tuple[Update, dict[str, str]]:
    """An approval as `session/request_permission` params, and each option's kind: the
    driver's options (e.g. an ACP agent's allow-always), else Allow / Deny."""
    options = [
        {"optionId": o.id, "name": o.label or o.id, "kind": o.kind or "allow_once"}
        for o in approval.options
    ] or _DEFAULT_OPTIONS
    params = {
        "sessionId": session_id,
        "toolCall": {
            "toolCallId": approval.id,
            "title": approval.description or approval.tool,
            "kind": "other",
            "status": "pending",
            "rawInput": approval.input,
        },
        "options": options,
    }
    return params, {o["optionId"]: o["kind"] for o in options}


def permission_answer(raw: msgspec.Raw | bytes, kinds: dict[str, str]) -> tuple[bool, str, str]:
    """The editor's `request_permission` result as (allow, the driver's option id or "",
    reason); anything but a known option is a denial "cancelled in the editor"."""
    try:
        outcome = msgspec.json.decode(raw).get("outcome") or {}
    except (msgspec.DecodeError, AttributeError):
        outcome = {}
    chosen = outcome.get("optionId") if isinstance(outcome, dict) and outcome.get(
        "outcome") == "selected" else None
    if chosen not in kinds:
        return False, "", "cancelled in the editor"
    allow = str(kinds[chosen]).startswith("allow")
    return allow, "" if any(chosen == d["optionId"] for d in _DEFAULT_OPTIONS) else chosen, ""
