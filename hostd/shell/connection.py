"""One client connection: a reader task feeding the frame decoder, a writer task draining a
bounded outbound queue, and the one place where errors become `ErrorReply`s.

Rules this module guards:

- The first frame picks the encoding and must be `Hello`; anything else gets
  `handshake_error` and the connection is closed. A protocol major mismatch gets
  `version_mismatch` and is closed.
- Framing errors (garbage, oversized length, truncated stream) get an `ErrorReply` with no id
  and the connection is closed: the byte stream can no longer be trusted. A frame that decodes
  but does not fit the schema (unknown request, wrong types) gets a typed `ErrorReply` naming
  its request id, and the connection stays; one without a request id is closed after its
  error, like a framing error (`hostd.shell.client_frames`). So an `ErrorReply` without an
  id is always the connection's last frame (a second hello too).
- Requests of one connection are served one after the other, in the order sent.
- Writing never blocks the daemon: `send_message` / `push_event` only queue bytes. The writer
  task (or `flush`, for a batch the fan-out published) joins everything queued into one
  write (one syscall for many frames); only a full socket leaves the rest to the writer.
- The writer task runs only while there is something for it to write: it is started when
  bytes are queued for it and ends once the queue is empty, so a window whose frames all go
  out through `flush` (a streaming window that keeps up) has one task, its reader, not two.
  (Every long-lived task is ~14 objects that each full GC pass walks: at 100 topics x 4
  windows the idle writers were 400 of the daemon's ~1,500 tasks.)
- The queue is bounded. When topic events overflow it, the window is behind for good: its
  queued events are dropped, it is unsubscribed from every topic and sent `Resync` per topic
  (it re-attaches for a fresh snapshot). Replies are never dropped; a client that lets
  replies pile up past a hard limit is disconnected. Either way no other window and no driver
  waits for it.
"""

from __future__ import annotations

import logging
import math
import os
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import msgspec
import trio

from hostd import __version__
from hostd.core.payload_bounds import check_request
from hostd.shell import trace
from hostd.shell.client_frames import client_codec, refusal
from hostd.shell.fanout import SERVER_CODECS, TopicStream
from hostd.shell.partial_frames import PartialFrames
from hostd_protocol.client_messages import (
    ClientMessage,
    ErrorReply,
    Hello,
    Reply,
    Result,
    Resync,
    SendMessage,
    TopicEvent,
    Welcome,
)
from hostd_protocol.common import PROTOCOL_VERSION
from hostd_protocol.errors import (
    FrameTooLarge,
    HandshakeError,
    HostdError,
    InternalError,
    InvalidMessage,
    PayloadTooLarge,
    ProtocolError,
    TooManyConnections,
    TruncatedFrame,
    VersionMismatch,
)
from hostd_protocol.framing import (
    DEFAULT_MAX_FRAME_SIZE,
    Codec,
    Encoding,
    FrameDecoder,
    detect_encoding,
)

if TYPE_CHECKING:
    from hostd.shell.server import ConnectionSlot

log = logging.getLogger(__name__)

#: Bytes of queued topic events a window may lag behind before it is resynced.
DEFAULT_MAX_QUEUE_BYTES = 4 * 1024 * 1024
#: Replies/control frames beyond this many bytes unread: the client is disconnected.
MIN_HARD_QUEUE_BYTES = 16 * 1024 * 1024
HARD_QUEUE_FACTOR = 4
RECEIVE_SIZE = 64 * 1024
#: How long a closing connection may take to deliver its last frames (e.g. the error reply).
CLOSE_FLUSH_TIMEOUT = 2.0
#: A new connection must send `hello` within this (seconds); a silent one holds a descriptor.
HELLO_TIMEOUT = 10.0
#: A frame, once its first byte arrived, must be complete within this (seconds): a peer that
#: starts an 8 MiB frame and stalls would hold the memory forever.
FRAME_TIMEOUT = 60.0
#: The first frame (which must be `hello`) is at most this big: a connection cannot make the
#: daemon buffer megabytes before it even said who it is. A hello and a big request in one
#: write are fine (only the first frame has this limit).
HELLO_MAX_FRAME = 64 * 1024

def error_reply(exc: BaseException, request_id: int | None) -> ErrorReply:
    """The one place an exception becomes a wire error. Unknown exceptions are bugs: logged
    with their traceback and sent as `internal_error`, never as their text."""
    err: HostdError
    if isinstance(exc, HostdError):
        err = exc
    else:
        log.error("internal error while serving request %s", request_id, exc_info=exc)
        err = InternalError(f"internal error ({type(exc).__name__}); see the daemon log")
    details = {k: v for k, v in err.details.items() if k != "id"}
    try:
        msgspec.msgpack.encode(details)
    except (TypeError, msgspec.EncodeError):
        details = {k: repr(v) for k, v in details.items()}
    return ErrorReply(code=err.code, message=err.message, id=request_id, details=details)


class RequestHandler(Protocol):
    """What a connection serves requests with (the daemon)."""

    async def handle_request(self, conn: Connection, msg: Any) -> Result | None:
        """Serve one request. Return its result, or None when the handler replied itself
        (attach: the reply must precede the replayed events). Raise `HostdError`s."""

    def connection_closed(self, conn: Connection) -> None: ...


@dataclass(frozen=True)
class ConnectionStatistics:
    frames_sent: int
    bytes_sent: int
    writes: int
    queued_bytes: int
    resyncs: int
    requests: int


class Connection:
    """A window's connection. Create, then `await run()`; it returns when the peer is gone."""

    def __init__(
        self,
        stream: trio.abc.Stream,
        handler: RequestHandler,
        *,
        connection_id: str,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        max_queue_bytes: int = DEFAULT_MAX_QUEUE_BYTES,
        peer_uid: int | None = None,
        hello_timeout: float = HELLO_TIMEOUT,
        frame_timeout: float = FRAME_TIMEOUT,
        partial_frames: PartialFrames | None = None,
        slot: ConnectionSlot | None = None,
    ) -> None:
        self.id = connection_id
        self.peer_uid = peer_uid
        self._stream = stream
        # A real socket is written directly when it has room (see `_try_write`).
        self._fd = stream.socket.fileno() if isinstance(stream, trio.SocketStream) else -1
        self._handler = handler
        self.max_frame_size = max_frame_size
        self.max_queue_bytes = max_queue_bytes
        self._hard_limit = max(MIN_HARD_QUEUE_BYTES, HARD_QUEUE_FACTOR * max_queue_bytes)
        self._frames = FrameDecoder(max_frame_size, first_frame_max=HELLO_MAX_FRAME)
        self._partial_frames = partial_frames or PartialFrames()
        self._hello_timeout = hello_timeout
        self._frame_timeout = frame_timeout
        #: trio time the current partial frame started (inf: none pending).
        self._partial_since = math.inf
        self._codec: Codec[ClientMessage] | None = None
        #: Picked by the first frame (`hello`); a plain attribute: read per window per event.
        self.encoding: Encoding = "msgpack"
        self.client_name = ""
        self.welcomed = False
        #: The protocol version its client declared in `hello` (what events it is sent).
        self.protocol_version: tuple[int, int] = (0, 0)
        #: Topic streams this window is subscribed to.
        self.attached: dict[str, TopicStream] = {}
        # Outbound queue: (frame, is_event). Events may be dropped on overflow, replies never.
        self._queue: deque[tuple[bytes, bool]] = deque()
        #: (topic, seq) of the queued event frames, kept only while `trace.ENABLED`.
        self._trace_keys: list[tuple[str, int]] = []
        self._event_bytes = 0
        self._queued_bytes = 0
        self._closing = False
        self._sending = False  # the writer is in `send_all`: `flush` leaves the queue to it
        #: The writer task is started (and has not ended): it writes whatever is queued.
        self._writing = False
        #: Set once nothing more will be written: closing, and the writer (if any) ended.
        self._writer_done = trio.Event()
        self._nursery: trio.Nursery | None = None
        self._cancel: trio.CancelScope | None = None
        self._reader_scope = trio.CancelScope()
        self._frames_sent = 0
        self._bytes_sent = 0
        self._writes = 0
        self._resyncs = 0
        self._requests = 0
        #: Its place in the server's slots: told when it said hello, and how to evict it.
        self._slot = slot
        if slot is not None:
            slot.on_evict = self._fatal

    def __repr__(self) -> str:
        return f"<Connection {self.id} {self.client_name!r}>"

    def statistics(self) -> ConnectionStatistics:
        return ConnectionStatistics(
            self._frames_sent,
            self._bytes_sent,
            self._writes,
            self._queued_bytes,
            self._resyncs,
            self._requests,
        )

    # --- outbound -------------------------------------------------------------------------

    def send_message(self, msg: Any) -> bool:
        """Queue a reply or control message (never dropped). False when it was not queued:
        the connection is going, or `msg` does not fit in a frame (then, for a reply, the
        client gets `payload_too_large` for its request instead, and everything else of the
        connection, its subscriptions included, goes on)."""
        if self._closing and self._writer_done.is_set():
            return False
        if self._queued_bytes > self._hard_limit:
            # Checked before adding, so one big reply (a snapshot) on a drained queue is fine;
            # a client that keeps asking and never reads is not.
            log.warning("%r: %d bytes of replies unread; disconnecting", self, self._queued_bytes)
            self.abort()
            return False
        try:
            frame = SERVER_CODECS[self.encoding].encode_frame(msg)
        except (FrameTooLarge, msgspec.EncodeError, TypeError) as exc:
            request_id = getattr(msg, "id", None)
            log.error("%r: cannot send %s (request %s): %s", self, type(msg).__name__,
                      request_id, exc)
            size = exc.details.get("size") if isinstance(exc, FrameTooLarge) else None
            err = PayloadTooLarge(
                f"the reply does not fit in one frame of {self.max_frame_size} bytes: {exc}",
                details={"size": size, "max": self.max_frame_size},
            )
            frame = SERVER_CODECS[self.encoding].encode_frame(
                error_reply(err, request_id if isinstance(request_id, int) else None)
            )
            self._enqueue(frame, is_event=False)
            return False
        self._enqueue(frame, is_event=False)
        return True

    def reply(self, request_id: int, result: Result) -> bool:
        """Queue the reply; False if it did not go out (see `send_message`)."""
        return self.send_message(Reply(id=request_id, result=result))

    def resync(self, stream: TopicStream, reason: str) -> None:
        """Unsubscribe from one topic and tell the window to take a fresh snapshot."""
        stream.unsubscribe(self)
        self.attached.pop(stream.topic_id, None)
        self._resyncs += 1
        self.send_message(Resync(topic_id=stream.topic_id, seq=stream.last_seq, reason=reason))

    def push_event(self, stream: TopicStream, frame: bytes, *, wake: bool = True) -> None:
        """A topic event frame in this connection's encoding (`wake=False`: `flush` follows)."""
        # Runs once per window for every event of a streaming topic: `_enqueue` written out.
        size = len(frame)
        # An event bigger than the whole budget still goes out on an empty queue: the limit
        # bounds how far a window lags, not how big one event may be.
        if self._event_bytes and self._event_bytes + size > self.max_queue_bytes:
            self._fell_behind()
            return
        if trace.ENABLED:
            # publish appended the event to the buffer first: its seq is the stream's last.
            self._trace_keys.append((stream.topic_id, stream.last_seq))
        self._queue.append((frame, True))
        self._queued_bytes += size
        self._event_bytes += size
        if wake:
            self._wake_writer()

    def push_events(self, events: list[TopicEvent]) -> bool:
        """Queue replayed events (encoded here: replays are rare, one window at a time).

        All or nothing: False, with nothing queued, when they do not fit in the queue; a
        snapshot is then the cheaper way to catch up.
        """
        codec = SERVER_CODECS[self.encoding]
        try:
            frames = [codec.encode_frame(ev) for ev in events]
        except FrameTooLarge:
            return False
        if self._event_bytes + sum(len(f) for f in frames) > self.max_queue_bytes:
            return False
        for frame in frames:
            self._enqueue(frame, is_event=True)
        return True

    def _enqueue(self, frame: bytes, *, is_event: bool, wake: bool = True) -> None:
        self._queue.append((frame, is_event))
        size = len(frame)
        self._queued_bytes += size
        if is_event:
            self._event_bytes += size
        if wake:
            self._wake_writer()

    def _wake_writer(self) -> None:
        """Have the writer write what is queued: start it, unless it runs already (it takes
        everything queued before it ends) or the connection is not served yet (`run` starts
        it) or gone."""
        nursery = self._nursery
        if self._writing or nursery is None or self._writer_done.is_set():
            return
        if nursery.cancel_scope.cancel_called:
            return  # aborted: nothing more is sent (a new task would write before it checks)
        self._writing = True
        nursery.start_soon(self._writer)

    def flush(self) -> None:
        """Write everything queued in one syscall if the socket takes it now; the rest goes
        to the writer task, in order. Called by the fan-out once per batch (`TopicStream.held`)
        so frames leave in the pipe read's own scheduler pass, not one pass later. Never
        blocks or raises: a broken socket aborts the connection, as in the writer."""
        queue = self._queue
        if queue and not (self._sending or self._closing or self._fd < 0):
            data, traced = self._take()
            try:  # `_try_write` written out: this runs per window for every read of a stream
                sent = os.write(self._fd, data)
            except BlockingIOError:
                sent = 0
            except OSError:  # EPIPE, ECONNRESET: the peer went away
                self.abort()
                return
            if sent == len(data):
                if traced:
                    trace.written(traced, id(self))
                return
            queue.appendleft((data[sent:], False))  # first, as a reply: never dropped
            self._queued_bytes += len(data) - sent
            self._frames_sent -= 1  # the writer counts the rest again
            self._trace_keys[:0] = traced
        if queue:
            self._wake_writer()

    def _take(self) -> tuple[bytes, Sequence[tuple[str, int]]]:
        # Runs once per window per pipe read of a streaming topic, usually for one frame:
        # no join, no new queue, no new trace list when there is nothing to trace.
        items = self._queue
        count = len(items)
        data = items[0][0] if count == 1 else b"".join([f for f, _ in items])
        items.clear()
        traced: Sequence[tuple[str, int]] = ()
        if self._trace_keys:
            traced, self._trace_keys = self._trace_keys, []
        self._queued_bytes = 0
        self._event_bytes = 0
        self._frames_sent += count
        self._bytes_sent += len(data)
        self._writes += 1
        return data, traced

    def _fell_behind(self) -> None:
        """The window cannot keep up: drop its queued events, unsubscribe, tell it to resync."""
        kept = deque(item for item in self._queue if not item[1])
        self._queue = kept
        self._trace_keys = []
        self._queued_bytes = sum(len(f) for f, _ in kept)
        self._event_bytes = 0
        self._resyncs += 1
        streams = list(self.attached.values())
        self.attached.clear()
        log.info("%r fell behind; resyncing %d topic(s)", self, len(streams))
        for stream in streams:
            stream.unsubscribe(self)
            self.send_message(
                Resync(
                    topic_id=stream.topic_id,
                    seq=stream.last_seq,
                    reason="this window fell too far behind; attach again for a fresh snapshot",
                )
            )

    def abort(self) -> None:
        """Drop the connection now (nothing more is sent)."""
        self._closing = True
        if self._cancel is not None:
            self._cancel.cancel()

    def close_after_flush(self) -> None:
        """Stop reading; deliver what is queued (bounded in time), then close."""
        self._closing = True
        if self._queue:
            self._wake_writer()
        self._reader_scope.cancel()

    def _try_write(self, data: bytes) -> int:
        """Write what the socket takes right now: one syscall and no trip through trio's
        scheduler (`send_all` takes two), the common case of a window that keeps up.
        Returns the bytes written; the rest goes through `send_all`, which waits."""
        if self._fd < 0:
            return 0
        try:
            return os.write(self._fd, data)
        except BlockingIOError:
            return 0
        except OSError as exc:  # EPIPE, ECONNRESET: the peer went away
            raise trio.BrokenResourceError(f"socket connection broken: {exc}") from exc

    async def _writer(self) -> None:
        """Write until the queue is empty (frames queued meanwhile included), then end."""
        try:
            while self._queue:
                data, traced = self._take()
                sent = self._try_write(data)
                if sent < len(data):
                    self._sending = True
                    try:
                        await self._stream.send_all(memoryview(data)[sent:] if sent else data)
                    finally:
                        self._sending = False
                if traced:
                    trace.written(traced, id(self))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            log.debug("%r: peer went away while writing", self)
            self.abort()
        finally:
            self._writing = False
            if self._closing:
                self._writer_done.set()

    # --- inbound --------------------------------------------------------------------------

    async def run(self) -> None:
        """Serve the connection until the peer leaves, a fatal error, or `close_after_flush`."""
        try:
            async with trio.open_nursery() as nursery:
                self._cancel = nursery.cancel_scope
                self._nursery = nursery
                if self._queue:
                    self._wake_writer()  # queued before the connection was served
                with self._reader_scope:
                    await self._reader()
                self.close_after_flush()
                if self._writing:
                    with trio.move_on_after(CLOSE_FLUSH_TIMEOUT):
                        await self._writer_done.wait()
                self._writer_done.set()
                nursery.cancel_scope.cancel()
        finally:
            self._closing = True
            self._nursery = None
            self._writer_done.set()
            self._partial_frames.hold(self, 0)
            self._handler.connection_closed(self)
            for stream in self.attached.values():
                stream.unsubscribe(self)
            self.attached.clear()
            await trio.aclose_forcefully(self._stream)

    async def _reader(self) -> None:
        opened = trio.current_time()
        while not self._closing:
            if not self.welcomed:
                deadline = opened + self._hello_timeout
            else:
                deadline = self._partial_since + self._frame_timeout
            try:
                with trio.move_on_at(deadline) as waiting:
                    data = await self._stream.receive_some(RECEIVE_SIZE)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return
            if waiting.cancelled_caught:
                self._fatal(self._timed_out())
                return
            if not data:
                try:
                    self._frames.close()
                except ProtocolError as exc:
                    log.info("%r: %s", self, exc)
                return
            try:
                bodies = self._frames.feed(data)
            except ProtocolError as exc:
                self._fatal(exc)
                return
            for body in bodies:
                if not await self._handle_body(body):
                    return
            try:
                self._frames.feed(b"")  # a framing error behind those frames surfaces now
            except ProtocolError as exc:
                self._fatal(exc)
                return
            if not self._frames.buffered:
                self._partial_since = math.inf
            elif self._partial_since == math.inf:
                self._partial_since = trio.current_time()
            if not self._partial_frames.hold(self, self._frames.buffered):
                self._fatal(TooManyConnections(
                    f"hostd holds {self._partial_frames.total} bytes of incomplete frames from "
                    f"its connections, over its budget of {self._partial_frames.limit}; send "
                    "again shortly",
                    details={"max": self._partial_frames.limit},
                ))
                return

    def _timed_out(self) -> HostdError:
        if not self.welcomed:
            return HandshakeError(f"no hello within {self._hello_timeout:g}s; closing")
        return TruncatedFrame(
            f"a frame started {self._frame_timeout:g}s ago and is still incomplete; closing"
        )

    def _fatal(self, exc: HostdError, request_id: int | None = None) -> None:
        log.info("%r: closing after protocol error: %s", self, exc)
        self.send_message(error_reply(exc, request_id))
        self.close_after_flush()

    async def _handle_body(self, body: bytes) -> bool:
        """Serve one frame. False: the connection must close."""
        if self._codec is None:
            self.encoding = detect_encoding(body)
            self._codec = client_codec(self.encoding, self.max_frame_size)
        try:
            msg = self._codec.decode(body)
        except InvalidMessage as exc:
            if not self.welcomed:
                self._fatal(HandshakeError(f"expected hello as the first message: {exc.message}"))
                return False
            refused = refusal(body, exc, self.encoding)
            if refused.close:
                self._fatal(refused.error)
                return False
            self.send_message(error_reply(refused.error, refused.request_id))
            return True
        except ProtocolError as exc:  # MalformedFrame
            self._fatal(exc)
            return False
        if not self.welcomed:
            return self._handshake(msg)
        if isinstance(msg, Hello):
            # An error without a request id ends the connection, whatever its cause.
            self._fatal(HandshakeError("hello was already received; closing the connection"))
            return False
        if trace.ENABLED and isinstance(msg, SendMessage):
            trace.send_in(msg.topic_id)
        await self._serve(msg)
        return not self._closing

    def _handshake(self, msg: Any) -> bool:
        if not isinstance(msg, Hello):
            tag = type(msg).__struct_config__.tag
            self._fatal(
                HandshakeError(f"the first message must be hello, not {tag!r}"),
                getattr(msg, "id", None),
            )
            return False
        major = msg.protocol_version[0]
        if major != PROTOCOL_VERSION[0]:
            self._fatal(
                VersionMismatch(
                    f"client speaks protocol {msg.protocol_version[0]}.{msg.protocol_version[1]}"
                    f", this daemon {PROTOCOL_VERSION[0]}.{PROTOCOL_VERSION[1]}; upgrade the "
                    "older side",
                    details={"server": list(PROTOCOL_VERSION)},
                )
            )
            return False
        self.welcomed = True
        self.protocol_version = (major, msg.protocol_version[1])
        if self._slot is not None:
            self._slot.welcomed()
        self.client_name = msg.client
        self.send_message(
            Welcome(
                protocol_version=PROTOCOL_VERSION,
                server_version=__version__,
                max_frame_size=self.max_frame_size,
                connection_id=self.id,
            )
        )
        return True

    async def _serve(self, msg: Any) -> None:
        request_id: int = msg.id
        self._requests += 1
        try:
            check_request(msg)  # depth and size of every field, before any handler sees it
            result = await self._handler.handle_request(self, msg)
        except Exception as exc:
            self.send_message(error_reply(exc, request_id))
            return
        if result is not None:
            self.reply(request_id, result)

