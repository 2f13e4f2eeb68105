"""JSON-RPC 2.0 over newline-delimited JSON (ACP's stdio transport), sans-IO.

`LineDecoder.feed(bytes)` returns the messages complete so far; `encode_*` return the bytes
to write. No I/O, no trio: `agent_process` feeds it from the agent's stdout.

Rules this module guards:

- Memory is bounded: a line longer than `max_line` is never buffered whole. The decoder
  drops it while it streams past and reports one `Dropped(reason="oversized")` with its
  size, then carries on at the next newline.
- A line that is not a JSON-RPC message (not JSON, not an object, no method and no id, a
  wrong type) is one `Dropped(reason="malformed")`; the stream goes on. The caller decides
  when too many drops mean the agent is broken.
- Payloads stay `msgspec.Raw` until the caller knows which type they are (by method or by
  the request an id answers), so nothing is decoded twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

#: Default bound on one line from the agent (a single JSON-RPC message).
DEFAULT_MAX_LINE = 8 * 1024 * 1024

#: JSON-RPC error codes (spec section 5.1).
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
#: ACP (from LSP's reserved range): the request was withdrawn by its sender (`$/cancel_request`).
REQUEST_CANCELLED = -32800

RequestId = int | str


class RpcError(msgspec.Struct, omit_defaults=True):
    code: int
    message: str
    data: Any = None


class _Envelope(msgspec.Struct):
    jsonrpc: str = "2.0"
    id: RequestId | None = None
    method: str | None = None
    params: msgspec.Raw = msgspec.Raw(b"null")
    result: msgspec.Raw = msgspec.Raw(b"null")
    error: RpcError | None = None


@dataclass(frozen=True)
class Request:
    """The agent calls a client method and waits for our answer."""

    id: RequestId
    method: str
    params: msgspec.Raw


@dataclass(frozen=True)
class Notification:
    """The agent tells us something (`session/update`); no answer."""

    method: str
    params: msgspec.Raw


@dataclass(frozen=True)
class Response:
    """The answer to one of our requests: `result` or `error`."""

    id: RequestId
    result: msgspec.Raw
    error: RpcError | None


@dataclass(frozen=True)
class Dropped:
    """A line that was not a usable message; `size` in bytes, `detail` for the log."""

    reason: str  # "malformed" | "oversized"
    size: int
    detail: str = ""


Incoming = Request | Notification | Response | Dropped

_decoder = msgspec.json.Decoder(_Envelope)
_encoder = msgspec.json.Encoder()


class LineDecoder:
    """Split the agent's stdout into JSON-RPC messages, with a hard bound per line."""

    def __init__(self, max_line: int = DEFAULT_MAX_LINE) -> None:
        self.max_line = max_line
        self._buf = bytearray()
        #: Bytes of an oversized line dropped so far (None: not inside one).
        self._skipping: int | None = None

    def feed(self, data: bytes | bytearray) -> list[Incoming]:
        out: list[Incoming] = []
        start = 0
        while start < len(data):
            nl = data.find(b"\n", start)
            end = len(data) if nl < 0 else nl
            piece = data[start:end]
            if self._skipping is not None:
                self._skipping += len(piece)
            elif len(self._buf) + len(piece) > self.max_line:
                self._skipping = len(self._buf) + len(piece)
                self._buf.clear()
            else:
                self._buf += piece
            if nl < 0:
                break
            start = nl + 1
            if self._skipping is not None:
                out.append(Dropped("oversized", self._skipping, f"line over {self.max_line} bytes"))
                self._skipping = None
            else:
                line = bytes(self._buf)
                self._buf.clear()
                message = parse_line(line)
                if message is not None:
                    out.append(message)
        return out


def parse_line(line: bytes) -> Incoming | None:
    """One line to a message; None for a blank line."""
    stripped = line.strip()
    if not stripped:
        return None
    try:
        env = _decoder.decode(stripped)
    except msgspec.DecodeError as exc:
        return Dropped("malformed", len(line), f"{exc}; starts {stripped[:80]!r}")
    if env.method is not None:
        if env.id is None:
            return Notification(env.method, env.params)
        return Request(env.id, env.method, env.params)
    if env.id is not None:
        return Response(env.id, env.result, env.error)
    return Dropped("malformed", len(line), f"neither a request nor a response: {stripped[:80]!r}")


def _line(obj: dict[str, Any]) -> bytes:
    return _encoder.encode(obj) + b"\n"


def encode_request(id: RequestId, method: str, params: Any) -> bytes:
    return _line({"jsonrpc": "2.0", "id": id, "method": method, "params": params})


def encode_notification(method: str, params: Any) -> bytes:
    return _line({"jsonrpc": "2.0", "method": method, "params": params})


def encode_result(id: RequestId, result: Any) -> bytes:
    return _line({"jsonrpc": "2.0", "id": id, "result": result})


def encode_error(id: RequestId | None, code: int, message: str) -> bytes:
    return _line({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
