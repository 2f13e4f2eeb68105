"""Sans-IO decoder of a streamed Chat Completions response (Server-Sent Events).

`ChatStreamDecoder.feed(bytes)` returns what the bytes completed, in order: text and
reasoning pieces, usage, the finish reason, a server-side error. Tool calls arrive as deltas
spread over many events (and, on some servers, parallel calls interleaved by `index`); the
decoder assembles them and `tool_calls()` returns them once the stream is over.

Rules this module guards:

- Any split of the byte stream decodes to the same items (tests feed one byte at a time).
- `\\n`, `\\r\\n` and `\\r` line ends; `data:` lines of one event are joined with `\\n`;
  comments (`:`) and unknown fields are ignored; `data: [DONE]` ends the stream.
- A chunk that is not JSON, or not shaped like a chunk, raises `StreamDecodeError` (the
  caller ends the turn with the partial answer kept).
- Servers differ: a tool-call delta without `index` (some local servers send each call whole)
  starts a new call when it carries a new `id`; reasoning comes as `reasoning_content` (vLLM,
  llama.cpp, DeepSeek) or `reasoning` (Ollama, OpenRouter).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec


class StreamDecodeError(Exception):
    """The response body is not a well-formed Chat Completions event stream."""


class _Function(msgspec.Struct):
    name: str | None = None
    arguments: str | None = None


class _ToolCallDelta(msgspec.Struct):
    index: int | None = None
    id: str | None = None
    function: _Function | None = None


class _Delta(msgspec.Struct):
    content: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None
    tool_calls: list[_ToolCallDelta] | None = None


class _Choice(msgspec.Struct):
    delta: _Delta | None = None
    finish_reason: str | None = None


class _PromptDetails(msgspec.Struct):
    cached_tokens: int | None = None


class _Usage(msgspec.Struct):
    prompt_tokens: int | None = 0
    completion_tokens: int | None = 0
    prompt_tokens_details: _PromptDetails | None = None


class _Chunk(msgspec.Struct):
    choices: list[_Choice] | None = None
    usage: _Usage | None = None
    error: Any = None


_CHUNK_DECODER = msgspec.json.Decoder(_Chunk)


@dataclass(frozen=True)
class TextPiece:
    text: str


@dataclass(frozen=True)
class ReasoningPiece:
    text: str


@dataclass(frozen=True)
class UsageReport:
    input_tokens: int
    output_tokens: int
    cached_tokens: int


@dataclass(frozen=True)
class Finished:
    reason: str


@dataclass(frozen=True)
class ServerError:
    """The server sent an error object inside the stream (after a 200)."""

    message: str


StreamItem = TextPiece | ReasoningPiece | UsageReport | Finished | ServerError


@dataclass
class AssembledToolCall:
    """One tool call of the response: `arguments` is the raw JSON text the model wrote."""

    call_id: str
    name: str = ""
    arguments: str = ""


@dataclass
class ChatStreamDecoder:
    """Feed response bytes, get stream items; see the module docstring."""

    done: bool = False
    _buffer: bytes = b""
    _data: list[str] = field(default_factory=list)
    _calls: dict[int, AssembledToolCall] = field(default_factory=dict)
    _last_index: int = -1
    _anonymous: int = 0

    def feed(self, data: bytes) -> list[StreamItem]:
        """Decode what `data` completes. Bytes after `[DONE]` are ignored."""
        if self.done:
            return []
        self._buffer += data
        out: list[StreamItem] = []
        while not self.done:
            line, sep, rest = self._split_line(self._buffer)
            if not sep:
                break
            self._buffer = rest
            self._line(line, out)
        return out

    def close(self) -> list[StreamItem]:
        """The body ended: dispatch a last event that had no blank line after it."""
        out: list[StreamItem] = []
        if not self.done:
            if self._buffer:
                self._line(self._buffer, out)
                self._buffer = b""
            if not self.done:
                self._line(b"", out)
        return out

    def tool_calls(self) -> list[AssembledToolCall]:
        """The tool calls of the response, in index order."""
        return [self._calls[i] for i in sorted(self._calls)]

    # --- lines and events ---------------------------------------------------------------

    @staticmethod
    def _split_line(buffer: bytes) -> tuple[bytes, bytes, bytes]:
        n = buffer.find(b"\n")
        r = buffer.find(b"\r")
        if r == -1 or (n != -1 and n < r):
            if n == -1:
                return b"", b"", buffer
            return buffer[:n], b"\n", buffer[n + 1 :]
        if r + 1 == len(buffer):  # a lone \r at the end may still become \r\n
            return b"", b"", buffer
        skip = 2 if buffer[r + 1] == 0x0A else 1
        return buffer[:r], b"\n", buffer[r + skip :]

    def _line(self, raw: bytes, out: list[StreamItem]) -> None:
        if not raw:
            if self._data:
                payload = "\n".join(self._data)
                self._data = []
                self._event(payload, out)
            return
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise StreamDecodeError("the event stream is not UTF-8") from None
        if line.startswith(":"):
            return
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)

    def _event(self, payload: str, out: list[StreamItem]) -> None:
        if payload.strip() == "[DONE]":
            self.done = True
            return
        try:
            chunk = _CHUNK_DECODER.decode(payload)
        except msgspec.DecodeError as exc:
            raise StreamDecodeError(f"a stream event is not a chunk: {exc}") from None
        if chunk.error is not None:
            out.append(ServerError(_error_message(chunk.error)))
            return
        for choice in chunk.choices or ():
            delta = choice.delta
            if delta is not None:
                reasoning = delta.reasoning_content or delta.reasoning
                if reasoning:
                    out.append(ReasoningPiece(reasoning))
                if delta.content:
                    out.append(TextPiece(delta.content))
                for call in delta.tool_calls or ():
                    self._tool_delta(call)
            if choice.finish_reason:
                out.append(Finished(choice.finish_reason))
        usage = chunk.usage
        if usage is not None:
            details = usage.prompt_tokens_details
            out.append(
                UsageReport(
                    input_tokens=usage.prompt_tokens or 0,
                    output_tokens=usage.completion_tokens or 0,
                    cached_tokens=(details.cached_tokens or 0) if details else 0,
                )
            )

    def _tool_delta(self, delta: _ToolCallDelta) -> None:
        index = delta.index
        if index is None:
            current = self._calls.get(self._last_index)
            if current is None or (delta.id and delta.id != current.call_id):
                index = self._last_index + 1
            else:
                index = self._last_index
        call = self._calls.get(index)
        if call is None:
            call_id = delta.id or ""
            if not call_id:
                self._anonymous += 1
                call_id = f"call_{self._anonymous}"
            call = self._calls[index] = AssembledToolCall(call_id=call_id)
        self._last_index = max(self._last_index, index)
        fn = delta.function
        if fn is not None:
            if fn.name:
                # Most servers send the name once; a server that repeats it must not double it.
                if not call.name:
                    call.name = fn.name
                elif fn.name != call.name:
                    call.name += fn.name
            if fn.arguments:
                call.arguments += fn.arguments


def _error_message(error: Any) -> str:
    if isinstance(error, dict):
        message = error.get("message") or error.get("error") or error
        return str(message)
    return str(error)
