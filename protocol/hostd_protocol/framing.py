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

import re
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

    def __init__(
        self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE, first_frame_max: int | None = None
    ) -> None:
        self.max_frame_size = max_frame_size
        #: A smaller limit for the first frame only (a server's: the first frame must be a
        #: small hello, so a peer cannot make it buffer megabytes before saying who it is).
        self.first_frame_max = first_frame_max
        self._frames_seen = 0
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
            limit = self.max_frame_size
            if self._frames_seen == 0 and self.first_frame_max is not None:
                limit = min(limit, self.first_frame_max)
            if length > limit:
                self._error = FrameTooLarge(
                    f"peer announced a frame of {length} bytes; the maximum is "
                    f"{limit} bytes" + (" for the first one" if limit != self.max_frame_size
                                        else ""),
                    details={"size": length, "max": limit},
                )
                del buf[:]
                if frames:
                    return frames
                raise self._error
            if end - start - HEADER_SIZE < length:
                break
            body_start = start + HEADER_SIZE
            frames.append(bytes(buf[body_start : body_start + length]))
            self._frames_seen += 1
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

    def encode_frame_into(self, msg: Any, buf: bytearray) -> int:
        """Append one whole frame to `buf` (encoded in place: no intermediate bytes object);
        return its size. Raises `FrameTooLarge` with `buf` left as it was."""
        start = len(buf)
        body_start = start + HEADER_SIZE
        try:
            self._encoder.encode_into(msg, buf, body_start)
        except BaseException:
            del buf[start:]
            raise
        size = len(buf) - body_start
        if size > self.max_frame_size:
            del buf[start:]
            raise FrameTooLarge(
                f"message of {size} bytes exceeds the maximum frame size of "
                f"{self.max_frame_size} bytes",
                details={"size": size, "max": self.max_frame_size},
            )
        HEADER.pack_into(buf, start, size)
        return HEADER_SIZE + size

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
        except RecursionError:
            # Nesting deeper than the decoder can follow (it shares the interpreter's stack
            # limit): this one message is refused, the frame boundary is intact.
            raise InvalidMessage(
                "invalid message: it nests maps or arrays too deeply",
                details={"id": self._peek_id(body)},
            ) from None

    def _peek_id(self, body: bytes) -> int | None:
        try:
            peeked: _IdOnly = self._id_decoder.decode(body)
        except RecursionError:
            return _scan_id(body, self.encoding)
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


_ID_JSON = re.compile(rb'"id"\s*:\s*(-?\d{1,18})')


def _scan_id(body: bytes, encoding: str) -> int | None:
    """The top-level integer `id` of a message too deeply nested to decode, found without
    recursion (so the peer still gets its error reply for the right request)."""
    if encoding == "json":
        m = _ID_JSON.search(body)  # the first one: clients write `id` before free-form fields
        return int(m.group(1)) if m else None
    try:
        return _scan_msgpack_id(body)
    except (IndexError, struct.error, ValueError):
        return None


def _scan_msgpack_id(b: bytes) -> int | None:
    pos = 0

    def header(p: int) -> tuple[str, int, int]:
        """(kind, count or length, position after the header) of the item at `p`."""
        t = b[p]
        if t <= 0x7F or t >= 0xE0:
            return "int", t if t <= 0x7F else t - 0x100, p + 1
        if 0x80 <= t <= 0x8F:
            return "map", t & 0x0F, p + 1
        if 0x90 <= t <= 0x9F:
            return "arr", t & 0x0F, p + 1
        if 0xA0 <= t <= 0xBF:
            return "bytes", t & 0x1F, p + 1
        fixed = {0xC0: 0, 0xC2: 0, 0xC3: 0, 0xCA: 4, 0xCB: 8}
        if t in fixed:
            return "bytes", fixed[t], p + 1
        ints = {0xCC: ">B", 0xCD: ">H", 0xCE: ">I", 0xCF: ">Q", 0xD0: ">b", 0xD1: ">h",
                0xD2: ">i", 0xD3: ">q"}
        if t in ints:
            fmt = ints[t]
            n = struct.calcsize(fmt)
            return "int", struct.unpack_from(fmt, b, p + 1)[0], p + 1 + n
        lens = {0xC4: ">B", 0xC5: ">H", 0xC6: ">I", 0xD9: ">B", 0xDA: ">H", 0xDB: ">I"}
        if t in lens:
            fmt = lens[t]
            n = struct.calcsize(fmt)
            return "bytes", struct.unpack_from(fmt, b, p + 1)[0], p + 1 + n
        if t in (0xDC, 0xDD, 0xDE, 0xDF):
            fmt = ">H" if t in (0xDC, 0xDE) else ">I"
            n = struct.calcsize(fmt)
            kind = "arr" if t in (0xDC, 0xDD) else "map"
            return kind, struct.unpack_from(fmt, b, p + 1)[0], p + 1 + n
        ext = {0xD4: 2, 0xD5: 3, 0xD6: 5, 0xD7: 9, 0xD8: 17}
        if t in ext:
            return "bytes", ext[t], p + 1
        if t in (0xC7, 0xC8, 0xC9):
            fmt = {0xC7: ">B", 0xC8: ">H", 0xC9: ">I"}[t]
            n = struct.calcsize(fmt)
            return "bytes", struct.unpack_from(fmt, b, p + 1)[0] + 1, p + 1 + n
        raise ValueError(f"bad msgpack byte {t:#x}")

    def skip(p: int) -> int:
        todo = 1  # items still to skip, iteratively
        while todo:
            kind, n, p = header(p)
            todo -= 1
            if kind == "bytes":
                p += n
            elif kind == "arr":
                todo += n
            elif kind == "map":
                todo += 2 * n
        return p

    kind, pairs, pos = header(pos)
    if kind != "map":
        return None
    for _ in range(pairs):
        kkind, klen, pos = header(pos)
        key = b[pos : pos + klen] if kkind == "bytes" else None
        pos = pos + klen if kkind == "bytes" else pos
        if key == b"id":
            vkind, value, _ = header(pos)
            return value if vkind == "int" else None
        pos = skip(pos)
    return None
