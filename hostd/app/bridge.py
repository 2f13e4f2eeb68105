"""One window's JS-to-Python bridge: its daemon connections, frame for frame.

The page calls `connect()` (one Unix socket connection to the daemon, with the clients' usual
connect retry and server-uid check), then `send(conn, body)` per frame body; each connection's
reader thread hands the daemon's frame bodies to the page by evaluating
`window.__hostdBridge.frames(conn, [...])` in it (the page's transport: page/src/desktop.ts).

Like the gateway's bridge (hostd/web/bridge.py) it never parses or rewrites a frame, and it
refuses a body that is not a JSON object: the daemon picks a connection's encoding from the
first byte of its first frame.

pywebview serves every JS call on a thread of its own, so this module is plain threads and
blocking sockets; the page chains its sends, so they reach the socket in order.
"""

from __future__ import annotations

import itertools
import json
import socket
import threading
from collections.abc import Callable
from typing import Any

import msgspec

from hostd.client.sync_wire import DaemonNotRunning, connect_blocking, not_running, unreachable
from hostd.shell.paths import Paths
from hostd_protocol.errors import HostdError
from hostd_protocol.framing import DEFAULT_MAX_FRAME_SIZE, FrameDecoder, encode_frame

_ids = itertools.count(1)

#: Called with a JS statement to run in the window (pywebview's `Window.run_js`).
RunJs = Callable[[str], Any]


def refusal(body: bytes) -> str:
    """The message of a frame the daemon sent in msgpack (an error before any JSON)."""
    try:
        message = msgspec.msgpack.decode(body).get("message")
    except (msgspec.DecodeError, AttributeError):
        message = None
    return f"the daemon refused the connection: {message or 'unreadable reply'}"


class DaemonConnection:
    """One daemon socket connection of one window and the thread that reads it."""

    def __init__(self, conn_id: int, sock: socket.socket, run_js: RunJs, max_size: int) -> None:
        self.id = conn_id
        self.sock = sock
        self.run_js = run_js
        self.max_size = max_size
        self.closed = threading.Event()
        self._send_lock = threading.Lock()
        self.thread = threading.Thread(target=self._read, name=f"hostd-app-conn-{conn_id}", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def send(self, body: str) -> None:
        data = body.encode()
        if not data.startswith(b"{"):
            raise ValueError("each frame must be one JSON object")
        frame = encode_frame(data, self.max_size)
        with self._send_lock:
            try:
                self.sock.sendall(frame)
            except OSError:
                raise ConnectionError("the daemon closed the connection") from None

    def close(self) -> None:
        if self.closed.is_set():
            return
        self.closed.set()
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()

    def _read(self) -> None:
        decoder = FrameDecoder(self.max_size)
        reason = "the daemon closed the connection"
        while not self.closed.is_set():
            try:
                data = self.sock.recv(262144)
            except OSError:
                data = b""
            if not data:
                break
            try:
                bodies = decoder.feed(data)
            except HostdError as exc:
                reason = f"bad frame from the daemon: {exc.message}"
                break
            if bodies and not all(b.startswith(b"{") for b in bodies):
                # Not JSON: the daemon refused the connection before it read our first frame
                # (its refusals are msgpack: too many connections, another user).
                reason = refusal(next(b for b in bodies if not b.startswith(b"{")))
                break
            if bodies:
                texts = json.dumps([b.decode() for b in bodies])
                self._deliver(f"window.__hostdBridge&&window.__hostdBridge.frames({self.id},{texts})")
        if not self.closed.is_set():
            self._deliver(f"window.__hostdBridge&&window.__hostdBridge.closed({self.id},{json.dumps(reason)})")
        self.close()

    def _deliver(self, script: str) -> None:
        try:
            self.run_js(script)
        except Exception:  # the window is gone (closed meanwhile): nobody left to tell
            self.close()


class WindowApi:
    """What the page sees as `window.pywebview.api` (public methods only; pywebview exposes
    every public attribute, so the state is in underscore names)."""

    def __init__(
        self,
        paths: Paths,
        *,
        open_window: Callable[[str], None],
        notify: Callable[[str, str], None],
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
    ) -> None:
        self._paths = paths
        self._open_window = open_window
        self._notify = notify
        self._max = max_frame_size
        self._run_js: RunJs | None = None
        self._conns: dict[int, DaemonConnection] = {}
        self._lock = threading.Lock()

    def _bind(self, run_js: RunJs) -> None:
        self._run_js = run_js

    def connect(self) -> int:
        """Open a daemon connection for this window; its id. Raises (the page's promise
        rejects with the message) when the daemon is not running."""
        assert self._run_js is not None
        try:
            sock = connect_blocking(self._paths)
        except DaemonNotRunning:
            raise
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            raise not_running(self._paths, unreachable(exc)) from None
        conn = DaemonConnection(next(_ids), sock, self._run_js, self._max)
        with self._lock:
            self._conns[conn.id] = conn
        conn.start()
        return conn.id

    def send(self, conn: int, body: str) -> None:
        c = self._conns.get(conn)
        if c is None or c.closed.is_set():
            raise ConnectionError("the connection is closed")
        c.send(body)

    def close(self, conn: int) -> None:
        with self._lock:
            c = self._conns.pop(conn, None)
        if c is not None:
            c.close()

    def open_window(self, topic: str) -> None:
        self._open_window(str(topic))

    def notify(self, title: str, body: str) -> None:
        self._notify(str(title)[:200], str(body)[:500])

    def _close_all(self) -> None:
        with self._lock:
            conns = list(self._conns.values())
            self._conns.clear()
        for c in conns:
            c.close()

    def _connection_count(self) -> int:
        with self._lock:
            return sum(1 for c in self._conns.values() if not c.closed.is_set())
