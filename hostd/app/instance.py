"""One `hostd app` per user and hostd home: a second start hands its request to the first.

The running app listens on `<runtime dir>/app.sock` (a Unix socket, mode 0600 in the owner-only
runtime dir; no TCP), guarded by an flock on `app.lock` so two starts cannot both become the
first. A later `hostd app [TOPIC]` connects, sends one JSON line `{"topic": ...}`, waits for
`ok` and exits: the running app opens the window. Peer credentials are checked both ways.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

from hostd.client.sync_wire import server_uid

MAX_REQUEST = 4096


def socket_path(runtime_dir: Path) -> Path:
    return runtime_dir / "app.sock"


class Instance:
    """The running app's side: holds the lock and serves hand-over requests."""

    def __init__(self, runtime_dir: Path, lock_fd: int) -> None:
        self.path = socket_path(runtime_dir)
        self.lock_fd = lock_fd
        self.sock: socket.socket | None = None
        self.stopped = threading.Event()

    def serve(self, on_open: Callable[[str], None]) -> None:
        """Listen and call `on_open(topic)` per request, on a thread of its own."""
        self.path.unlink(missing_ok=True)  # a stale one: we hold the lock, so nobody serves it
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            sock.bind(str(self.path))
        finally:
            os.umask(old)
        os.chmod(self.path, 0o600)
        sock.listen(8)
        self.sock = sock
        threading.Thread(target=self._accept, args=(on_open,), name="hostd-app-instance", daemon=True).start()

    def _accept(self, on_open: Callable[[str], None]) -> None:
        assert self.sock is not None
        while not self.stopped.is_set():
            try:
                peer, _ = self.sock.accept()
            except OSError:
                return
            with peer:
                peer.settimeout(5)
                try:
                    if server_uid(peer) not in (None, os.getuid()):
                        continue  # the runtime dir is ours, but be sure
                    data = _read_line(peer)
                    topic = json.loads(data).get("topic", "") if data else ""
                    on_open(str(topic or ""))
                    peer.sendall(b"ok\n")
                except (OSError, ValueError, AttributeError):
                    continue

    def close(self) -> None:
        self.stopped.set()
        if self.sock is not None:
            with contextlib.suppress(OSError):
                self.sock.shutdown(socket.SHUT_RDWR)  # wakes the accept(); close() alone does not
            self.sock.close()
            self.path.unlink(missing_ok=True)
        os.close(self.lock_fd)


def _read_line(sock: socket.socket) -> bytes:
    data = b""
    while b"\n" not in data and len(data) < MAX_REQUEST:
        chunk = sock.recv(MAX_REQUEST)
        if not chunk:
            break
        data += chunk
    return data.split(b"\n", 1)[0]


def become_or_hand_over(runtime_dir: Path, topic: str) -> Instance | None:
    """The `Instance` when this process is the first app; None once the running app took
    `topic` (it opens the window). Raises `OSError` when the running app does not answer."""
    fd = os.open(runtime_dir / "app.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        hand_over(runtime_dir, topic)
        return None
    return Instance(runtime_dir, fd)


#: How long a second start waits for a first one that holds the lock but does not serve yet
#: (it is still starting Qt: it serves once its first window is up).
STARTING_S = 20.0


def hand_over(runtime_dir: Path, topic: str, timeout: float = 10.0) -> None:
    path = socket_path(runtime_dir)
    deadline = time.monotonic() + STARTING_S
    while True:
        try:
            _send(path, topic, timeout)
            return
        except (FileNotFoundError, ConnectionRefusedError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)  # polling another process's start-up; nothing to wait on


def _send(path: Path, topic: str, timeout: float) -> None:
    with contextlib.closing(socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)) as sock:
        sock.settimeout(timeout)
        sock.connect(str(path))
        if server_uid(sock) not in (None, os.getuid()):
            raise PermissionError(f"{path} is served by another user")
        sock.sendall(json.dumps({"topic": topic}).encode() + b"\n")
        if _read_line(sock) != b"ok":
            raise ConnectionError("the running hostd app did not take the request")
