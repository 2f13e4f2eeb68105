"""Run a driver over stdin/stdout so its author writes only the vendor translation.

A driver subclasses `DriverBase` and calls `run_driver(MyDriver())` from its `__main__`. The
harness owns everything else:

- the frame loop (stdin commands in; stdout events out through `driver_output.FrameOutput`:
  in emit order, everything emitted in one scheduler pass in one write, backpressure when
  the host reads slowly);
- the handshake (`Init` -> `Ready` or `DriverFatal`);
- one turn at a time, each ending with exactly one `TurnEnd` whatever the driver code does
  (returns, raises, is interrupted);
- steering bookkeeping (`TurnContext.take_steers` / `message_start`), so `SteerInjected`,
  `SteerBoundary` and `SteerUndelivered` are always consistent;
- approvals (`TurnContext.request_approval` waits for the answer; an interrupt denies; a
  cancelled wait withdraws the request);
- model calls (`TurnContext.model_call_start` / `model_call_end`): reported only when the
  host asked for them (`Init.report_model_calls`, a tracing host), free otherwise;
- stray `print()`s: fd 1 is moved aside for frames and pointed at stderr, so a library that
  prints cannot corrupt the channel;
- the driver's process tree (`run_driver`, `hostd_protocol.child_process`): the process is a
  child subreaper, so nothing it starts (a vendor CLI, an MCP server in its own session, a
  tool) escapes to init; SIGTERM ends the session as `Close` does; at exit every descendant
  still running is ended (SIGTERM, then SIGKILL after `TREE_GRACE`). Children the driver
  starts itself should come from `child_process.spawn` (they die with the driver even if
  it is SIGKILLed).

Needs trio (`pip install hostd-protocol[driver]`).
"""

from __future__ import annotations

import itertools
import os
import signal
import sys
import traceback
from collections.abc import Awaitable, Callable, Sequence
from contextlib import suppress
from typing import Any

import trio

from hostd_protocol import child_process
from hostd_protocol.common import (
    PROTOCOL_VERSION,
    ApprovalOption,
    Capabilities,
    Chunk,
    TurnStatus,
    Usage,
)
from hostd_protocol.driver_messages import (
    ApprovalRequest,
    ApprovalResponse,
    ApprovalWithdrawn,
    ChunkEvent,
    Close,
    DriverEvent,
    DriverFatal,
    HostCommand,
    Init,
    Interrupt,
    Log,
    ModelCallEnd,
    ModelCallStart,
    Prewarm,
    Ready,
    Redirect,
    Send,
    SteerBoundary,
    SteerInjected,
    SteerUndelivered,
    TurnEnd,
    Warmed,
)
from hostd_protocol.driver_output import FrameOutput
from hostd_protocol.errors import (
    DriverError,
    DriverTurnError,
    HandshakeError,
    HostdError,
    InvalidMessage,
    ProtocolError,
    VersionMismatch,
)
from hostd_protocol.framing import DEFAULT_MAX_FRAME_SIZE, Codec, MessageReader

#: Raise from `DriverBase.run_turn` to end the turn as `error` with this message.
TurnFailed = DriverTurnError

#: At exit, how long what the driver left running gets between SIGTERM and SIGKILL: well
#: inside the host's close budget (2 s by default), so the tree is gone before the host
#: would escalate.
TREE_GRACE = 0.5
#: How long `DriverBase.close` may take when the session ends.
CLOSE_BUDGET = 5.0
#: Why an approval request was withdrawn when the driver gave no reason; since which protocol
#: version hosts know `ApprovalWithdrawn`.
WITHDRAWN, WITHDRAW_VERSION = "the driver stopped waiting for an answer", (1, 7)


class TurnContext:
    """What a running turn can do. Handed to `DriverBase.run_turn`."""

    def __init__(self, harness: _Harness, send: Send, capabilities: Capabilities) -> None:
        self._harness = harness
        self.send = send
        self.turn_id = send.turn_id
        self.capabilities = capabilities
        self.cancel_scope = trio.CancelScope()
        self.interrupted = False
        self._pending_steers: list[Redirect] = []
        self._injected_since_boundary: list[str] = []
        self._approvals: dict[str, tuple[trio.Event, list[ApprovalResponse]]] = {}
        self._approval_ids = itertools.count(1)
        self._model_call_ids = itertools.count(1)
        self.emitted_output = False

    @property
    def traceparent(self) -> str:
        """The host's W3C trace context for this turn ("" when the host does not trace): pass
        it on as the `traceparent` header of vendor requests, or parent your own spans on it."""
        return self.send.traceparent

    async def emit(self, event: DriverEvent) -> None:
        """Send any event to the host (waits if the host is reading slowly)."""
        await self._harness.emit(event)

    async def chunk(self, chunk: Chunk) -> None:
        """Send one content chunk of this turn."""
        self.emitted_output = True
        await self._harness.emit(ChunkEvent(turn_id=self.turn_id, chunk=chunk))

    # --- model calls (tracing) ----------------------------------------------------------------

    @property
    def reports_model_calls(self) -> bool:
        """Whether the host asked for model-call events (a driver that builds them itself,
        rather than through `model_call_start` / `model_call_end`, sends them only then)."""
        return self._harness.report_model_calls

    async def model_call_start(self, model: str = "", provider: str = "") -> str:
        """Call when a request goes to the model; returns the call's id for `model_call_end`.
        Emits `ModelCallStart` only when the host asked for model calls (else costs nothing)."""
        call_id = f"m{next(self._model_call_ids)}"
        if self._harness.report_model_calls:
            await self._harness.emit(
                ModelCallStart(
                    turn_id=self.turn_id, call_id=call_id, model=model, provider=provider
                )
            )
        return call_id

    async def model_call_end(
        self,
        call_id: str,
        *,
        finish_reason: str = "",
        usage: Usage | None = None,
        response_model: str = "",
        response_id: str = "",
        error: str = "",
    ) -> None:
        """Call when that model call's answer is complete (or it failed: `error`)."""
        if self._harness.report_model_calls:
            await self._harness.emit(
                ModelCallEnd(
                    turn_id=self.turn_id,
                    call_id=call_id,
                    finish_reason=finish_reason,
                    usage=usage,
                    response_model=response_model,
                    response_id=response_id,
                    error=error,
                )
            )

    # --- steering -----------------------------------------------------------------------------

    @property
    def has_pending_steers(self) -> bool:
        return bool(self._pending_steers)

    async def take_steers(self) -> list[Redirect]:
        """At a safe injection point: take every pending steer, reported as injected.

        The driver must hand the returned texts to the model now (e.g. as additionalContext).
        """
        taken, self._pending_steers = self._pending_steers, []
        for steer in taken:
            self._injected_since_boundary.append(steer.steer_id)
            await self._harness.emit(SteerInjected(turn_id=self.turn_id, steer_id=steer.steer_id))
        return taken

    async def message_start(self) -> None:
        """Call at every top-level message start; emits `SteerBoundary` after injections."""
        if self._injected_since_boundary:
            ids, self._injected_since_boundary = self._injected_since_boundary, []
            await self._harness.emit(SteerBoundary(turn_id=self.turn_id, steer_ids=ids))

    def _add_steer(self, steer: Redirect) -> None:
        self._pending_steers.append(steer)

    def _drain_undelivered(self) -> list[str]:
        ids = [s.steer_id for s in self._pending_steers]
        self._pending_steers = []
        return ids

    # --- approvals ----------------------------------------------------------------------------

    async def request_approval(
        self,
        tool: str,
        input: dict[str, object],
        description: str = "",
        options: Sequence[ApprovalOption] = (),
        *,
        why_withdrawn: Callable[[], str] | None = None,
    ) -> ApprovalResponse:
        """Ask the host (any window) for permission; waits for the answer.

        `options` are answers beyond allow / deny the vendor offers (the response's
        `option_id` names the one a window chose). An interrupt of the turn answers deny.

        A wait cancelled unanswered (the vendor took its question back, a timeout) withdraws
        it (`ApprovalWithdrawn`): it closes in every window, `why_withdrawn()` saying why.
        """
        approval_id = f"{self.turn_id}.a{next(self._approval_ids)}"
        done = trio.Event()
        box: list[ApprovalResponse] = []
        self._approvals[approval_id] = (done, box)
        try:
            await self._harness.emit(
                ApprovalRequest(
                    turn_id=self.turn_id,
                    approval_id=approval_id,
                    tool=tool,
                    input=input,
                    description=description,
                    options=list(options),
                )
            )
            await done.wait()
        finally:
            self._approvals.pop(approval_id, None)
            if not box and self._harness.host_takes_withdrawals:  # (an older host: turn end)
                why = (why_withdrawn() if why_withdrawn is not None else WITHDRAWN)[:2000]
                with trio.CancelScope(shield=True), suppress(trio.ClosedResourceError):
                    await self._harness.emit(ApprovalWithdrawn(self.turn_id, approval_id, why))
        return box[0]

    def _answer(self, response: ApprovalResponse) -> bool:
        entry = self._approvals.get(response.approval_id)
        if entry is None:
            return False
        done, box = entry
        if not done.is_set():
            box.append(response)
            done.set()
        return True

    def _deny_all(self, reason: str) -> None:
        for approval_id, (done, box) in list(self._approvals.items()):
            if not done.is_set():
                box.append(ApprovalResponse(approval_id=approval_id, allow=False, reason=reason))
                done.set()


class DriverBase:
    """Subclass and implement the translation. Everything not overridden has a safe default.

    Methods are called from one trio task at a time per kind: `init` and `prewarm` before any
    turn; `run_turn` for one turn at a time; `interrupt`/`redirect` while a turn runs.
    """

    name: str = "driver"
    version: str = "0"
    #: Set by the harness that runs this driver (`emit` sends through it).
    _harness_emit: Callable[[DriverEvent], Awaitable[None]] | None = None

    async def emit(self, event: DriverEvent) -> None:
        """Send an event that belongs to no turn (e.g. `CommandsEvent` when the vendor
        session reports its commands between turns). Dropped while no harness runs the
        driver. Inside a turn, use `TurnContext.emit` (same channel, same order)."""
        emit = self._harness_emit
        if emit is not None:
            await emit(event)

    async def init(self, init: Init) -> Capabilities:
        """Configure the session. Raise `HostdError` (or any exception) to refuse it."""
        return Capabilities()

    async def prewarm(self) -> None:
        """Connect to the vendor now (import SDKs, start CLIs). Default: nothing to do."""

    async def run_turn(self, turn: TurnContext) -> TurnStatus | None:
        """Run one turn, emitting chunks through `turn`. Return None for success, or a status.

        Raise `TurnFailed` (or any exception) to end the turn as error with its message.
        """
        raise NotImplementedError("a driver must implement run_turn")

    async def interrupt(self, turn: TurnContext) -> None:
        """Stop the turn. Default: cancel `run_turn` (the turn ends as `stopped`).

        Override to use the vendor's own interrupt, then let `run_turn` return "stopped".
        """
        turn.cancel_scope.cancel()

    async def close(self) -> None:
        """Release the vendor session. Called once, before the process exits."""


class _Harness:
    def __init__(
        self, driver: DriverBase, stdout: trio.abc.SendStream, max_frame_size: int
    ) -> None:
        # Built inside the trio run (`serve_driver`), which `FrameOutput` hooks into.
        self.driver = driver
        self.in_codec: Codec[HostCommand] = Codec(HostCommand, "msgpack", max_frame_size)
        self.output = FrameOutput(stdout, Codec(DriverEvent, "msgpack", max_frame_size))
        self.capabilities = Capabilities()
        #: The host traces turns: report model calls (`Init.report_model_calls`).
        self.report_model_calls = False
        self.host_takes_withdrawals = False  # it knows `ApprovalWithdrawn` (1.7)
        self.turn: TurnContext | None = None
        self.turn_done = trio.Event()
        self.turn_done.set()
        self.exit_code = 0
        driver._harness_emit = self.emit
        self._read_scope = trio.CancelScope()

    def stop(self) -> None:
        """End the session as `Close` does (a SIGTERM from the host or the system)."""
        self._cancel_turn()
        self._read_scope.cancel()

    async def emit(self, event: DriverEvent) -> None:
        """Queue `event` for the host (see `FrameOutput.send`: returns at once unless the
        host is behind; raises `FrameTooLarge` for an event over the frame limit)."""
        await self.output.send(event)

    async def run(self, stdin: trio.abc.ReceiveStream) -> int:
        output = self.output
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(output.serve)
                try:
                    with self._read_scope:
                        await self.read_loop(stdin, nursery)
                finally:
                    with trio.CancelScope(shield=True):
                        with trio.move_on_after(CLOSE_BUDGET):
                            await self.driver.close()
                        with trio.move_on_after(5):
                            await self.turn_done.wait()
                        # What is still queued goes out (a host that is gone discards it).
                        await output.aclose()
        finally:
            output.detach()
        return self.exit_code

    async def read_loop(self, stdin: trio.abc.ReceiveStream, nursery: trio.Nursery) -> None:
        reader = MessageReader(self.in_codec)
        initialised = False
        while True:
            data = await stdin.receive_some(65536)
            if not data:
                # The host closed our stdin: it is gone or wants us gone.
                self._cancel_turn()
                return
            try:
                items = reader.feed(data)
            except ProtocolError as exc:
                await self.fatal(exc.code, f"bad frame from host: {exc}")
                return
            for item in items:
                if isinstance(item, InvalidMessage):
                    await self.emit(Log(level="error", message=f"ignored command: {item}"))
                    continue
                if not initialised:
                    if not isinstance(item, Init):
                        await self.fatal(
                            HandshakeError.code,
                            f"expected init as the first command, got {type(item).__name__}",
                        )
                        return
                    if not await self.handle_init(item):
                        return
                    initialised = True
                    continue
                if isinstance(item, Close):
                    self._cancel_turn()
                    return
                await self.dispatch(item, nursery)

    async def fatal(self, code: str, message: str) -> None:
        print(f"{self.driver.name}: fatal: {message}", file=sys.stderr)
        await self.emit(DriverFatal(code=code, message=message))
        self.exit_code = 2

    async def handle_init(self, init: Init) -> bool:
        if init.protocol_version[0] != PROTOCOL_VERSION[0]:
            await self.fatal(
                VersionMismatch.code,
                f"host speaks protocol {init.protocol_version[0]}.x, this driver "
                f"{PROTOCOL_VERSION[0]}.x: install matching versions of hostd and the driver",
            )
            return False
        self.report_model_calls = init.report_model_calls
        self.host_takes_withdrawals = tuple(init.protocol_version) >= WITHDRAW_VERSION
        try:
            self.capabilities = await self.driver.init(init)
        except HostdError as exc:
            await self.fatal(exc.code, exc.message)
            return False
        except Exception as exc:
            traceback.print_exc()
            await self.fatal(DriverError.code, f"init failed: {type(exc).__name__}: {exc}")
            return False
        await self.emit(
            Ready(
                protocol_version=PROTOCOL_VERSION,
                driver=self.driver.name,
                version=self.driver.version,
                capabilities=self.capabilities,
                model=init.model,
            )
        )
        return True

    async def dispatch(self, cmd: HostCommand, nursery: trio.Nursery) -> None:
        turn = self.turn
        if isinstance(cmd, Send):
            if turn is not None:
                await self.emit(
                    TurnEnd(
                        turn_id=cmd.turn_id,
                        status="error",
                        error=f"turn {turn.turn_id} is still running; one turn at a time",
                        error_code="topic_busy",
                    )
                )
                return
            self.turn = TurnContext(self, cmd, self.capabilities)
            self.turn_done = trio.Event()
            nursery.start_soon(self.run_turn, self.turn)
        elif isinstance(cmd, Prewarm):
            nursery.start_soon(self.run_prewarm)
        elif isinstance(cmd, Redirect):
            if turn is None or turn.turn_id != cmd.turn_id or not self.capabilities.inject_steering:
                await self.emit(SteerUndelivered(turn_id=cmd.turn_id, steer_ids=[cmd.steer_id]))
            else:
                turn._add_steer(cmd)
        elif isinstance(cmd, Interrupt):
            if turn is not None and turn.turn_id == cmd.turn_id and not turn.interrupted:
                turn.interrupted = True
                turn._deny_all("the turn was stopped")
                nursery.start_soon(self.driver.interrupt, turn)
        elif isinstance(cmd, ApprovalResponse):
            if turn is None or not turn._answer(cmd):
                await self.emit(
                    Log(level="warning", message=f"no open approval {cmd.approval_id!r}")
                )
        elif isinstance(cmd, Init):
            await self.emit(Log(level="error", message="ignored a second init"))

    async def run_prewarm(self) -> None:
        try:
            await self.driver.prewarm()
        except Exception as exc:
            traceback.print_exc()
            await self.emit(Log(level="error", message=f"prewarm failed: {exc}"))
            return
        await self.emit(Warmed())

    async def run_turn(self, turn: TurnContext) -> None:
        status: TurnStatus = "success"
        error = ""
        error_code = ""
        try:
            with turn.cancel_scope:
                result = await self.driver.run_turn(turn)
                if result is not None:
                    status = result
            if turn.cancel_scope.cancelled_caught or (turn.interrupted and status == "success"):
                status = "stopped"
        except HostdError as exc:
            status, error, error_code = "error", str(exc), exc.code
        except Exception as exc:
            traceback.print_exc()
            status = "error"
            error = f"driver bug: {type(exc).__name__}: {exc}"
            error_code = DriverError.code
        finally:
            with trio.CancelScope(shield=True):
                try:
                    turn._deny_all("the turn ended")
                    undelivered = turn._drain_undelivered()
                    if undelivered:
                        await self.emit(
                            SteerUndelivered(turn_id=turn.turn_id, steer_ids=undelivered)
                        )
                    await self.emit(
                        TurnEnd(
                            turn_id=turn.turn_id, status=status, error=error, error_code=error_code
                        )
                    )
                finally:
                    # Even if the host is gone: the process exit waits for this.
                    self.turn = None
                    self.turn_done.set()

    def _cancel_turn(self) -> None:
        if self.turn is not None:
            self.turn.interrupted = True
            self.turn._deny_all("the session closed")
            self.turn.cancel_scope.cancel()


async def serve_driver(
    driver: DriverBase,
    stdin: trio.abc.ReceiveStream,
    stdout: trio.abc.SendStream,
    *,
    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
) -> int:
    """Run the frame loop on the given streams until `Close` or EOF; return the exit code."""
    return await _Harness(driver, stdout, max_frame_size).run(stdin)


class DriverProcess:
    """What a driver factory given to `run_driver` gets."""

    def __init__(self, nursery: trio.Nursery, frames_fd: int) -> None:
        #: Lives as long as the process (background tasks: agent readers, MCP connections);
        #: cancelled after the session ended and the process tree was ended.
        self.nursery = nursery
        #: The frame channel (fd 1 before the harness moved it): a test driver writes raw
        #: bytes on it to play a broken driver.
        self.frames_fd = frames_fd


def run_driver(
    driver: DriverBase | Callable[[DriverProcess], DriverBase],
    argv: Sequence[str] | None = None,
) -> None:
    """Entry point for a driver process: serve on stdin/stdout, then exit with the code.

    `driver` is the driver, or a factory given the `DriverProcess` (a nursery that lives as
    long as the process, the frames fd).

    File descriptor 1 is moved aside for frames and replaced by stderr, so stray output of
    the driver or its libraries lands in the stderr tail the host shows, not in the channel.
    The process is a subreaper, SIGTERM ends the session like `Close`, and what the driver
    left running is ended before the process exits (module docstring).
    """
    del argv
    frames_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    child_process.become_subreaper()

    async def main() -> int:
        stdin = trio.lowlevel.FdStream(os.dup(0))
        stdout = trio.lowlevel.FdStream(frames_fd)
        with trio.open_signal_receiver(signal.SIGTERM) as signals:
            async with stdin, stdout, trio.open_nursery() as process_nursery:
                d = (
                    driver
                    if isinstance(driver, DriverBase)
                    else driver(DriverProcess(process_nursery, frames_fd))
                )
                harness = _Harness(d, stdout, DEFAULT_MAX_FRAME_SIZE)

                async def on_signal() -> None:
                    async for _ in signals:
                        harness.stop()

                process_nursery.start_soon(on_signal)
                try:
                    return await harness.run(stdin)
                finally:
                    # Before the process nursery's tasks are cancelled: a library's own
                    # shutdown of its children (the MCP SDK waits seconds for a server that
                    # ignores end of input) then finds them gone.
                    await trio.to_thread.run_sync(end_descendants)
                    process_nursery.cancel_scope.cancel()

    try:
        code: Any = trio.run(main)
    finally:
        end_descendants()
    sys.exit(int(code))


def end_descendants(grace: float = TREE_GRACE) -> None:
    """End every process this one started that still runs (SIGTERM, then SIGKILL after
    `grace`): a driver process's last act (`run_driver`)."""
    child_process.end_tree(os.getpid(), include_root=False, grace=grace)
