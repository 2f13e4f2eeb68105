"""Per-topic event fan-out: the replay buffer and the windows subscribed to a topic.

Rules this module guards:

- Every event of a topic passes through `TopicStream.publish` in seq order; it goes into the
  bounded replay buffer and to every subscriber, synchronously. Nothing here awaits, so a
  snapshot taken and a subscription made in the same synchronous step can never miss or
  repeat an event.
- An event is encoded once per encoding (msgpack / JSON), not once per window; subscribers get
  the ready frame bytes.
- A subscriber that cannot take a frame (its bounded queue overflowed) is dropped from the
  stream by itself (it sends its window `Resync`); publishing never waits for anyone.
- `replay_since(seq)` answers exactly the events after `seq` when the buffer still reaches
  back that far, else None (the window must resync).
- A window never gets an event newer than the protocol its client declared when it cannot
  skip it safely (`SINCE_VERSION`: `rows-removed`): it is sent `Resync` instead, live and in
  replays (`too_new_for`), and attaches again for a snapshot that is right.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterator
from time import monotonic_ns
from typing import Any, Protocol

import msgspec

from hostd.shell import trace
from hostd_protocol.client_messages import SINCE_VERSION, ServerMessage, TopicEvent
from hostd_protocol.errors import FrameTooLarge
from hostd_protocol.framing import DEFAULT_MAX_FRAME_SIZE, Codec, Encoding

log = logging.getLogger(__name__)

#: Default number of events each topic keeps for `Attach(since=...)`.
DEFAULT_REPLAY_SIZE = 10_000

#: One codec per encoding for host -> client messages, shared by every connection
#: (msgspec encoders are cheap to share; building decoders is what costs).
SERVER_CODECS: dict[Encoding, Codec[ServerMessage]] = {
    "msgpack": Codec(ServerMessage, "msgpack", DEFAULT_MAX_FRAME_SIZE),
    "json": Codec(ServerMessage, "json", DEFAULT_MAX_FRAME_SIZE),
}


_MSGPACK = msgspec.msgpack.Encoder()
_JSON = msgspec.json.Encoder()


def encoded_size(encoding: Encoding) -> Callable[[Any], int]:
    """How many bytes a value takes in `encoding` (to fit rows into a reply's budget)."""
    encode = _JSON.encode if encoding == "json" else _MSGPACK.encode
    return lambda value: len(encode(value))


class Subscriber(Protocol):
    """A window's side of a subscription (a `Connection`)."""

    @property
    def encoding(self) -> Encoding: ...

    @property
    def protocol_version(self) -> tuple[int, int]:
        """The version its client declared in `hello`."""

    def push_event(self, stream: TopicStream, frame: bytes, *, wake: bool = True) -> None:
        """Queue one encoded event frame; never blocks. May unsubscribe itself. `wake=False`:
        do not write yet, `flush` follows."""

    def flush(self) -> None:
        """Write what `push_event` queued, now if the window can take it; never blocks."""

    def resync(self, stream: TopicStream, reason: str) -> None:
        """Unsubscribe from `stream` and tell the window to attach again."""


class ReplayBuffer:
    """The newest `size` events of a topic, and how far back they reach."""

    def __init__(self, last_seq: int, size: int = DEFAULT_REPLAY_SIZE) -> None:
        self._events: deque[TopicEvent] = deque()
        self._size = size
        #: Every event with seq <= floor is gone (or never existed in this process).
        self.floor = last_seq
        self.last_seq = last_seq

    def __len__(self) -> int:
        return len(self._events)

    def append(self, event: TopicEvent) -> None:
        if event.seq <= self.last_seq:
            # The runtime guarantees strictly increasing seqs; a violation would make windows
            # drop or repeat events silently, so fail loudly instead.
            raise AssertionError(
                f"topic {event.topic_id}: event seq {event.seq} after {self.last_seq}"
            )
        self._events.append(event)
        self.last_seq = event.seq
        if len(self._events) > self._size:
            self.floor = self._events.popleft().seq

    def since(self, seq: int) -> list[TopicEvent] | None:
        """Events with seq > `seq`, or None when some of them are no longer kept."""
        if seq < self.floor or seq > self.last_seq:
            return None
        if seq == self.last_seq:
            return []
        # Events are in seq order; walk from the right, usually only a few are missed.
        out: list[TopicEvent] = []
        for ev in reversed(self._events):
            if ev.seq <= seq:
                break
            out.append(ev)
        out.reverse()
        return out


class _Held:
    """`TopicStream.held()`'s context: counts nesting, flushes when the outermost exits."""

    __slots__ = ("_stream",)

    def __init__(self, stream: TopicStream) -> None:
        self._stream = stream

    def __enter__(self) -> None:
        stream = self._stream
        stream._hold_depth += 1
        if stream._hold_depth == 1:
            stream._held = {}

    def __exit__(self, *exc: object) -> None:
        stream = self._stream
        stream._hold_depth -= 1
        if stream._hold_depth:
            return
        held, stream._held = stream._held, None
        if held:
            for sub in held:
                sub.flush()


class TopicStream:
    """The live side of one topic: replay buffer plus subscribers."""

    def __init__(self, topic_id: str, last_seq: int, replay_size: int = DEFAULT_REPLAY_SIZE):
        self.topic_id = topic_id
        self.buffer = ReplayBuffer(last_seq, replay_size)
        # A dict keeps subscription order, so windows get frames in a stable order.
        self._subscribers: dict[Subscriber, None] = {}
        self.events_published = 0
        #: Inside `held()`: the subscribers that got a frame and are owed a `flush`.
        self._held: dict[Subscriber, None] | None = None
        self._hold = _Held(self)
        self._hold_depth = 0

    @property
    def last_seq(self) -> int:
        return self.buffer.last_seq

    def subscribers(self) -> Iterator[Subscriber]:
        return iter(list(self._subscribers))

    def __len__(self) -> int:
        return len(self._subscribers)

    def subscribe(self, sub: Subscriber) -> None:
        self._subscribers[sub] = None

    def unsubscribe(self, sub: Subscriber) -> None:
        self._subscribers.pop(sub, None)

    def held(self) -> _Held:
        """Publish a batch: inside, frames are queued without waking any window's writer;
        at the end each window that got frames writes them all at once (`flush`), in the
        same step. Used for one pipe read of driver events (`TopicHost`): one write per
        window per batch, and no task switch between the driver's pipe and the sockets.
        Nested, the outer batch flushes. (One reusable context object per stream, not a
        generator-based one: this runs once per pipe read of every streaming topic.)"""
        return self._hold

    def publish(self, event: TopicEvent) -> None:
        """Record and deliver one event. Encodes it at most once per encoding."""
        if trace.ENABLED:
            started = monotonic_ns()
            self._publish(event)
            trace.published(self.topic_id, event.seq, started)
        else:
            self._publish(event)

    def _publish(self, event: TopicEvent) -> None:
        self.buffer.append(event)
        self.events_published += 1
        if not self._subscribers:
            return
        frames: dict[Encoding, bytes | None] = {}
        since = SINCE_VERSION.get(type(event))  # None for nearly every event: one lookup
        for sub in list(self._subscribers):
            if since is not None and sub.protocol_version < since:
                sub.resync(self, _too_old(event, since, sub.protocol_version))
                continue
            enc = sub.encoding
            if enc in frames:
                frame = frames[enc]
            else:
                frame = frames[enc] = self._encode(event, enc)
            if frame is None:
                # Cannot happen within the limits (`payload_bounds`); if it does, the window
                # misses this event knowingly and takes a (bounded) snapshot instead.
                sub.resync(self, f"event seq {event.seq} does not fit in a frame; attach again")
            elif self._held is None:
                sub.push_event(self, frame)
            else:
                sub.push_event(self, frame, wake=False)
                self._held[sub] = None

    def _encode(self, event: TopicEvent, encoding: Encoding) -> bytes | None:
        try:
            return SERVER_CODECS[encoding].encode_frame(event)
        except FrameTooLarge as exc:
            log.error("topic %s: event %s seq %d: %s", self.topic_id,
                      type(event).__name__, event.seq, exc)
            return None

    def replay_since(self, seq: int) -> list[TopicEvent] | None:
        return self.buffer.since(seq)


def too_new_for(sub: Subscriber, events: list[TopicEvent]) -> str:
    """Why `sub` cannot be replayed `events` (one is newer than its client's protocol and
    cannot be skipped), or "" when it can."""
    for event in events:
        since = SINCE_VERSION.get(type(event))
        if since is not None and sub.protocol_version < since:
            return _too_old(event, since, sub.protocol_version)
    return ""


def _too_old(event: TopicEvent, since: tuple[int, int], have: tuple[int, int]) -> str:
    tag = type(event).__struct_config__.tag
    return (
        f"{tag} (seq {event.seq}) needs protocol {since[0]}.{since[1]} and this window's client "
        f"speaks {have[0]}.{have[1]}; attach without since for a fresh snapshot"
    )
