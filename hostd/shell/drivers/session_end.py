"""How a driver session ends: the process settles or is killed, is reaped, its stderr is
drained, and `events` gets exactly one `SessionEnded` carrying the error the session ended
with (redacted), or None for a clean close.

The end-of-life half of `DriverSession` (`hostd.shell.drivers.session`), mixed in. Its rules
are the session's: every process is reaped on every path (the caller shields the reap), a
stop escalates in bounded steps, and no error leaves here unredacted.
"""

from __future__ import annotations

import logging
import math
import signal
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import trio

from hostd.core.redaction import Redactor
from hostd.shell.drivers.reaper import GroupReaper
from hostd.shell.drivers.stderr_tail import StderrTail
from hostd_protocol import child_process
from hostd_protocol.driver_messages import DriverEvent, DriverFatal
from hostd_protocol.errors import DriverCrashed, DriverError, DriverTimeout

if TYPE_CHECKING:
    from hostd.shell.drivers.session import DriverSession

__all__ = ["Failure", "SessionEnd", "SessionEnded", "clone_error"]

log = logging.getLogger(__name__)

#: One read from a pipe. The kernel pipe buffer is 64 KiB on Linux, so a bigger read rarely
#: returns more, and each read allocates this much up front.
READ_SIZE = 65536
#: After stdout ends, how long the process may take to exit before it is killed.
EXIT_AFTER_EOF = 1.0
#: After the process exited, how long to wait for the rest of stderr (a grandchild may hold
#: the pipe open forever) and for stdout to end.
PIPE_GRACE = 0.2
#: How long the end marker waits for room in a full events channel.
END_DELIVERY_TIMEOUT = 5.0


@dataclass(frozen=True)
class SessionEnded:
    """The last item of `DriverSession.events`: the process is gone (and reaped)."""

    #: None for a clean close (we asked it to stop and it exited 0), else why it ended.
    error: DriverError | None = None


#: Why a session failed: the error class to end it with, and the message.
Failure = tuple[type[DriverError], str]


class SessionEnd:
    """The end of `DriverSession`'s life (a mixin: one concept, kept beside its rules)."""

    driver: str
    pid: int
    exit_code: int | None
    end_error: DriverError | None
    ended: trio.Event
    on_end: Callable[[DriverSession], None] | None
    _proc: child_process.Child | None
    _tail: StderrTail
    _log: logging.LoggerAdapter  # type: ignore[type-arg]
    _redactor: Redactor
    _reaper: GroupReaper | None
    _failure: Failure | None
    _fatal: DriverFatal | None
    _closing: bool
    _stdout_eof: trio.Event
    _stderr_eof: trio.Event
    _turn_waiters: dict[str, trio.Event]
    _send_events: trio.MemorySendChannel[list[DriverEvent] | SessionEnded]

    #: Turns sent and not ended, in order; True once their Send was written whole.
    _turns: dict[str, bool]

    @property
    def active_turn(self) -> str | None:
        """The latest turn sent whose `TurnEnd` has not been read yet."""
        return next(reversed(self._turns), None)

    @property
    def running_turn(self) -> str | None:
        """The latest turn whose `Send` reached the driver, `TurnEnd` not read: the one a
        death of the process fails (a Send that never got through fails none)."""
        return next((t for t in reversed(self._turns) if self._turns[t]), None)

    if TYPE_CHECKING:  # provided by DriverSession

        def _call_hook(self, hook: Callable[[DriverSession], None] | None) -> None: ...

    async def _watch_exit(self, reader_scope: trio.CancelScope) -> None:
        """If the process exits but stdout stays open (a grandchild holds it), stop reading."""
        proc = self._proc
        assert proc is not None
        await proc.wait()
        with trio.move_on_after(PIPE_GRACE):
            await self._stdout_eof.wait()
            return
        self._log.warning("driver %s exited but its stdout stayed open", self.driver)
        reader_scope.cancel()

    async def _read_stderr(self) -> None:
        proc = self._proc
        assert proc is not None and proc.stderr is not None
        try:
            while True:
                try:
                    data = await proc.stderr.receive_some(READ_SIZE)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    break
                if not data:
                    break
                for line in self._tail.feed(data):
                    self._log.debug("%s[%d]: %s", self.driver, self.pid, line)
        except Exception:  # never let the tail take the session (or the daemon) down
            log.exception("reading stderr of driver %s failed", self.driver)
        finally:
            for line in self._tail.close():
                self._log.debug("%s[%d]: %s", self.driver, self.pid, line)
            self._stderr_eof.set()

    async def _settle(self) -> None:
        """stdout ended (or we gave up on it): let the process exit and stderr drain.

        A process we asked to close exits within `aclose`'s budget (Close, then SIGTERM, then
        SIGKILL, each bounded), not `EXIT_AFTER_EOF`: its exit after its output ended is part
        of a clean close (an interpreter's teardown took over 1 s on a loaded machine, and the
        kill made a clean close look like `did not exit after close`).
        """
        proc = self._proc
        assert proc is not None
        with trio.move_on_after(math.inf if self._closing else EXIT_AFTER_EOF):
            await proc.wait()
        if proc.returncode is None:
            if not self._closing:
                self._failure = self._failure or (
                    DriverCrashed,
                    f"driver {self.driver!r} closed its output but did not exit; killed it",
                )
            self._signal(signal.SIGKILL)
            await proc.wait()
        with trio.move_on_after(PIPE_GRACE):
            await self._stderr_eof.wait()

    async def _reap(self) -> None:
        """Shielded by the caller: make sure the process is dead and waited for."""
        proc = self._proc
        if proc is None:
            return
        if proc.returncode is None:
            self._signal(signal.SIGKILL)
        await proc.wait()
        self.exit_code = proc.returncode
        if self._reaper is not None:
            self._reaper.remove(proc.pid)
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                await stream.aclose()
        for waiter in self._turn_waiters.values():
            waiter.set()
        self._turn_waiters.clear()

    def _end_error(self) -> DriverError | None:
        end = self._end_error_unredacted()
        if end is None or not self._redactor:
            return end
        # Host-made messages quote the driver (a fatal message, a decode error, a kill
        # reason); the tail is redacted already.
        return _with_message(end, self._redactor.text(end.message))

    def _end_error_unredacted(self) -> DriverError | None:
        code = self.exit_code
        tail = self._tail.text()
        if self._failure is not None:
            cls, message = self._failure
            return cls(message, driver=self.driver, exit_code=code, stderr_tail=tail)
        if self._fatal is not None:
            return DriverCrashed(
                f"driver {self.driver!r} gave up: {self._fatal.message}",
                driver=self.driver,
                exit_code=code,
                stderr_tail=tail,
                details={"fatal_code": self._fatal.code},
            )
        if self._closing:
            if code == 0:
                return None
            if code is not None and code < 0:
                return DriverTimeout(
                    f"driver {self.driver!r} did not exit after close; {_describe_exit(code)}",
                    driver=self.driver,
                    exit_code=code,
                    stderr_tail=tail,
                )
            return DriverCrashed(
                f"driver {self.driver!r} {_describe_exit(code)} while closing",
                driver=self.driver,
                exit_code=code,
                stderr_tail=tail,
            )
        # Only a turn the driver got: one whose Send found it dead already never ran.
        during = f" during turn {self.running_turn}" if self.running_turn else ""
        return DriverCrashed(
            f"driver {self.driver!r} {_describe_exit(code)}{during}",
            driver=self.driver,
            exit_code=code,
            stderr_tail=tail,
        )

    async def _deliver_end(self, end: DriverError | None, *, graceful: bool) -> None:
        if end is not None:
            self._log.info("driver session ended: %s", end.message)
        self._call_hook(self.on_end)
        try:
            if graceful:
                # Ordered after every batch; bounded so a consumer that stopped reading
                # cannot pin this task (and so the supervisor) forever. If it times out the
                # channel still closes and `end_error` holds the reason.
                with trio.move_on_after(END_DELIVERY_TIMEOUT):
                    await self._send_events.send(SessionEnded(end))
            else:
                self._send_events.send_nowait(SessionEnded(end))
        except (trio.BrokenResourceError, trio.ClosedResourceError, trio.WouldBlock):
            pass
        finally:
            await self._send_events.aclose()
            self.ended.set()

    def _signal(self, sig: signal.Signals) -> None:
        proc = self._proc
        # Only while unreaped (`Child` checks): after the reap the pid may be another's.
        if proc is None:
            return
        if sig == signal.SIGKILL:
            proc.end_tree()  # the group and every descendant, setsid'd ones included
        else:
            proc.signal(sig, group=True)

    def _gone_error(self) -> DriverCrashed:
        end = self.end_error
        if end is not None:
            # A fresh instance per raise: one exception object raised in several tasks
            # would grow one traceback from all of them.
            return DriverCrashed(
                end.message,
                driver=self.driver,
                exit_code=end.exit_code,
                stderr_tail=end.stderr_tail,
            )
        state = "is closing" if self._closing else "is gone"
        return DriverCrashed(
            f"driver {self.driver!r} session {state}",
            driver=self.driver,
            exit_code=self.exit_code,
            stderr_tail=self._tail.text(),
        )


def _with_message(err: DriverError, message: str) -> DriverError:
    if message == err.message:
        return err
    details: dict[str, Any] = {
        k: v for k, v in err.details.items() if k not in ("driver", "exit_code", "stderr_tail")
    }
    return type(err)(
        message,
        driver=err.driver,
        exit_code=err.exit_code,
        stderr_tail=err.stderr_tail,
        details=details,
    )


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "stopped"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name}"
    return f"exited with code {code}"


def clone_error(err: DriverError) -> DriverError:
    """A fresh copy of `err`, to raise in another task (tracebacks are per raise)."""
    details: dict[str, Any] = {
        k: v for k, v in err.details.items() if k not in ("driver", "exit_code", "stderr_tail")
    }
    return type(err)(
        err.message,
        driver=err.driver,
        exit_code=err.exit_code,
        stderr_tail=err.stderr_tail,
        details=details,
    )
