"""What a client's frame body is: a message, or the error to answer it with.

The decoding half of `hostd.shell.connection` (one concept: reading a client's bodies), kept
apart so the connection module holds its I/O. Rules it guards (DESIGN.md invariant 11):

- One decoder per (encoding, frame limit) per process: building one is expensive.
- A body that is not msgpack/JSON at all is a framing error (`MalformedFrame`): the stream
  cannot be trusted and the connection closes.
- A body that decodes but fits no message is refused with a typed error: an unknown tag is
  `unknown_request`, anything else `invalid_message`. With a request id the error names it
  and the connection goes on; without one nothing could be answered by it (the client cannot
  tell which request failed), so the error goes out and the connection closes, as for a
  framing error.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

from hostd_protocol.client_messages import ClientMessage
from hostd_protocol.errors import HostdError, InvalidMessage, UnknownRequest
from hostd_protocol.framing import Codec, Encoding

__all__ = ["CLIENT_TAGS", "Refusal", "client_codec", "refusal"]

_CLIENT_CODECS: dict[tuple[Encoding, int], Codec[ClientMessage]] = {}


def client_codec(encoding: Encoding, max_frame_size: int) -> Codec[ClientMessage]:
    """Decoders are expensive to build: one per (encoding, limit) per process."""
    key = (encoding, max_frame_size)
    codec = _CLIENT_CODECS.get(key)
    if codec is None:
        codec = _CLIENT_CODECS[key] = Codec(ClientMessage, encoding, max_frame_size)
    return codec


def _client_tags() -> frozenset[str]:
    return frozenset(cls.__struct_config__.tag for cls in ClientMessage.__args__)


CLIENT_TAGS = _client_tags()
_raw_msgpack = msgspec.msgpack.Decoder()
_raw_json = msgspec.json.Decoder()


@dataclass(frozen=True)
class Refusal:
    """The answer to a body that decoded but fits no message."""

    error: HostdError
    #: The request id the error names (None: the body had none).
    request_id: int | None
    #: The connection must close after the error (the body named no request).
    close: bool


def refusal(body: bytes, exc: InvalidMessage, encoding: Encoding) -> Refusal:
    """How to answer `body`, which `client_codec(...).decode` refused with `exc`."""
    rid = exc.details.get("id")
    request_id = rid if isinstance(rid, int) and not isinstance(rid, bool) else None
    error = _refine(body, exc, encoding)
    if request_id is not None:
        return Refusal(error, request_id, close=False)
    closing = type(error)(
        f"{error.message}; it names no request id, so nothing can be answered by it: the "
        "connection is closed (every request needs an integer id)",
        details=error.details,
    )
    return Refusal(closing, None, close=True)


def _refine(body: bytes, exc: InvalidMessage, encoding: Encoding) -> HostdError:
    """An unknown tag is an unknown request, not just a malformed one."""
    try:
        raw = (_raw_json if encoding == "json" else _raw_msgpack).decode(body)
    except (msgspec.DecodeError, RecursionError):
        return exc
    if isinstance(raw, dict):
        tag = raw.get("type")
        if isinstance(tag, str) and tag not in CLIENT_TAGS:
            return UnknownRequest(f"unknown request type {tag!r}", details={"type": tag})
    return exc
