"""A blocking client for one-shot requests: the stdlib socket, msgspec and `hostd_protocol`.

`hostd topics` runs one request and exits. Importing trio alone takes longer than the
whole command is allowed to (docs/benchmarks.md, "cli"), so one-shot commands use this
module instead of `hostd.client`::

    with WireClient.open(paths, client_name="hostd-cli") as wire:
        topics = wire.request(ListTopics(id=0)).topics

Rules this module guards:

- The connect is non-blocking and retried for a bounded time while the socket file exists:
  `EAGAIN` means the daemon's listen backlog is full (it is alive but busy; retried up to
  `BACKLOG_RETRY_S`), `ECONNREFUSED` means nobody listens (a stale socket, or a daemon going
  away; retried briefly, `REFUSED_RETRY_S`). `hostd.client` uses the same `ConnectRetry`
  policy and `connect_unix` step, so the async and the blocking clients behave alike.
- No daemon: `DaemonNotRunning`, with one wording for both clients (the class lives here
  and `hostd.client` re-exports it).
- An `ErrorReply` raises the typed error rebuilt with `error_from_code`; one without a
  request id (handshake, access denied, framing) does too, for whatever request waited.
- One request at a time; there is no attach, so any frame other than the awaited reply
  (or the welcome) is skipped.
- A request that cannot be encoded (a lone surrogate in a text, e.g. from undecodable
  bytes on a command line; a value msgpack/JSON cannot hold) is `InvalidMessage` before
  anything is sent (`encode_request`, used by both clients): the connection goes on. So is
  a message text over `MAX_SEND_BYTES` (`PayloadTooLarge`, the daemon's own words).
"""

from __future__ import annotations

import errno
import os
import socket
import sys
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Generator
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import msgspec

from hostd.shell.paths import Paths
from hostd_protocol.client_messages import ErrorReply, Hello, Reply, ServerMessage, Welcome
from hostd_protocol.common import PROTOCOL_VERSION
from hostd_protocol.errors import (
    AccessDenied,
    ConnectionBroken,
    ConnectionClosed,
    FrameTooLarge,
    HandshakeError,
    HostdError,
    InvalidMessage,
    error_from_code,
)
from hostd_protocol.framing import DEFAULT_MAX_FRAME_SIZE, Codec, FrameDecoder
from hostd_protocol.limits import MAX_SEND_BYTES

#: How long a connect into a full listen backlog (`EAGAIN`) is retried.
BACKLOG_RETRY_S = 5.0
#: How long a refused connect is retried while the socket file exists.
REFUSED_RETRY_S = 0.2


def encode_request(codec: Codec[Any], msg: Any) -> bytes:
    """`msg` as one frame, or `InvalidMessage` saying why it cannot be (both clients' one
    encoding place; `FrameTooLarge` only when no limit of the request's own says more).

    A message text over the send limit is `PayloadTooLarge` naming that limit, before any
    encoding: as the daemon would refuse it, but also above the frame size, where encoding
    would fail first with words about frames the user never chose."""
    text = getattr(msg, "text", None)
    if isinstance(text, str) and len(text) * 4 > MAX_SEND_BYTES:
        # Imported only for a text that may be over (one-shot commands stay light).
        from hostd.core.payload_bounds import check_text

        check_text("the message", text, MAX_SEND_BYTES)
    try:
        return codec.encode_frame(msg)
    except FrameTooLarge:
        # Over the frame size: name the request's own limit it broke (history, images,
        # options, a field), as the daemon would have; the frame size only if none.
        from hostd.core.payload_bounds import check_request, check_send
        from hostd_protocol.client_messages import SendMessage

        check_request(msg)
        if isinstance(msg, SendMessage):
            check_send(msg.text, msg.history, msg.attachments)
        raise
    except (UnicodeEncodeError, TypeError, ValueError, OverflowError) as exc:
        tag = msg.__struct_config__.tag if isinstance(msg, msgspec.Struct) else type(msg).__name__
        what = "a text is not valid Unicode" if isinstance(exc, UnicodeEncodeError) else "bad value"
        raise InvalidMessage(
            f"cannot send this {tag} request: {what} ({exc})", details={"type": str(tag)}
        ) from None


class DaemonNotRunning(ConnectionBroken):
    """No daemon listens on the socket (and auto-start was not asked for or failed)."""

    code = "daemon_not_running"


def unreachable(exc: OSError) -> str:
    """Why a connect to the daemon's socket failed, in a user's words (not an errno name)."""
    if isinstance(exc, FileNotFoundError):
        return "no socket"
    if isinstance(exc, ConnectionRefusedError):
        return "its socket refuses connections: a daemon that stopped without removing it"
    return exc.strerror or type(exc).__name__


def not_running(paths: Paths, why: str) -> DaemonNotRunning:
    """The error both clients raise when nothing serves `paths`, saying how to start it."""
    home = f" --home {paths.home}" if paths.home else ""
    return DaemonNotRunning(
        f"hostd is not running ({why}); start it with `hostd serve{home}` "
        f"(or `hostd serve --detach{home}`)",
        details={"socket": str(paths.socket_path)},
    )


def start_daemon(paths: Paths, *, timeout: float = 30.0) -> None:
    """Start a detached daemon for `paths` and return once it serves (blocking)."""
    from hostd_protocol import child_process  # only here: one-shot commands rarely start it

    argv = [sys.executable, "-m", "hostd", "serve", "--detach"]
    if paths.home is not None:
        argv += ["--home", str(paths.home)]
    proc = child_process.run(argv, timeout=timeout)
    if proc.returncode != 0:
        said = (proc.stderr or proc.stdout).decode(errors="replace").strip()
        # `serve --detach` says its own one line ("hostd: hostd did not start: WHY ..."):
        # told once, not "could not start hostd: hostd: hostd did not start: WHY".
        said = said.removeprefix("hostd: ").removeprefix("hostd did not start: ")
        raise HostdError(f"could not start hostd: {said or f'exit code {proc.returncode}'}")


def connect_unix(path: Path) -> socket.socket:
    """One non-blocking connect attempt; the connected socket (still non-blocking).

    Raises the `OSError` of the attempt: `FileNotFoundError`, `ConnectionRefusedError`, or
    `BlockingIOError` when the listen backlog is full (an AF_UNIX connect never completes
    later: there is nothing to wait for but a new attempt).
    """
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.setblocking(False)
        sock.connect(str(path))
        check_server_uid(sock, path)
    except BaseException:
        sock.close()
        raise
    return sock


def check_server_uid(sock: socket.socket, path: Path) -> None:
    """The process listening on `path` runs as us: a socket another user put in our place
    (a squatted runtime dir, a swapped file) would read our messages and feed us answers.
    Raises `AccessDenied`; a platform without peer credentials is not checked."""
    uid = server_uid(sock)
    if uid is not None and uid != os.getuid():
        raise AccessDenied(
            f"the hostd socket {str(path)!r} is served by uid {uid}, not by you (uid "
            f"{os.getuid()}); refusing to talk to it. Remove it, or point XDG_RUNTIME_DIR / "
            "HOSTD_HOME (or --home) at a folder of your own",
            details={"uid": uid},
        )


def server_uid(sock: socket.socket) -> int | None:
    """The uid of the process at the other end of a connected Unix socket."""
    if hasattr(socket, "SO_PEERCRED"):  # Linux
        import struct

        raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        return int(struct.unpack("3i", raw)[1])
    return None  # pragma: no cover - macOS/BSD: the 0700 runtime dir is the guard there


class ConnectRetry:
    """When to try a failed connect again (sans-IO: the caller sleeps and keeps the clock)."""

    def __init__(self, path: Path, now: float) -> None:
        self.path = path
        self.start = now
        self.attempts = 0
        self._delay = 0.002

    def next_delay(self, exc: OSError, now: float) -> float | None:
        """Seconds to wait before the next attempt, or None to give up with `exc`."""
        if exc.errno == errno.EAGAIN:
            limit = BACKLOG_RETRY_S
        elif isinstance(exc, ConnectionRefusedError) and os.path.exists(self.path):
            limit = REFUSED_RETRY_S
        else:
            return None
        if now - self.start >= limit:
            return None
        self.attempts += 1
        delay = self._delay
        self._delay = min(self._delay * 2, 0.05)
        return delay

    def give_up(self, exc: OSError, paths: Paths) -> BaseException:
        """The error to raise for `exc`: a full backlog is not "not running"; "no such file"
        and "refused" stay themselves (the callers' cue to auto-start or say how to start);
        any other failure (a path under a file, past the socket path limit, not ours to
        enter) means no daemon can be reached there, whatever is started."""
        if exc.errno == errno.EAGAIN:
            return ConnectionBroken(
                f"hostd did not accept the connection within {BACKLOG_RETRY_S:.0f} s "
                "(its listen backlog stayed full)",
                details={"socket": str(paths.socket_path)},
            )
        if isinstance(exc, FileNotFoundError | ConnectionRefusedError):
            return exc
        return DaemonNotRunning(
            f"cannot reach hostd at {paths.socket_path}: {exc.strerror or exc}; point --home "
            "/ HOSTD_HOME at a folder of your own",
            details={"socket": str(paths.socket_path)},
        )


def connect_attempts(paths: Paths, clock: Callable[[], float]) -> Generator[float, None, socket.socket]:
    """The one connect loop (sans-IO about waiting): yields how long to wait before the next
    attempt, returns the connected non-blocking socket, raises as `ConnectRetry` says. The
    blocking client sleeps with `time.sleep`, the async one with `trio.sleep`."""
    retry = ConnectRetry(paths.socket_path, clock())
    while True:
        try:
            return connect_unix(paths.socket_path)
        except OSError as exc:
            delay = retry.next_delay(exc, clock())
            if delay is None:
                raise retry.give_up(exc, paths) from None
        yield delay


def connect_blocking(paths: Paths) -> socket.socket:
    """Connect to the daemon's socket, retrying as `ConnectRetry` says; a blocking socket."""
    attempts = connect_attempts(paths, time.monotonic)
    try:
        while True:
            time.sleep(next(attempts))
    except StopIteration as done:
        sock: socket.socket = done.value
    sock.setblocking(True)
    return sock


_CODEC: Codec[ServerMessage] | None = None


def _codec() -> Codec[ServerMessage]:
    global _CODEC
    if _CODEC is None:
        _CODEC = Codec(ServerMessage, "msgpack", DEFAULT_MAX_FRAME_SIZE)
    return _CODEC


class ClosingContext(ABC):
    """`with x:` closes `x` at the end (the blocking clients' shared context manager)."""

    @abstractmethod
    def close(self) -> None: ...

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class WireClient(ClosingContext):
    """One blocking connection: a handshake, then requests one at a time.

    Use `WireClient.open(paths)`; `request(msg)` returns the reply's result.
    """

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._codec = _codec()
        self._frames = FrameDecoder(DEFAULT_MAX_FRAME_SIZE)
        self._pending: list[bytes] = []
        self._next_id = 1
        self.welcome: Welcome | None = None

    @classmethod
    def open(
        cls,
        paths: Paths,
        *,
        client_name: str = "hostd-sync-wire",
        autostart: bool = False,
        timeout: float | None = 30.0,
    ) -> WireClient:
        """Connect (starting the daemon first if `autostart` and it is not running) and
        handshake. `timeout` bounds each wait for the daemon (None: wait forever)."""
        try:
            sock = connect_blocking(paths)
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            if not autostart:
                raise not_running(paths, unreachable(exc)) from None
            sock = autostart_connect(paths)
        sock.settimeout(timeout)
        client = cls(sock)
        try:
            client.hello(client_name)
        except BaseException:
            client.close()
            raise
        return client

    def hello(self, client_name: str) -> Welcome:
        try:
            self._sock.sendall(
                encode_request(
                    self._codec, Hello(protocol_version=PROTOCOL_VERSION, client=client_name)
                )
            )
        except OSError:
            # The daemon may have refused us before reading (access denied): its reason is
            # more useful than our broken pipe.
            pass
        msg = self._receive()
        if isinstance(msg, ErrorReply):
            raise error_from_code(msg.code, msg.message, msg.details)
        if not isinstance(msg, Welcome):
            raise HandshakeError(f"expected a welcome from hostd, got {type(msg).__name__}")
        self.welcome = msg
        return msg

    def request(self, msg: Any) -> Any:
        """Send a request (its id is assigned here) and return the reply's result."""
        rid = self._next_id
        self._next_id += 1
        self._send(msgspec.structs.replace(msg, id=rid))
        while True:
            reply = self._receive()
            if isinstance(reply, ErrorReply) and reply.id in (None, rid):
                raise error_from_code(reply.code, reply.message, reply.details)
            if isinstance(reply, Reply) and reply.id == rid:
                return reply.result

    def wait_closed(self) -> None:
        """Read until the daemon closes the connection (after `Shutdown`: it is done)."""
        try:
            while self._sock.recv(65536):
                pass
        except OSError:
            pass

    def close(self) -> None:
        self._sock.close()

    def _send(self, msg: Any) -> None:
        frame = encode_request(self._codec, msg)
        try:
            self._sock.sendall(frame)
        except OSError as exc:
            raise ConnectionBroken(f"connection to hostd lost: {exc}") from None

    def _receive(self) -> Any:
        while not self._pending:
            try:
                data = self._sock.recv(65536)
            except TimeoutError:
                raise ConnectionBroken("hostd did not answer in time") from None
            except OSError as exc:
                raise ConnectionBroken(f"connection to hostd lost: {exc}") from None
            if not data:
                raise ConnectionClosed("hostd closed the connection")
            self._pending.extend(self._frames.feed(data))
        return self._codec.decode(self._pending.pop(0))


def autostart_connect(paths: Paths, timeout: float = 30.0) -> socket.socket:
    """Start the daemon and connect (blocking; the async client runs it in a thread). A
    daemon that is still shutting down holds the lock for a moment after removing its socket
    ("already running", but nothing to connect to): try again until `timeout`; there is no
    event to wait for across processes."""
    deadline = time.monotonic() + timeout
    while True:
        start_daemon(paths)
        try:
            return connect_blocking(paths)
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            if time.monotonic() > deadline:
                raise not_running(paths, f"auto-start did not help: {exc}") from None
            time.sleep(0.1)


def request(
    paths: Paths, msg: Any, *, client_name: str = "hostd-sync-wire", autostart: bool = False
) -> Any:
    """Connect, handshake, send one request and return its result."""
    with WireClient.open(paths, client_name=client_name, autostart=autostart) as wire:
        return wire.request(msg)


__all__ = [
    "ConnectRetry",
    "DaemonNotRunning",
    "WireClient",
    "connect_blocking",
    "connect_unix",
    "not_running",
    "request",
    "start_daemon",
]
