"""One ACP agent subprocess and the JSON-RPC connection to it (the trio shell).

`AgentProcess.start()` spawns the agent in its own process group; one reader task feeds
its stdout to `jsonrpc.LineDecoder` and dispatches: responses wake the caller of
`request()`, notifications go to `on_notification` in order (so every `session/update` sent
before a prompt's answer is delivered before the answer), requests run in their own task
through `on_request` and are answered (or refused with a JSON-RPC error) on one write lock.

Rules this module guards:

- The agent's whole process group ends with it. Agents do not reliably exit when stdin
  closes (claude-agent-acp 0.23.1 keeps running, and so does its Claude CLI child), so
  `aclose()` closes stdin, then signals the group: SIGTERM, a grace, SIGKILL. On Linux the
  agent also gets PDEATHSIG=SIGKILL, so a driver killed with SIGKILL takes the agent along
  (`hostd_acp.child`: forked from the driver's own thread, never a worker thread).
- A caller never waits forever on a dead agent: when stdout ends, every pending request
  fails with `AgentGone` carrying the exit code and the stderr tail.
- Foreign exceptions are mapped here, once: OS/pipe errors become `AgentGone`; a JSON-RPC
  error answer becomes `AgentRpcError`.
- Memory is bounded: one line at most `max_line` bytes (longer ones dropped and reported),
  a stderr tail of `stderr_lines` lines, at most `MAX_INFLIGHT_REQUESTS` agent requests in
  flight (more are refused).
"""

from __future__ import annotations

import collections
import itertools
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import msgspec
import trio

from hostd_acp.child import Child, spawn
from hostd_acp.jsonrpc import (
    INTERNAL_ERROR,
    Dropped,
    LineDecoder,
    Notification,
    Request,
    RequestId,
    Response,
    encode_error,
    encode_notification,
    encode_request,
    encode_result,
)

log = logging.getLogger("hostd_acp")

#: Requests from the agent handled at once (permission prompts, file reads).
MAX_INFLIGHT_REQUESTS = 32
#: After SIGTERM to the group, how long before SIGKILL.
TERM_GRACE = 1.0
#: How long to wait for the exit code once stdout has ended.
EXIT_WAIT = 2.0


class AgentGone(Exception):
    """The agent process exited (or its pipes broke) while we needed it."""

    def __init__(self, message: str, exit_code: int | None, stderr_tail: str) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code
        self.stderr_tail = stderr_tail


class AgentRpcError(Exception):
    """The agent answered a request with a JSON-RPC error."""

    def __init__(self, method: str, code: int, message: str, data: Any = None) -> None:
        super().__init__(f"{method}: {message} (code {code})")
        self.method = method
        self.code = code
        self.message = message
        self.data = data


class RequestRefused(Exception):
    """Raise from `on_request` to answer the agent with this JSON-RPC error."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


NotificationHandler = Callable[[str, msgspec.Raw], Awaitable[None]]
RequestHandler = Callable[[str, msgspec.Raw], Awaitable[Any]]
DropHandler = Callable[[Dropped], Awaitable[None]]


class AgentProcess:
    """A running ACP agent; create with `start`, end with `aclose`."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        *,
        env: dict[str, str],
        cwd: str,
        on_notification: NotificationHandler,
        on_request: RequestHandler,
        on_drop: DropHandler,
        max_line: int,
        stderr_lines: int = 40,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self._env = env
        self._cwd = cwd
        self._on_notification = on_notification
        self._on_request = on_request
        self._on_drop = on_drop
        self._decoder = LineDecoder(max_line)
        self._stderr: collections.deque[str] = collections.deque(maxlen=max(1, stderr_lines))
        self._proc: Child | None = None
        self._ids = itertools.count(1)
        self._pending: dict[
            RequestId, tuple[Callable[[], None] | None, trio.Event, list[Response]]
        ] = {}
        self._write_lock = trio.Lock()
        self._scope = trio.CancelScope()
        self._request_slots = trio.Semaphore(MAX_INFLIGHT_REQUESTS)
        self.gone: AgentGone | None = None
        self.exited = trio.Event()
        self._closing = False

    # --- life -----------------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def alive(self) -> bool:
        return self._proc is not None and self.gone is None

    def stderr_tail(self) -> str:
        return "\n".join(self._stderr)

    async def start(self, nursery: trio.Nursery) -> None:
        """Spawn the agent and its reader tasks (in `nursery`, under this object's scope)."""
        try:
            self._proc = await spawn(self.argv, env=self._env, cwd=self._cwd)
        except OSError as exc:
            raise AgentGone(
                f"could not start the ACP agent {self.name!r} ({self.argv[0]}): "
                f"{exc.strerror or exc}",
                None,
                "",
            ) from None
        nursery.start_soon(self._run_readers)

    async def _run_readers(self) -> None:
        with self._scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._read_stderr)
                await self._read_stdout(nursery)

    async def aclose(self) -> None:
        """End the agent and its whole process group; idempotent; never raises."""
        self._closing = True
        proc = self._proc
        with trio.CancelScope(shield=True):
            if proc is not None:
                if proc.stdin is not None:
                    try:
                        await proc.stdin.aclose()
                    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                        pass
                if proc.returncode is None:
                    self._signal_group(signal.SIGTERM)
                    with trio.move_on_after(TERM_GRACE):
                        await proc.wait()
                # The group may outlive its leader (the agent's CLI child): kill it anyway.
                self._signal_group(signal.SIGKILL)
                await proc.wait()
            self._fail_pending(self._gone_error("the ACP agent was closed"))
            self._scope.cancel()
            if proc is not None:
                for stream in (proc.stdout, proc.stderr):
                    if stream is not None:
                        await stream.aclose()

    def _signal_group(self, sig: signal.Signals) -> None:
        proc = self._proc
        if proc is None:
            return
        try:
            # The group id is the agent's pid (start_new_session); it stays reserved while
            # any member lives, so this never hits a stranger's group.
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def _gone_error(self, message: str) -> AgentGone:
        code = self._proc.returncode if self._proc is not None else None
        return AgentGone(message, code, self.stderr_tail())

    def _fail_pending(self, error: AgentGone) -> None:
        if self.gone is None:
            self.gone = error
        for _on_answer, done, _box in self._pending.values():
            done.set()
        self.exited.set()

    # --- reading --------------------------------------------------------------------------

    async def _read_stderr(self) -> None:
        assert self._proc is not None and self._proc.stderr is not None
        pending = b""
        while True:
            try:
                data = await self._proc.stderr.receive_some(65536)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return
            if not data:
                if pending:
                    self._stderr_line(pending)
                return
            pending += data
            *lines, pending = pending.split(b"\n")
            for line in lines:
                self._stderr_line(line)
            if len(pending) > 4096:
                self._stderr_line(pending)
                pending = b""

    def _stderr_line(self, raw: bytes) -> None:
        line = raw.decode("utf-8", errors="replace").rstrip("\r")
        if len(line) > 2000:
            line = line[:2000] + "..."
        self._stderr.append(line)
        print(f"{self.name}: {line}", file=sys.stderr)

    async def _read_stdout(self, nursery: trio.Nursery) -> None:
        proc = self._proc
        assert proc is not None and proc.stdout is not None
        while True:
            try:
                data = await proc.stdout.receive_some(65536)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                data = b""
            if not data:
                break
            for message in self._decoder.feed(data):
                await self._dispatch(message, nursery)
        # stdout ended: the agent exited (or closed it, which is as good as gone).
        with trio.move_on_after(EXIT_WAIT):
            await proc.wait()
        code = proc.returncode
        if self._closing:
            reason = "the ACP agent was closed"
        elif code is None:
            reason = f"the ACP agent {self.name!r} closed its output"
        elif code < 0:
            reason = f"the ACP agent {self.name!r} was killed by signal {-code}"
        else:
            reason = f"the ACP agent {self.name!r} exited"
        # Give stderr a moment to deliver its last lines (the reason usually is there).
        with trio.move_on_after(0.2):
            await trio.sleep(0.05)
        self._fail_pending(self._gone_error(reason))

    async def _dispatch(self, message: Any, nursery: trio.Nursery) -> None:
        if isinstance(message, Response):
            entry = self._pending.get(message.id)
            if entry is None:
                await self._on_drop(
                    Dropped("unknown-id", 0, f"a response to unknown request id {message.id!r}")
                )
                return
            on_answer, done, box = entry
            box.append(message)
            done.set()
            if on_answer is not None:
                # In the reader, before the next line is dispatched: what follows the answer
                # is never taken for part of the request (late updates).
                on_answer()
        elif isinstance(message, Notification):
            await self._on_notification(message.method, message.params)
        elif isinstance(message, Request):
            try:
                self._request_slots.acquire_nowait()
            except trio.WouldBlock:
                await self._send(
                    encode_error(message.id, INTERNAL_ERROR, "too many requests in flight")
                )
                return
            nursery.start_soon(self._serve_request, message)
        else:
            await self._on_drop(message)

    async def _serve_request(self, request: Request) -> None:
        try:
            try:
                result = await self._on_request(request.method, request.params)
            except RequestRefused as exc:
                reply = encode_error(request.id, exc.code, exc.message)
            except Exception as exc:  # a handler bug answers the agent, never kills the reader
                log.exception("handling %s failed", request.method)
                reply = encode_error(request.id, INTERNAL_ERROR, f"{type(exc).__name__}: {exc}")
            else:
                reply = encode_result(request.id, result)
            try:
                await self._send(reply)
            except AgentGone:
                pass
        finally:
            self._request_slots.release()

    # --- writing --------------------------------------------------------------------------

    async def _send(self, data: bytes) -> None:
        proc = self._proc
        if proc is None or proc.stdin is None or self.gone is not None:
            raise self.gone or self._gone_error(f"the ACP agent {self.name!r} is not running")
        async with self._write_lock:
            try:
                await proc.stdin.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                raise self._gone_error(
                    f"the ACP agent {self.name!r} stopped reading its input"
                ) from None

    async def notify(self, method: str, params: Any) -> None:
        await self._send(encode_notification(method, params))

    async def request(
        self, method: str, params: Any, on_answer: Callable[[], None] | None = None
    ) -> msgspec.Raw:
        """Send a request and wait for its answer; cancel-safe (a late answer is dropped).

        `on_answer` runs in the reader task the moment the answer is read, before any later
        message is dispatched.
        """
        request_id = next(self._ids)
        done = trio.Event()
        box: list[Response] = []
        self._pending[request_id] = (on_answer, done, box)
        try:
            await self._send(encode_request(request_id, method, params))
            await done.wait()
        finally:
            del self._pending[request_id]
        if not box:
            raise self.gone or self._gone_error(f"the ACP agent {self.name!r} is gone")
        response = box[0]
        if response.error is not None:
            err = response.error
            raise AgentRpcError(method, err.code, err.message, err.data)
        return response.result
