"""One driver subprocess: spawn, handshake, read frames, keep a stderr tail, reap.

A `DriverSession` is started with `await nursery.start(session.run)`: `run` spawns the
process, does the handshake (`Init` -> `Ready`) and only then calls `task_status.started()`,
so a failed start raises out of `nursery.start` as a typed `DriverError` and never reaches
the owner's nursery. After that `run` never raises: whatever happens (clean close, crash,
garbage on stdout, being killed, cancellation) it reaps the process and ends `events` with
exactly one `SessionEnded`.

Rules this module guards:

- Every process is reaped on every path, cancellation included (shielded cleanup). It is
  started by `hostd_protocol.child_process` (own session; parent death means the daemon's),
  and a kill ends its whole tree (group and descendants, `setsid` ones included), so a kill
  also reaches the vendor CLI and the servers it may have spawned.
- Events are delivered as one batch (list) per pipe read, in order, through `events` or,
  once the owner set `take_batch`, to it synchronously; `events` always ends with the one
  `SessionEnded`. `Ready` and `Warmed` are consumed here (about the process, not the topic).
  The reads of a driver streaming flat out are paced, so a batch holds what the driver
  wrote in about `read_pace` whatever the scheduling (`pipe_reader`).
  While its pipe is quiet and the owner takes batches synchronously, stdout is parked on the
  supervisor's `PipeHub`, which reads it, decodes and hands over in the hub's own task step
  (one task step for every ready pipe, not one per chunk); the session's task takes the pipe
  back for anything that needs it (`session_events`).
- A framing error from the driver is fatal for it: kill, then `DriverProtocolError` with the
  stderr tail. A schema error (unknown event from a newer driver) skips that one event.
- Stopping escalates, each step bounded: `Close` (and stdin EOF), SIGTERM, SIGKILL.
- Secrets given for the session are redacted (`hostd.core.redaction`) from everything the driver
  says, here and only here: every decoded event, the stderr tail, the errors this session
  ends with, and every log line about it. Nothing a driver said leaves the session (this
  module and `session_end`) unredacted.

The end of a session (settle, reap, the error it ends with, `SessionEnded`) is
`hostd.shell.drivers.session_end.SessionEnd`, mixed in; the driver's environment is
`hostd.shell.drivers.environment`.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from typing import Any

import msgspec
import trio

from hostd.core.redaction import Redactor
from hostd.shell.drivers.environment import MINIMAL_ENV, driver_env
from hostd.shell.drivers.pipe_hub import PipeHub
from hostd.shell.drivers.pipe_reader import READ_PACE, PipeReader
from hostd.shell.drivers.priority import lower_priority
from hostd.shell.drivers.reaper import GroupReaper
from hostd.shell.drivers.session_end import (
    EXIT_AFTER_EOF,
    READ_SIZE,
    Failure,
    SessionEnd,
    SessionEnded,
    clone_error,
)
from hostd.shell.drivers.session_events import EventBatch, SessionEvents
from hostd.shell.drivers.stderr_tail import RedactingLog, StderrTail
from hostd_protocol import child_process
from hostd_protocol.common import PROTOCOL_VERSION, Capabilities, SessionSource
from hostd_protocol.driver_messages import (
    Close,
    DriverEvent,
    DriverFatal,
    HostCommand,
    Init,
    Interrupt,
    Ready,
    Send,
)
from hostd_protocol.errors import (
    DriverCrashed,
    DriverError,
    DriverProtocolError,
    DriverTimeout,
    DriverUnavailable,
    FrameTooLarge,
    InvalidArgument,
    InvalidMessage,
    ProtocolError,
)
from hostd_protocol.framing import DEFAULT_MAX_FRAME_SIZE, Codec, MessageReader

__all__ = ["MINIMAL_ENV", "DriverSession", "EventBatch", "SessionEnded", "StderrTail", "clone_error",
           "driver_env"]

log = logging.getLogger(__name__)



class DriverSession(SessionEnd, SessionEvents):
    """A live driver process bound to one topic (or waiting in the warm pool).

    Public attributes: `topic_id`, `driver`, `capabilities` (from `Ready`), `pid`,
    `resume_token` (the latest the driver reported, else the one it was started with),
    `fork_from` (the source its `Init` offered),
    `events` (one batch per pipe read, then exactly one `SessionEnded`).
    """

    def __init__(
        self,
        *,
        driver: str,
        argv: Sequence[str],
        init: Init,
        env: Mapping[str, str],
        cwd: str | None = None,
        topic_id: str = "",
        handshake_timeout: float = 15.0,
        close_timeout: float = 2.0,
        terminate_timeout: float = 1.0,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        event_buffer: int = 1024,
        redact: Iterable[str] = (),
        reaper: GroupReaper | None = None,
        read_pace: float = READ_PACE,
        nice: int = 0,
        limits: child_process.Limits | None = None,
        hub: PipeHub | None = None,
    ) -> None:
        self.driver = driver
        self.topic_id = topic_id
        self.capabilities = Capabilities()
        self.driver_version = ""
        self.pid = 0
        self.resume_token: str | None = init.resume_token
        #: The vendor session its `Init` offered to start from (a fork or a rewind), if any.
        self.fork_from: SessionSource | None = init.fork_from
        self.exit_code: int | None = None
        #: Why the session ended (None while alive or after a clean close).
        self.end_error: DriverError | None = None
        #: Set when the driver answered `Prewarm` with `Warmed`.
        self.warmed = trio.Event()
        #: Set once `events` has its `SessionEnded` and the process is reaped.
        self.ended = trio.Event()
        #: Hooks for the owner (the supervisor's idle timers); called synchronously.
        self.on_turn_start: Callable[[DriverSession], None] | None = None
        self.on_turn_end: Callable[[DriverSession], None] | None = None
        self.on_end: Callable[[DriverSession], None] | None = None
        #: Raises for a `Send` whose per-message options a window may not set (the
        #: spawner's `window_options` check, over the session's own options).
        self.check_send: Callable[[Mapping[str, Any]], None] | None = None
        #: The owner's synchronous taker of event batches (the topic host's pump): set, the
        #: reader hands each batch to it in the pipe read's own scheduler pass instead of
        #: through `events`, which still ends with the one `SessionEnded`. A taker that
        #: raises ends the session (an internal error, like any bug in the reader).
        self.take_batch: Callable[[EventBatch], None] | None = None
        #: trio.current_time() at spawn and at `Ready` (for statistics and benchmarks).
        self.spawned_at = 0.0
        self.ready_at = 0.0
        #: Minimum spacing of stdout reads while the driver streams flat out (`pipe_reader`).
        self.read_pace = read_pace
        #: CPU priority of the process and its session's group (`priority`; 0: the daemon's).
        self.nice = nice

        self._argv = list(argv)
        self._limits = limits
        self._init = init
        self._env = dict(env)
        self._cwd = cwd
        self._handshake_timeout = handshake_timeout
        self._close_timeout = close_timeout
        self._terminate_timeout = terminate_timeout
        self._out_codec: Codec[HostCommand] = Codec(HostCommand, "msgpack", max_frame_size)
        self._reader: MessageReader[DriverEvent] = MessageReader(
            Codec(DriverEvent, "msgpack", max_frame_size)
        )
        self._send_events, self.events = trio.open_memory_channel[EventBatch | SessionEnded](
            event_buffer
        )
        self._reaper = reaper
        #: Reads stdout while it is quiet and batches go to `take_batch` (`pipe_hub`).
        self._hub = hub
        self._redactor = Redactor(redact)
        self._tail = StderrTail(redact=self._redactor)
        self._log = RedactingLog(logging.getLogger(f"hostd.driver.{driver}"), self._redactor)
        self._proc: child_process.Child | None = None
        self._send_lock = trio.Lock()
        self._early: list[DriverEvent] = []
        self._failure: Failure | None = None
        self._fatal: DriverFatal | None = None
        self._closing = False
        self._stdout_eof = trio.Event()
        self._stderr_eof = trio.Event()
        self._turn_waiters: dict[str, trio.Event] = {}
        self._turns: dict[str, bool] = {}  # see SessionEnd.active_turn
        self._init_frame = b""

    # --- public -------------------------------------------------------------------------------

    @property
    def alive(self) -> bool:
        """Running and usable: not ended, not closing, not condemned."""
        return not self.ended.is_set() and not self._closing and self._failure is None

    @property
    def stderr_tail(self) -> str:
        return self._tail.text()

    async def send(self, cmd: HostCommand) -> None:
        """Write one command (whole, after any a concurrent task is writing). Raises
        `DriverCrashed` only when the process is gone or going: nothing of `cmd` reached it
        (a `Send`'s turn never ran there, so it may go to a new process)."""
        if self.ended.is_set() or self._proc is None or self._proc.stdin is None:
            raise self._gone_error()
        if isinstance(cmd, Send) and cmd.options and self.check_send is not None:
            self.check_send(cmd.options)  # refused: nothing reaches the driver
        try:
            frame = self._out_codec.encode_frame(cmd)
        except (FrameTooLarge, msgspec.EncodeError, TypeError) as exc:
            # Our side cannot put it on the wire (e.g. a message over the frame limit): the
            # caller fails the turn with this, the session itself is fine.
            raise DriverProtocolError(
                f"cannot send {type(cmd).__name__} to driver {self.driver!r}: {exc}",
                driver=self.driver,
            ) from None
        turn = cmd.turn_id if isinstance(cmd, Send) else None
        if turn is not None:
            # Before the write: the TurnEnd may be read before send_all returns.
            first = not self._turns
            self._turns[turn] = False
            if first:
                self._call_hook(self.on_turn_start)
        try:
            async with self._send_lock:
                await self._proc.stdin.send_all(frame)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            if turn is not None:
                self._turn_ended(turn)  # it never got the turn (e.g. it died between turns)
            # The pipe broke because the process is dying: give the reader a moment to see
            # the exit, so the error carries the exit code and the stderr tail.
            with trio.move_on_after(EXIT_AFTER_EOF):
                await self.ended.wait()
            raise self._gone_error() from None
        if turn is not None and turn in self._turns:
            self._turns[turn] = True

    async def interrupt(self, turn_id: str, grace: float = 3.0) -> None:
        """Send `Interrupt`; kill the process if no `TurnEnd(turn_id)` passes within `grace`.

        Returns once the turn ended or the process is gone. A kill ends `events` with
        `SessionEnded(DriverTimeout)` saying the driver did not stop.
        """
        if self.ended.is_set() or turn_id not in self._turns:
            return
        done = self._turn_waiters.setdefault(turn_id, trio.Event())
        # The grace covers the write too: a driver that stopped reading its stdin cannot
        # make us wait forever for the pipe.
        with trio.move_on_after(grace):
            try:
                await self.send(Interrupt(turn_id=turn_id))
            except DriverCrashed:
                return
            await done.wait()
        if not done.is_set() and not self.ended.is_set():
            self.kill(
                DriverTimeout,
                f"driver {self.driver!r} did not stop turn {turn_id} within {grace:g}s "
                "of an interrupt; killed it",
            )
            await self.ended.wait()

    async def aclose(self) -> None:
        """`Close`, then terminate, then kill, each bounded; returns once reaped.

        If cancelled, kills at once and still waits for the reap (shielded, it is quick).
        """
        if self.ended.is_set():
            return
        proc = self._proc
        if proc is None:
            return
        self._closing = True
        try:
            # One budget for the Close write (a driver that stopped reading its stdin would
            # block it) and the exit that should follow.
            with trio.move_on_after(self._close_timeout):
                if proc.stdin is not None:
                    try:
                        async with self._send_lock:
                            await proc.stdin.send_all(self._out_codec.encode_frame(Close()))
                        # EOF says the same to a driver that ignores Close.
                        await proc.stdin.aclose()
                    except (trio.BrokenResourceError, trio.ClosedResourceError):
                        pass
                await self.ended.wait()
                return
            self._log.warning(
                "driver %s (pid %d) did not exit within %gs of close; terminating",
                self.driver,
                self.pid,
                self._close_timeout,
            )
            self._signal(signal.SIGTERM)
            with trio.move_on_after(self._terminate_timeout):
                await self.ended.wait()
                return
            self._log.warning("driver %s (pid %d) ignored SIGTERM; killing", self.driver, self.pid)
            self._signal(signal.SIGKILL)
        except trio.Cancelled:
            self._signal(signal.SIGKILL)
            with trio.CancelScope(shield=True):
                await self.ended.wait()
            raise
        await self.ended.wait()

    def kill(self, cls: type[DriverError], message: str) -> None:
        """Kill the process group now; `events` will end with `cls(message)`.

        The first reason given wins (a second kill adds nothing).
        """
        if self._failure is None and not self.ended.is_set():
            self._failure = (cls, message)
        self._signal(signal.SIGKILL)

    # --- the task -----------------------------------------------------------------------------

    async def run(
        self, *, task_status: trio.TaskStatus[DriverSession] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Spawn, handshake, then read until the process ends. See the module docstring."""
        try:
            self._init_frame = self._out_codec.encode_frame(self._init)
        except (FrameTooLarge, msgspec.EncodeError, TypeError) as exc:
            raise InvalidArgument(
                f"cannot start driver {self.driver!r}: its options do not encode: {exc}",
                details={"driver": self.driver},
            ) from None
        await self._spawn()
        started = False
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._read_stderr)
                if self.nice:
                    nursery.start_soon(lower_priority, self.pid, self.nice)
                failure = await self._handshake()
                if failure is None:
                    started = True
                    self.ready_at = trio.current_time()
                    task_status.started(self)
                    reader_scope = trio.CancelScope()
                    nursery.start_soon(self._watch_exit, reader_scope)
                    with reader_scope:
                        try:
                            failure = await self._read_events()
                        except Exception as exc:  # a bug here ends this session, not the daemon
                            log.exception("reading driver %s failed", self.driver)
                            failure = (
                                DriverCrashed,
                                f"internal error reading driver {self.driver!r}: {exc!r}",
                            )
                if failure is not None and self._failure is None:
                    self._failure = failure
                if self._failure is not None and self._fatal is None:
                    self._signal(signal.SIGKILL)
                await self._settle()
                nursery.cancel_scope.cancel()
        finally:
            with trio.CancelScope(shield=True):
                await self._reap()
                end = self._end_error()
                self.end_error = end
                await self._deliver_end(end, graceful=started)
        if not started:
            assert self.end_error is not None
            raise self.end_error

    async def _spawn(self) -> None:
        if self._cwd:
            try:
                await trio.Path(self._cwd).mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise DriverUnavailable(
                    f"cannot create working directory {self._cwd!r} for driver "
                    f"{self.driver!r}: {exc}",
                    driver=self.driver,
                ) from None
        self.spawned_at = trio.current_time()
        try:
            # Own session (no Ctrl-C from the daemon's terminal). Parent death (SIGTERM: the
            # harness ends its tree; bwrap's --die-with-parent) means the daemon's death.
            self._proc = await child_process.spawn(
                self._argv,
                env=self._env,
                cwd=self._cwd or None,
                pdeathsig=signal.SIGTERM,
                limits=self._limits,
            )
        except OSError as exc:
            raise DriverUnavailable(
                f"cannot start driver {self.driver!r} ({self._argv[0]}): {exc}",
                driver=self.driver,
            ) from None
        self.pid = self._proc.pid
        if self._reaper is not None:
            self._reaper.add(self.pid)  # its group dies with the daemon, however that dies
        self._log.debug("started driver %s pid %d in %s", self.driver, self.pid, self._cwd)

    async def _handshake(self) -> Failure | None:
        proc = self._proc
        assert proc is not None and proc.stdin is not None and proc.stdout is not None
        timeout = self._handshake_timeout
        try:
            with trio.fail_after(timeout):
                try:
                    await proc.stdin.send_all(self._init_frame)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    pass  # it died at once: reading stdout will say so, with its exit code
                while True:
                    data = await proc.stdout.receive_some(READ_SIZE)
                    if not data:
                        self._stdout_eof.set()
                        return (
                            DriverCrashed,
                            f"driver {self.driver!r} exited during the handshake",
                        )
                    try:
                        items = self._decode(data)
                    except ProtocolError as exc:
                        return (
                            DriverProtocolError,
                            f"driver {self.driver!r} wrote a bad frame during the handshake: {exc}",
                        )
                    for i, item in enumerate(items):
                        if isinstance(item, InvalidMessage):
                            self._log.warning("driver %s: skipped event: %s", self.driver, item)
                        elif isinstance(item, Ready):
                            if item.protocol_version[0] != PROTOCOL_VERSION[0]:
                                return (
                                    DriverProtocolError,
                                    f"driver {self.driver!r} speaks protocol "
                                    f"{item.protocol_version[0]}.x, hostd "
                                    f"{PROTOCOL_VERSION[0]}.x: install matching versions",
                                )
                            self.capabilities = item.capabilities
                            self.driver_version = item.version
                            self._early.extend(
                                x for x in items[i + 1 :] if not isinstance(x, InvalidMessage)
                            )
                            return None
                        elif isinstance(item, DriverFatal):
                            self._fatal = item
                            return (
                                DriverUnavailable,
                                f"driver {self.driver!r} refused to start: {item.message}",
                            )
                        else:
                            # Only Ready is valid first; keep others (logs) for the topic
                            # rather than fail a driver over a chatty start.
                            self._early.append(item)
        except trio.TooSlowError:
            return (
                DriverTimeout,
                f"driver {self.driver!r} did not complete the handshake within {timeout:g}s",
            )

    async def _read_events(self) -> Failure | None:
        """Read stdout until EOF; one batch per read. Returns a failure for bad frames."""
        proc = self._proc
        assert proc is not None and proc.stdout is not None
        pending: list[DriverEvent | InvalidMessage] = list(self._early)
        self._early = []
        assert isinstance(proc.stdout, trio.lowlevel.FdStream)  # POSIX pipes
        # Not `receive_some`: its leading checkpoint would cost every read that waited one
        # more scheduler pass (at 100 streaming topics, a turn of hundreds of tasks); and the
        # reads of a driver streaming flat out are paced so their size does not depend on
        # timing (see `pipe_reader`).
        fd = proc.stdout.fileno()
        pipe = PipeReader(fd, size=READ_SIZE, pace=self.read_pace)
        hub = self._hub
        while True:
            if pending:
                await self._dispatch(pending)
                pending = []
            data = None
            if hub is not None and pipe.quiet and self.take_batch is not None:
                # Parked: the hub reads and hands over in its own task step (`_hub_ready`)
                # until something needs this task (see there).
                woke = await hub.park(fd, partial(self._hub_ready, pipe))
                if isinstance(woke, list):
                    pending = woke
                    continue
                if isinstance(woke, ProtocolError):
                    return (DriverProtocolError, f"driver {self.driver!r} wrote a bad frame: {woke}")
                if isinstance(woke, bytes):
                    data = woke
            if data is None:
                data = await pipe.receive()
            if not data:
                self._stdout_eof.set()
                try:
                    self._reader.close()
                except ProtocolError as exc:
                    return (DriverProtocolError, f"driver {self.driver!r}: {exc}")
                return None
            try:
                pending = self._decode(data)
            except ProtocolError as exc:
                return (
                    DriverProtocolError,
                    f"driver {self.driver!r} wrote a bad frame: {exc}",
                )

    def _turn_ended(self, turn_id: str) -> None:
        # A set, not one id: the driver answers a Send that arrives mid-turn with its own
        # TurnEnd(busy) while the first turn goes on, and that must not make us look idle.
        if turn_id in self._turns:
            del self._turns[turn_id]
            if not self._turns:
                self._call_hook(self.on_turn_end)
        waiter = self._turn_waiters.pop(turn_id, None)
        if waiter is not None:
            waiter.set()

    def _call_hook(self, hook: Callable[[DriverSession], None] | None) -> None:
        if hook is None:
            return
        try:
            hook(self)
        except Exception:  # the owner's bookkeeping must not break (or leak) a process
            log.exception("hook %r of driver %s failed", hook, self.driver)

    def __repr__(self) -> str:
        return (
            f"<DriverSession {self.driver} pid={self.pid} topic={self.topic_id!r} "
            f"alive={self.alive}>"
        )

