"""One ACP agent subprocess and the JSON-RPC connection to it (the trio shell).

`AgentProcess.start()` spawns the agent in its own process group; one reader task feeds
its stdout to the JSON-RPC connection, `hostd_acp.rpc_peer.RpcPeer` (the one ACP
implementation, also what `hostd acp` serves editors with): responses wake the caller of
`request()`, notifications go to `on_notification` in order (so every `session/update` sent
before a prompt's answer is delivered before the answer), requests run in their own task
through `on_request` and are answered (or refused with a JSON-RPC error) on one write lock.

Rules this module guards:

- The agent's whole process group ends with it. Agents do not reliably exit when stdin
  closes (claude-agent-acp 0.23.1 keeps running, and so does its Claude CLI child), so
  `aclose()` closes stdin, then signals the group: SIGTERM, a grace, SIGKILL. On Linux the
  agent also gets PDEATHSIG=SIGKILL, so a driver killed with SIGKILL takes the agent along
  (`hostd_protocol.child_process.spawn`: forked by the process's forker thread, which lives
  as long as the driver, never by a worker thread trio retires).
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
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import msgspec
import trio

from hostd_acp.jsonrpc import Dropped
from hostd_acp.rpc_peer import PeerGone, PeerRpcError, RpcPeer
from hostd_protocol.child_process import Child, spawn

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


#: The agent answered a request with a JSON-RPC error (`hostd_acp.rpc_peer`, shared with
#: `hostd acp`); `RequestRefused` from `on_request` answers the agent with one.
AgentRpcError = PeerRpcError


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
        self._stderr: collections.deque[str] = collections.deque(maxlen=max(1, stderr_lines))
        self._proc: Child | None = None
        # The JSON-RPC connection (the same implementation `hostd acp` serves editors with).
        self._peer = RpcPeer(
            self._write,
            on_request=on_request,
            on_notification=on_notification,
            on_drop=on_drop,
            max_line=max_line,
            max_inflight=MAX_INFLIGHT_REQUESTS,
        )
        self._scope = trio.CancelScope()
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
        self._peer.close(error.message)  # pending requests raise `self.gone` (see request)
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
        stdout = proc.stdout

        async def receive() -> bytes:
            try:
                return await stdout.receive_some(65536)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return b""

        await self._peer.serve(receive, nursery)
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

    # --- writing --------------------------------------------------------------------------

    async def _write(self, data: bytes) -> None:
        proc = self._proc
        if proc is None or proc.stdin is None or self.gone is not None:
            raise trio.ClosedResourceError("the agent is not running")
        await proc.stdin.send_all(data)

    def _peer_gone(self) -> AgentGone:
        return self.gone or self._gone_error(
            f"the ACP agent {self.name!r} is not running or stopped reading its input"
        )

    async def notify(self, method: str, params: Any) -> None:
        try:
            await self._peer.notify(method, params)
        except PeerGone:
            raise self._peer_gone() from None

    async def request(
        self, method: str, params: Any, on_answer: Callable[[], None] | None = None
    ) -> msgspec.Raw:
        """Send a request and wait for its answer; cancel-safe (a late answer is dropped).

        `on_answer` runs in the reader task the moment the answer is read, before any later
        message is dispatched.

        Raises:
            AgentRpcError: the agent answered with a JSON-RPC error.
            AgentGone: the agent exited (or stopped reading) first.
        """
        try:
            return await self._peer.request(method, params, on_answer)
        except PeerGone:
            raise self._peer_gone() from None
