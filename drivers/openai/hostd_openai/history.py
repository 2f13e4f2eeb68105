"""The host's history as Chat Completions messages: text, and the tool calls answers made.

Rules this module guards:

- An answer that ran tools (`HistoryMessage.parts`) becomes, in the order it happened: an
  assistant message with its text so far and its `tool_calls`, then one `tool` message per
  call, then the next assistant message; each call and each result exactly once.
- The API refuses a call without its result, so a call that never got one (the turn was
  stopped while it ran) is left out, as are results of calls the message does not hold.
- Rows written before retries kept one id carry attempts as `<id>#<n>` calls: they fold into
  the call the model made, the last attempt's result standing for it.
- A message with neither text nor tools is no history (nothing the model can read).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from hostd_protocol.common import Attachment, HistoryMessage, TextDelta, ToolCall, ToolResult


@dataclass
class _Step:
    """One assistant message of an answer and the results of its calls."""

    text: list[str] = field(default_factory=list)
    calls: list[ToolCall] = field(default_factory=list)
    results: dict[str, str] = field(default_factory=dict)

    def owner(self, call_id: str) -> str | None:
        """The id of the call of this step that `call_id` names (itself or an attempt)."""
        ids = {c.call_id for c in self.calls}
        if call_id in ids:
            return call_id
        base, sep, attempt = call_id.rpartition("#")
        return base if sep and attempt.isdigit() and base in ids else None

    def messages(self) -> list[dict[str, Any]]:
        calls = [c for c in self.calls if c.call_id in self.results]
        content = "".join(self.text)
        if not calls:
            return [{"role": "assistant", "content": content}] if content else []
        out: list[dict[str, Any]] = [
            {
                "role": "assistant",
                "content": content or None,
                "tool_calls": [
                    {
                        "id": c.call_id,
                        "type": "function",
                        "function": {"name": c.name, "arguments": json.dumps(c.input)},
                    }
                    for c in calls
                ],
            }
        ]
        out.extend(
            {"role": "tool", "tool_call_id": c.call_id, "content": self.results[c.call_id]}
            for c in calls
        )
        return out


def answer_messages(message: HistoryMessage) -> list[dict[str, Any]]:
    """One stored answer with tool parts as API messages (see the module docstring)."""
    out: list[dict[str, Any]] = []
    step = _Step()
    for part in message.parts:
        if isinstance(part, TextDelta):
            if step.results:  # the tool batch is over: text starts the next message
                out.extend(step.messages())
                step = _Step()
            step.text.append(part.text)
        elif isinstance(part, ToolCall):
            if step.owner(part.call_id) is not None:
                continue  # an old-style retry attempt of a call this step holds
            if step.results:
                out.extend(step.messages())
                step = _Step()
            step.calls.append(part)
        elif isinstance(part, ToolResult):
            owner = step.owner(part.call_id)
            if owner is not None:
                step.results[owner] = part.output  # a later attempt's result replaces it
    out.extend(step.messages())
    return out


def history_messages(history: list[HistoryMessage]) -> list[dict[str, Any]]:
    """The host's history (oldest first) as Chat Completions messages."""
    out: list[dict[str, Any]] = []
    for item in history:
        if item.role == "assistant" and item.parts:
            out.extend(answer_messages(item))
        elif item.role == "user" and item.attachments:
            out.append({"role": "user", "content": content_parts(item.text, item.attachments)})
        elif item.text:
            out.append({"role": item.role, "content": item.text})
    return out


def content_parts(text: str, attachments: Sequence[Attachment]) -> list[dict[str, Any]]:
    """A user message with images as Chat Completions content parts: the text, then each
    image as an `image_url` data URL (protocol 1.5)."""
    parts: list[dict[str, Any]] = [{"type": "text", "text": text}]
    parts.extend(
        {"type": "image_url", "image_url": {"url": f"data:{a.media_type};base64,{a.data}"}}
        for a in attachments
    )
    return parts
