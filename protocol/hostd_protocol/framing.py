"""Frames and encodings, sans-IO.

Rules this module guards:

- A frame is a 4-byte big-endian unsigned length, then exactly that many body bytes.
- A body is one message, msgpack or JSON (one encoding per connection).
- A body larger than `max_frame_size` is refused on both sides: the encoder raises
  `FrameTooLarge` before anything is written; the decoder raises as soon as it reads the
  header, before buffering the body, so a hostile length cannot make us allocate.
- After a framing error the decoder is in an error state it never leaves: the byte stream
  can no longer be trusted. Frames completed before the error in the same `feed` are
  returned first (they arrived intact: a valid hello still picks the encoding the error is
  answered in); the error is raised by the next `feed` (`feed(b"")` checks) or `close`.
  Schema errors (`InvalidMessage`) are per message and leave the
  decoder usable.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import Any, Generic, Literal, TypeVar

import msgspec

from hostd_protocol.errors import FrameTooLarge, InvalidMessage, MalformedFrame, TruncatedFrame

#: Default hard limit on one frame body: big enough for a large tool result, small enough that
#: a hostile header cannot make the daemon allocate gigabytes.
DEFAULT_MAX_FRAME_SIZE = 8 * 1024 * 1024

HEADER = struct.Struct(">I")
HEADER_SIZE = HEADER.size

Encoding = Literal["msgpack", "json"]

T = TypeVar("T")


def encode_frame(body: bytes, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> bytes:
    """Prefix `body` with its length. Raises `FrameTooLarge` over the limit."""
    if len(body) > max_frame_size:
        raise FrameTooLarge(
            f"frame body of {len(body)} bytes exceeds the maximum of {max_frame_size} bytes",
            details={"size": len(body), "max": max_frame_size},
        )
    return HEADER.pack(len(body)) + body


class FrameDecoder:
    """Incremental frame splitter: feed any split of bytes, get whole frame bodies back.

    >>> d = FrameDecoder()
    >>> d.feed(encode_frame(b"ab") + encode_frame(b"c")[:2])
    [b'ab']
    """

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self.max_frame_size = max_frame_size
        self._buf = bytearray()
        self._error: Exception | None = None

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as a frame."""
        return len(self._buf)

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """Add received bytes; return every frame body now complete, in order."""
        if self._error is not None:
            raise self._error
        self._buf += data
        frames: list[bytes] = []
        buf = self._buf
        start = 0
        end = len(buf)
        while end - start >= HEADER_SIZE:
            (length,) = HEADER.unpack_from(buf, start)
            if length > self.max_frame_size:
                self._error = FrameTooLarge(
                    f"peer announced a frame of {length} bytes; the maximum is "
                    f"{self.max_frame_size} bytes",
                    details={"size": length, "max": self.max_frame_size},
                )
                del buf[:]
                if frames:
                    return frames
                raise self._error
            if end - start - HEADER_SIZE < length:
                break
            body_start = start + HEADER_SIZE
            frames.append(bytes(buf[body_start : body_start + length]))
            start = body_start + length
        if start:
            del buf[:start]
        return frames

    def close(self) -> None:
        """The peer finished sending. Raises `TruncatedFrame` if a partial frame is buffered."""
        if self._error is None and self._buf:
            self._error = TruncatedFrame(
                f"stream ended inside a frame ({len(self._buf)} bytes of an unfinished frame)",
                details={"buffered": len(self._buf)},
            )
        if self._error is not None:
            raise self._error


class _IdOnly(msgspec.Struct):
    id: int | None = None


class Codec(Generic[T]):
    """Encodes messages of a tagged union to bodies and frames, and decodes them back.

    Built once per (union, encoding); `Decoder`s are reused because building one costs far
    more than decoding a message.
    """

    def __init__(
        self,
        union: Any,
        encoding: Encoding = "msgpack",
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
    ) -> None:
        self.encoding: Encoding = encoding
        self.max_frame_size = max_frame_size
        self._union = union
        if encoding == "msgpack":
            self._encoder: Any = msgspec.msgpack.Encoder()
            self._decoder: Any = msgspec.msgpack.Decoder(union)
            self._raw_decoder: Any = msgspec.msgpack.Decoder()
            self._id_decoder: Any = msgspec.msgpack.Decoder(_IdOnly)
        elif encoding == "json":
            self._encoder = msgspec.json.Encoder()
            self._decoder = msgspec.json.Decoder(union)
            self._raw_decoder = msgspec.json.Decoder()
            self._id_decoder = msgspec.json.Decoder(_IdOnly)
        else:  # pragma: no cover - Literal guards this for typed callers
            raise ValueError(f"unknown encoding {encoding!r}")

    def encode(self, msg: Any) -> bytes:
        """One message to a body (no length prefix)."""
        result: bytes = self._encoder.encode(msg)
        return result

    def encode_frame(self, msg: Any) -> bytes:
        """One message to a whole frame (length prefix + body)."""
        buf = bytearray(HEADER_SIZE)
        self._encoder.encode_into(msg, buf, HEADER_SIZE)
        size = len(buf) - HEADER_SIZE
        if size > self.max_frame_size:
            raise FrameTooLarge(
                f"message of {size} bytes exceeds the maximum frame size of "
                f"{self.max_frame_size} bytes",
                details={"size": size, "max": self.max_frame_size},
            )
        HEADER.pack_into(buf, 0, size)
        return bytes(buf)

    def encode_frames(self, msgs: Iterable[Any]) -> bytes:
        """Several messages as consecutive frames in one buffer (one write for all)."""
        return b"".join(self.encode_frame(m) for m in msgs)

    def decode(self, body: bytes) -> T:
        """A body to a message.

        Raises `MalformedFrame` when the body is not msgpack/JSON at all (close the
        connection), `InvalidMessage` when it is but does not fit the schema (reply with an
        error naming the request id, from `details["id"]`, and go on).
        """
        try:
            result: T = self._decoder.decode(body)
            return result
        except msgspec.ValidationError as exc:
            raise InvalidMessage(
                f"invalid message: {exc}", details={"id": self._peek_id(body)}
            ) from None
        except msgspec.DecodeError as exc:
            # A body that is well-formed but only fails validation is a ValidationError;
            # DecodeError means the bytes themselves are not the negotiated encoding.
            try:
                self._raw_decoder.decode(body)
            except msgspec.DecodeError:
                raise MalformedFrame(f"frame body is not valid {self.encoding}: {exc}") from None
            raise InvalidMessage(
                f"invalid message: {exc}", details={"id": self._peek_id(body)}
            ) from None

    def _peek_id(self, body: bytes) -> int | None:
        try:
            peeked: _IdOnly = self._id_decoder.decode(body)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return None
        return peeked.id


def detect_encoding(first_body: bytes) -> Encoding:
    """The encoding a peer chose, from its first frame body: JSON objects start with `{`
    (after optional whitespace); a msgpack map never starts with that byte."""
    stripped = first_body.lstrip(b" \t\r\n")
    return "json" if stripped.startswith(b"{") else "msgpack"


class MessageReader(Generic[T]):
    """Frame decoder + codec: feed bytes, get messages or typed errors, in order.

    `feed` returns a list whose items are either decoded messages or `InvalidMessage`
    exceptions (per-message schema errors the caller answers and moves past). Framing errors
    are raised.
    """

    def __init__(self, codec: Codec[T]) -> None:
        self.codec = codec
        self.frames = FrameDecoder(codec.max_frame_size)

    def feed(self, data: bytes | bytearray | memoryview) -> list[T | InvalidMessage]:
        out: list[T | InvalidMessage] = []
        for body in self.frames.feed(data):
            try:
                out.append(self.codec.decode(body))
            except InvalidMessage as exc:
                out.append(exc)
        return out

    def close(self) -> None:
        self.frames.close()
