"""The Responses API (`api = "responses"`): the request built from the loop's messages, and a
sans-IO decoder of its event stream that yields the same items as the Chat Completions one.

The agent loop keeps one conversation shape (Chat Completions messages) whichever API it
talks to; this module is the one place that shape is translated, both ways.

Rules this module guards:

- `responses_body` turns a Chat Completions request body into a Responses one: messages
  become `input` items (an assistant message's `tool_calls` become `function_call` items
  after its text, a `tool` message a `function_call_output`, image parts `input_image`), tools
  lose their `function` wrapper, `max_tokens` becomes `max_output_tokens`, usage always comes
  with `response.completed` (no `stream_options`), and `store` is false: the server keeps
  nothing, the host's history is the one record (stateless, like Chat Completions).
- `ResponsesStreamDecoder` decodes `response.*` events (the same SSE framing, any split of
  the bytes alike): text and reasoning deltas, function calls assembled from
  `output_item.added` + argument deltas (the `output_item.done` item wins), usage and the
  finish reason from `response.completed` (`tool_calls` when the response called tools) or
  `response.incomplete` (`length` for the output limit), and `response.failed` / `error`
  as a server error. The stream is over at the response's last event; no `[DONE]` needed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec

from hostd_openai.chat_stream import (
    AssembledToolCall,
    ChatStreamDecoder,
    Finished,
    ReasoningPiece,
    ServerError,
    StreamDecodeError,
    StreamItem,
    TextPiece,
    UsageReport,
)

PATH = "/responses"


def responses_body(chat: dict[str, Any]) -> dict[str, Any]:
    """A Responses request equivalent to the Chat Completions request `chat`."""
    body: dict[str, Any] = {
        "model": chat["model"],
        "input": input_items(chat["messages"]),
        "stream": True,
        "store": False,
    }
    tools = [t["function"] for t in chat.get("tools", ())]
    if tools:
        body["tools"] = [{"type": "function", **t} for t in tools]
    for key, value in chat.items():
        if key in ("model", "messages", "stream", "stream_options", "tools"):
            continue
        body["max_output_tokens" if key == "max_tokens" else key] = value
    return body


def input_items(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Chat Completions messages as Responses input items (see the module docstring)."""
    items: list[dict[str, Any]] = []
    for m in messages:
        role = m["role"]
        if role == "tool":
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": m["tool_call_id"],
                    "output": m["content"],
                }
            )
            continue
        content = m.get("content")
        if content:
            items.append({"role": role, "content": _content(content, role)})
        for call in m.get("tool_calls", ()):
            fn = call["function"]
            items.append(
                {
                    "type": "function_call",
                    "call_id": call["id"],
                    "name": fn["name"],
                    "arguments": fn["arguments"],
                }
            )
    return items


def _content(content: str | list[dict[str, Any]], role: str) -> str | list[dict[str, Any]]:
    if isinstance(content, str):
        return content
    text_type = "output_text" if role == "assistant" else "input_text"
    parts: list[dict[str, Any]] = []
    for part in content:
        if part.get("type") == "image_url":
            parts.append({"type": "input_image", "image_url": part["image_url"]["url"]})
        else:
            parts.append({"type": text_type, "text": part.get("text", "")})
    return parts


class _Item(msgspec.Struct):
    type: str = ""
    id: str | None = None
    call_id: str | None = None
    name: str | None = None
    arguments: str | None = None


class _InputDetails(msgspec.Struct):
    cached_tokens: int | None = 0


class _Usage(msgspec.Struct):
    input_tokens: int | None = 0
    output_tokens: int | None = 0
    input_tokens_details: _InputDetails | None = None


class _Incomplete(msgspec.Struct):
    reason: str | None = None


class _Response(msgspec.Struct):
    status: str | None = None
    usage: _Usage | None = None
    error: Any = None
    incomplete_details: _Incomplete | None = None


class _Event(msgspec.Struct):
    type: str = ""
    delta: str | None = None
    output_index: int | None = None
    item_id: str | None = None
    item: _Item | None = None
    response: _Response | None = None
    message: str | None = None


_EVENT_DECODER = msgspec.json.Decoder(_Event)

_TEXT = "response.output_text.delta"
_REASONING = frozenset({"response.reasoning_summary_text.delta", "response.reasoning_text.delta"})


@dataclass
class ResponsesStreamDecoder(ChatStreamDecoder):
    """`ChatStreamDecoder`'s framing and interface, Responses events (module docstring)."""

    _by_item: dict[str, int] = field(default_factory=dict)

    def _event(self, payload: str, out: list[StreamItem]) -> None:
        if payload.strip() == "[DONE]":  # not sent by the Responses API; harmless if it is
            self.done = True
            return
        try:
            event = _EVENT_DECODER.decode(payload)
        except msgspec.DecodeError as exc:
            raise StreamDecodeError(f"a stream event is not a Responses event: {exc}") from None
        kind = event.type
        if kind == _TEXT and event.delta:
            out.append(TextPiece(event.delta))
        elif kind in _REASONING and event.delta:
            out.append(ReasoningPiece(event.delta))
        elif kind in ("response.output_item.added", "response.output_item.done"):
            self._item(event)
        elif kind == "response.function_call_arguments.delta" and event.delta:
            call = self._call_of(event)
            if call is not None:
                call.arguments += event.delta
        elif kind in ("response.completed", "response.incomplete"):
            self._finish(event, out)
        elif kind == "response.failed":
            error = event.response.error if event.response is not None else None
            out.append(ServerError(_message(error) or "the response failed"))
            self.done = True
        elif kind == "error":
            out.append(ServerError(event.message or "error"))
            self.done = True

    def _item(self, event: _Event) -> None:
        item = event.item
        if item is None or item.type != "function_call":
            return
        index = event.output_index if event.output_index is not None else len(self._calls)
        call = self._calls.get(index)
        if call is None:
            call = self._calls[index] = AssembledToolCall(call_id=item.call_id or item.id or "")
            if item.id:
                self._by_item[item.id] = index
        if item.name:
            call.name = item.name
        if item.arguments is not None and event.type == "response.output_item.done":
            call.arguments = item.arguments  # the whole arguments: they win over the deltas

    def _call_of(self, event: _Event) -> AssembledToolCall | None:
        if event.item_id is not None and event.item_id in self._by_item:
            return self._calls[self._by_item[event.item_id]]
        if event.output_index is not None:
            return self._calls.get(event.output_index)
        return None

    def _finish(self, event: _Event, out: list[StreamItem]) -> None:
        response = event.response or _Response()
        usage = response.usage
        if usage is not None:
            details = usage.input_tokens_details
            out.append(
                UsageReport(
                    input_tokens=usage.input_tokens or 0,
                    output_tokens=usage.output_tokens or 0,
                    cached_tokens=(details.cached_tokens or 0) if details else 0,
                )
            )
        if event.type == "response.incomplete":
            reason = response.incomplete_details.reason if response.incomplete_details else ""
            out.append(Finished("length" if reason == "max_output_tokens" else reason or "length"))
        else:
            out.append(Finished("tool_calls" if self._calls else "stop"))
        self.done = True


def _message(error: Any) -> str:
    if isinstance(error, dict):
        return str(error.get("message") or error)
    return str(error or "")
