"""The bench's windows: one separate process hosting many window connections.

    python -m hostd_dev.bench.windows '<json config>'

Every window is a real socket connection to the daemon (hello, attach, then read). The
process reports on stdout, one JSON line per line:

- `{"ready": true}` once every window is attached;
- one `{"round": k, ...}` line each time every window has seen its k-th `turn-ended`
  (per-window characters, first/last receive times, a sha256 of the text, seq gaps,
  resyncs, and latency percentiles when the chunks carry driver timestamps);
- then it exits after `rounds` rounds.

Decoding is deliberately lean (a partial struct that ignores what a window need not read) and
every socket is read by one `selectors` loop (one `recv` and the decode per read, no task
switch), so the windows cost as little CPU as a real UI's socket reader would, and hosting 32
or 400 of them in one process does not make the client the bottleneck it measures.
"""

from __future__ import annotations

import hashlib
import json
import select
import socket
import struct
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import msgspec

from hostd_dev.bench.stats import percentile
from hostd_protocol.client_messages import Attach, Hello
from hostd_protocol.common import PROTOCOL_VERSION
from hostd_protocol.framing import DEFAULT_MAX_FRAME_SIZE, HEADER_SIZE, Codec

#: One read takes at most this much of a socket (a window that fell behind catches up in a
#: few reads). Read into one preallocated buffer, not a new `bytes` of this size per read.
RECEIVE_SIZE = 1 << 20
_length = struct.Struct(">I").unpack_from
CONNECT_AT_ONCE = 32


class _Chunk(msgspec.Struct):
    type: str
    text: str = ""


class _Snap(msgspec.Struct):
    seq: int = 0


class _Result(msgspec.Struct):
    type: str = ""
    snapshot: _Snap | None = None


class _Msg(msgspec.Struct):
    """Just what a window reads of any server message (unknown fields are skipped)."""

    type: str
    seq: int = 0
    id: int | None = None
    chunk: _Chunk | None = None
    result: _Result | None = None
    message: str = ""


_decode = msgspec.msgpack.Decoder(_Msg).decode
_client_codec: Codec[Any] = Codec(Hello | Attach, "msgpack")


@dataclass
class WindowConfig:
    socket: str
    topics: list[str]
    windows_per_topic: int
    rounds: int
    #: "text": keep the text (hash it per round); "stamp": parse `<ns>:` stamps of
    #: `stamp_size`-character chunks and record driver -> window latency.
    mode: str = "text"
    stamp_size: int = 64
    #: `--trace`: append (topic, seq, receipt ns, driver emit ns of the oldest chunk that
    #: ends in the frame) per received text frame to this file, as JSON lines.
    trace_path: str = ""


@dataclass
class Window:
    topic_id: str
    index: int
    mode: str
    stamp_size: int
    seq: int = -1
    gaps: int = 0
    resyncs: int = 0
    errors: list[str] = field(default_factory=list)
    # the current round
    chars: int = 0
    frames: int = 0
    first_ns: int = 0
    last_ns: int = 0
    parts: list[str] = field(default_factory=list)
    pending: str = ""
    latencies_us: list[float] = field(default_factory=list)
    #: (topic, seq, receipt ns, emit ns) per frame, when tracing.
    traced: list[tuple[str, int, int, int]] | None = None
    # finished rounds
    done: list[dict[str, Any]] = field(default_factory=list)

    def on_text(self, text: str, now_ns: int, seq: int = 0) -> None:
        if not self.first_ns:
            self.first_ns = now_ns
        self.last_ns = now_ns
        self.chars += len(text)
        self.frames += 1
        if self.mode == "text":
            self.parts.append(text)
            return
        buf = self.pending + text if self.pending else text
        size = self.stamp_size
        i = 0
        while len(buf) - i >= size:
            colon = buf.find(":", i, i + size)
            try:
                emit = int(buf[i : colon if colon >= 0 else i + size])
                self.latencies_us.append((now_ns - emit) / 1000.0)
                if self.traced is not None and i == 0:
                    self.traced.append((self.topic_id, seq, now_ns, emit))
            except ValueError:
                self.errors.append(f"bad bench chunk {buf[i : i + 24]!r}")
            i += size
        self.pending = buf[i:]

    def end_round(self) -> None:
        # The text is kept and hashed only once every window has ended the round
        # (`_round_report`): hashing 2.4 MB here, inside the read loop, delayed the last
        # frames of the windows read after this one and shortened their measured rate (the
        # bare reader, too, hashes after its last receipt).
        self.done.append(
            {
                "topic": self.topic_id,
                "window": self.index,
                "chars": self.chars,
                "frames": self.frames,
                "first_ns": self.first_ns,
                "last_ns": self.last_ns,
                "sha256": "",
                "text_parts": self.parts if self.mode == "text" else None,
                "latencies_us": self.latencies_us,
                "leftover": len(self.pending),
            }
        )
        self.chars = self.frames = self.first_ns = self.last_ns = 0
        self.parts = []
        self.pending = ""
        self.latencies_us = []


class _Conn:
    """One window's socket: the frames it has read so far and what they mean."""

    def __init__(self, win: Window, sock: socket.socket) -> None:
        self.win = win
        self.sock = sock
        #: The start of a frame that the last read cut (rare: frames are small).
        self.partial = b""
        self.attached = False

    def on_data(self, data: memoryview, now: int) -> bool:
        """Decode every whole frame in `data` (a view of the shared read buffer: frames are
        decoded in place, without copying their bodies out); keep a cut frame's start for
        the next read. True when this read answered the attach."""
        if self.partial:
            data = memoryview(self.partial + data)
            self.partial = b""
        answered = False
        end = len(data)
        i = 0
        while end - i >= HEADER_SIZE:
            (length,) = _length(data, i)
            if length > DEFAULT_MAX_FRAME_SIZE:
                raise ValueError(f"the daemon announced a frame of {length} bytes")
            start = i + HEADER_SIZE
            if end - start < length:
                break
            i = start + length
            if self._on_frame(_decode(data[start:i]), now):
                answered = True
        if i < end:
            self.partial = bytes(data[i:])
        return answered

    def _on_frame(self, msg: _Msg, now: int) -> bool:
        win = self.win
        kind = msg.type
        if kind == "row-appended":
            if msg.seq != win.seq + 1:
                win.gaps += 1
            win.seq = msg.seq
            chunk = msg.chunk
            if chunk is not None and chunk.type == "text":
                win.on_text(chunk.text, now, msg.seq)
        elif kind == "reply":
            if msg.result is not None and msg.result.snapshot is not None:
                win.seq = msg.result.snapshot.seq
                return True
        elif kind == "turn-ended":
            if msg.seq != win.seq + 1:
                win.gaps += 1
            win.seq = msg.seq
            win.end_round()
        elif kind == "resync":
            win.resyncs += 1
            win.errors.append("resync: the window fell behind")
        elif kind == "error":
            win.errors.append(f"connection closed: error {msg.message}")
            if win.seq < 0:
                return True  # the attach failed: report it, do not hang
        elif msg.seq:
            if msg.seq != win.seq + 1:
                win.gaps += 1
            win.seq = msg.seq
        return False


def _emit(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def _round_report(k: int, wins: list[Window]) -> dict[str, Any]:
    per_window = [w.done[k - 1] for w in wins]
    lat: list[float] = []
    for p in per_window:
        lat.extend(p.pop("latencies_us"))
        parts = p.pop("text_parts")  # the round's text (`Window.end_round`)
        if parts is not None:
            p["sha256"] = hashlib.sha256("".join(parts).encode()).hexdigest()
    return {
        "round": k,
        "windows": per_window,
        "latency_us": {
            "n": len(lat),
            "p50": percentile(lat, 50),
            "p99": percentile(lat, 99),
            "max": max(lat) if lat else None,
        },
        "gaps": sum(w.gaps for w in wins),
        "resyncs": sum(w.resyncs for w in wins),
        "errors": sorted({e for w in wins for e in w.errors})[:5],
    }


def _flush_trace(path: str, wins: list[Window]) -> None:
    """Append the frames traced so far (before the round's report line, so a reader of that
    line finds them in the file)."""
    with open(path, "a", encoding="utf-8") as f:
        for win in wins:
            assert win.traced is not None
            for rec in win.traced:
                f.write(json.dumps(["read", *rec]) + "\n")
            win.traced.clear()


def run(conf: WindowConfig) -> None:
    """Attach every window, then read until each has seen `conf.rounds` turn ends.

    One `epoll` loop over every socket (level-triggered, each socket registered once): a
    read costs one `recv_into` the shared buffer and the in-place decode of its frames, no
    task switch, no `selectors` bookkeeping and no new buffer per read. This process is the
    measuring instrument, so it should take as little of the machine as it can (the bare
    baseline reads the drivers the same way).
    """
    wins = [
        Window(tid, i, conf.mode, conf.stamp_size)
        for tid in conf.topics
        for i in range(conf.windows_per_topic)
    ]
    if conf.trace_path:
        for win in wins:
            win.traced = []
    hello = _client_codec.encode_frame(Hello(protocol_version=PROTOCOL_VERSION, client="bench"))
    poller = select.epoll()
    conns: dict[int, _Conn] = {}
    buf = bytearray(RECEIVE_SIZE)
    view = memoryview(buf)
    waiting = list(reversed(wins))  # not connected yet, next one last
    connecting = 0  # connected, attach not answered yet
    attached = 0

    def connect_next() -> None:
        nonlocal connecting, attached
        win = waiting.pop()
        attach = _client_codec.encode_frame(Attach(id=1, topic_id=win.topic_id, max_rows=1))
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(conf.socket)
            sock.sendall(hello + attach)
        except OSError as exc:
            sock.close()
            win.errors.append(f"connection closed: {exc}")
            attached += 1  # counted, so the report says why instead of hanging
            return
        sock.setblocking(False)
        conns[sock.fileno()] = _Conn(win, sock)
        poller.register(sock.fileno(), select.EPOLLIN)
        connecting += 1

    def drop(conn: _Conn) -> None:
        fd = conn.sock.fileno()
        poller.unregister(fd)
        del conns[fd]
        conn.sock.close()

    # A few connections at a time, each held until the daemon has answered its attach:
    # a connect into a full listen backlog (128) would fail.
    while waiting and connecting < CONNECT_AT_ONCE:
        connect_next()
    ready = False
    reported = 0
    try:
        while reported < conf.rounds:
            if not ready and attached == len(wins):
                _emit({"ready": True})
                ready = True
            if not conns:
                _emit({"fatal": ["no window is connected"]})
                return
            for fd, _ in poller.poll():
                conn = conns.get(fd)
                if conn is None:
                    continue  # dropped earlier in this batch
                try:
                    n = conn.sock.recv_into(buf)
                except BlockingIOError:
                    continue
                except OSError as exc:
                    conn.win.errors.append(f"connection closed: {exc}")
                    n = 0
                if not n:
                    if not conn.win.errors:
                        conn.win.errors.append("the daemon closed the connection")
                    if not conn.attached:
                        conn.attached = True
                        connecting -= 1
                        attached += 1
                    drop(conn)
                    continue
                if conn.on_data(view[:n], time.monotonic_ns()) and not conn.attached:
                    conn.attached = True
                    connecting -= 1
                    attached += 1
                    while waiting and connecting < CONNECT_AT_ONCE:
                        connect_next()
                if len(conn.win.done) >= conf.rounds:
                    drop(conn)
            complete = min(len(w.done) for w in wins)
            while reported < complete:
                reported += 1
                if conf.trace_path:
                    _flush_trace(conf.trace_path, wins)
                _emit(_round_report(reported, wins))
            if any(w.errors and "closed" in w.errors[-1] for w in wins):
                _emit({"fatal": sorted({e for w in wins for e in w.errors})[:5]})
                return
    finally:
        for conn in conns.values():
            conn.sock.close()
        poller.close()


def main() -> None:
    run(WindowConfig(**json.loads(sys.argv[1])))


if __name__ == "__main__":
    main()
