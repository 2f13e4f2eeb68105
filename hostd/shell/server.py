"""The local socket: single-instance lock, binding, peer credentials, accept loop.

Rules this module guards:

- One daemon per set of paths: `DaemonLock` holds `fcntl.flock` on a lock file next to the
  socket for the daemon's whole life. A second daemon fails clearly instead of stealing the
  socket. The kernel drops the lock when a daemon dies, even by SIGKILL.
- Whoever holds the lock owns the socket path, so a socket file found there is stale (a killed
  daemon's) and is replaced. The new socket is bound under a temporary name, chmodded 0600
  and renamed over the final path, so it is never reachable with a wider mode, whatever the
  umask; its directory is 0700 anyway (see `hostd.shell.paths`).
- Every accepted peer's uid is checked (SO_PEERCRED, or LOCAL_PEERCRED on BSD/macOS) before
  a single byte of it is read; anyone but the daemon's own user gets `access_denied` and is
  closed. The lookup is injectable so tests can pretend to be another user.
- Connection slots (`hostd.core.connection_slots`): at most `max_connections`, and among
  them a small quota for connections that have not said hello; when that (or the cap) is
  full the oldest silent one is closed with a reason, so a client that says hello always
  gets in. Only connections that said hello can make the daemon refuse one.
- Unix sockets only: there is no TCP listener.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import socket
import struct
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import trio

from hostd.core.connection_slots import ConnectionSlots, Refuse
from hostd.shell.fanout import SERVER_CODECS
from hostd_protocol.client_messages import ErrorReply
from hostd_protocol.errors import AccessDenied, HandshakeError, HostdError, TooManyConnections

log = logging.getLogger(__name__)

#: Returns the uid of the process at the other end of a connected Unix socket.
PeerUidLookup = Callable[[Any], int]


class ConnectionSlot:
    """An accepted connection's place in the daemon's slots. Whoever serves the connection
    calls `welcomed()` once it said hello, and may set `on_evict` to close it with the reason
    it is given (else an eviction cancels the handler)."""

    def __init__(self, slots: ConnectionSlots[ConnectionSlot]) -> None:
        self._slots = slots
        self.scope = trio.CancelScope()
        #: Closes the connection, telling the peer this error (set by the connection).
        self.on_evict: Callable[[HostdError], None] | None = None

    def welcomed(self) -> None:
        self._slots.welcome(self)

    def evict(self, error: HostdError) -> None:
        if self.on_evict is not None:
            self.on_evict(error)
        else:
            self.scope.cancel()


ConnectionHandler = Callable[[trio.SocketStream, int, ConnectionSlot], Awaitable[None]]


class DaemonAlreadyRunning(HostdError):
    """Raised by `hostd serve` when another daemon holds the lock for the same paths."""

    code = "daemon_running"


class DaemonLock:
    """An exclusive, non-blocking `flock` on the lock file; records the holder's pid."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_pid(fd)
            os.close(fd)
            who = f" (pid {holder})" if holder else ""
            raise DaemonAlreadyRunning(
                f"another hostd is already running{who} for {str(self.path.parent)!r}; "
                "stop it with `hostd stop` or use another HOSTD_HOME",
                details={"pid": holder},
            ) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            try:
                os.ftruncate(self._fd, 0)
            except OSError:
                pass
            os.close(self._fd)  # closing the last fd releases the flock
            self._fd = None

    def __enter__(self) -> DaemonLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode().strip()
        return int(text) if text else None
    except (OSError, ValueError):
        return None


def read_lock_pid(path: Path) -> int | None:
    """The pid recorded in a lock file, if readable (for `hostd status` / `hostd stop`)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return _read_pid(fd)
    finally:
        os.close(fd)


def default_peer_uid(sock: Any) -> int:
    """The peer's uid from the kernel (never from anything the peer sends)."""
    if hasattr(socket, "SO_PEERCRED"):  # Linux
        raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        _pid, uid, _gid = struct.unpack("3i", raw)
        return int(uid)
    if sys.platform == "darwin" or "bsd" in sys.platform:  # pragma: no cover - not Linux
        sol_local, local_peercred = 0, 0x001
        # struct xucred { u_int cr_version; uid_t cr_uid; short cr_ngroups; gid_t groups[16] }
        raw = sock.getsockopt(sol_local, local_peercred, struct.calcsize("IIh16I") + 2)
        return int(struct.unpack_from("II", raw)[1])
    raise OSError(errno.ENOTSUP, "no way to read peer credentials on this platform")


def _prepare_socket_path(path: Path) -> Path:
    """Log a stale socket (we hold the lock, so it is stale) and clear our temporary name."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.unlink()
    except FileNotFoundError:
        pass
    if os.path.lexists(path):
        log.warning("replacing stale socket %s (no daemon holds the lock)", path)
    return tmp


#: Many windows connect at once when an app starts (400 in the benchmarks). A connect into a
#: full backlog fails with EAGAIN (the clients retry, bounded), so make that rare. The kernel
#: caps it at net.core.somaxconn (4096 on recent Linux).
LISTEN_BACKLOG = 4096


async def bind_unix_listener(path: Path, backlog: int = LISTEN_BACKLOG) -> trio.SocketListener:
    """Bind `path` with mode 0600, replacing a stale socket file atomically. It listens
    before it takes the real name, so a client that finds the file is never refused."""
    tmp = _prepare_socket_path(path)
    sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        await sock.bind(str(tmp))
        os.chmod(tmp, 0o600)
        sock.listen(backlog)
        os.replace(tmp, path)
    except BaseException:
        sock.close()
        try:
            tmp.unlink()
        except FileNotFoundError:
            pass
        raise
    return trio.SocketListener(sock)


async def _refuse(stream: trio.SocketStream, err: HostdError) -> None:
    """Tell the peer why in one frame (bounded in time: it may not read), then close."""
    frame = SERVER_CODECS["msgpack"].encode_frame(
        ErrorReply(code=err.code, message=err.message, id=None, details=dict(err.details))
    )
    with trio.move_on_after(1.0):
        try:
            await stream.send_all(frame)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
    await trio.aclose_forcefully(stream)


#: Back-off of the accept loop while out of descriptors (seconds).
ACCEPT_BACKOFF_MIN = 0.05
ACCEPT_BACKOFF_MAX = 2.0


def default_max_connections() -> int:
    """Half the descriptor limit (the rest is for drivers' pipes, the store, logs), at least
    16, at most 4096: past it a client gets a clear refusal instead of the daemon running
    out of descriptors for everyone."""
    import resource

    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 4096
    return max(16, min(4096, soft // 2 - 32))


async def serve_unix(
    listener: trio.SocketListener,
    handler: ConnectionHandler,
    *,
    handler_nursery: trio.Nursery,
    peer_uid: PeerUidLookup = default_peer_uid,
    max_connections: int = 1024,
    max_startups: int | None = None,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Accept connections until cancelled; each runs `handler(stream, uid, slot)` as a task
    of `handler_nursery` (as `trio.serve_listeners` does), so cancelling the accept loop
    stops new connections while existing ones drain. `max_startups`: how many connections
    may wait for their hello (default: `connection_slots.default_max_startups`)."""
    own_uid = os.getuid()
    slots: ConnectionSlots[ConnectionSlot] = ConnectionSlots(max_connections, max_startups)

    async def one(stream: trio.SocketStream) -> None:
        try:
            uid: int | None = peer_uid(stream.socket)
        except OSError as exc:
            log.warning("refusing a connection whose credentials cannot be read: %s", exc)
            uid = None
        if uid is None or uid != own_uid:
            log.warning("refusing a connection from uid %s", uid)
            await _refuse(stream, AccessDenied(
                f"this hostd serves uid {os.getuid()} only"
                + (f"; you are uid {uid}" if uid is not None else "")
            ))
            return
        slot = ConnectionSlot(slots)
        decision = slots.admit(slot)
        if isinstance(decision, Refuse):
            log.warning("refusing a connection: %d connections already (the maximum)",
                        slots.total)
            await _refuse(stream, TooManyConnections(
                decision.reason, details={"max": max_connections}
            ))
            return
        if decision.evicted is not None:
            log.warning("closing a connection that has not said hello: %s", decision.reason)
            decision.evicted.evict(HandshakeError(
                decision.reason, details={"max_startups": slots.max_startups}
            ))
        try:
            with slot.scope:
                await handler(stream, uid, slot)
        finally:
            slots.release(slot)

    backoff = ACCEPT_BACKOFF_MIN
    async with listener:
        task_status.started()
        while True:
            try:
                stream = await listener.accept()
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    # Out of descriptors: back off (doubling, bounded) instead of spinning
                    # and logging 10 times a second; we recover when connections close.
                    if backoff == ACCEPT_BACKOFF_MIN:
                        log.error("accept failed (%s); backing off until descriptors free up",
                                  exc)
                    await trio.sleep(backoff)
                    backoff = min(backoff * 2, ACCEPT_BACKOFF_MAX)
                    continue
                raise
            if backoff != ACCEPT_BACKOFF_MIN:
                log.warning("accepting connections again")
                backoff = ACCEPT_BACKOFF_MIN
            handler_nursery.start_soon(one, stream)
