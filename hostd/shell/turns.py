"""The shell side of turns: executes a `TurnMachine`'s effects and feeds their results back.

`TurnServices` is the daemon-wide part (`hostd.shell.turn_services`: configuration read once
per change, off the trio thread; observers; usage; the clients' transcripts; the permission
check; re-exported here); a `TurnRunner`
executes one topic's turn effects for its `TopicHost`, with every task in that host's
nursery. Nothing here decides what a turn does next: every result goes back to the machine.

The turn boundary's exception map is `turn_failure` (below): whatever a task raises (a
hook's `HookError`, a `ConfigError`, an `OSError`, a bug) becomes the machine's `lost` /
`hook_failed` input, so the turn ends `error` with that message and the topic stays usable.
Cancellation is never mapped: it is a stop (`CancelHook`) or a closing host.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import trio

from hostd.core import turn_effects as fx
from hostd.core.workspaces import workspace_of
from hostd.shell.store import store as st
from hostd.shell.turn_services import CONTINUE_PROMPT, ConfigCache, TurnServices, continue_text
from hostd_protocol.client_messages import TopicInfo
from hostd_protocol.common import TextDelta
from hostd_protocol.driver_messages import (
    Checkpoint,
    ChunkEvent,
    DriverEvent,
    HostCommand,
    ResumeToken,
    TurnEnd,
)
from hostd_protocol.errors import (
    ConfigError,
    DriverCrashed,
    HookError,
    HostdError,
    InternalError,
)

if TYPE_CHECKING:
    from hostd.core.options import SessionOptions
    from hostd.core.turn import TurnMachine
    from hostd.core.turn_record import StepRecord
    from hostd.shell.drivers.supervisor import DriverSession

log = logging.getLogger(__name__)

#: The observers' `prepare_step` chain gets this long per step, then the step goes unprepared.
PREPARE_STEP_TIMEOUT = 30.0


def missing_workdir(path: str) -> str:
    """What is wrong with `path` as a topic's chosen working directory, in words for an
    `InvalidArgument` when the topic is created; "" when it is a directory.

    hostd creates only the folders it owns (`ensure_workdir`): a chosen directory that does
    not exist is most likely a typo, and creating it would start the agent in an empty new
    folder (as root: anywhere)."""
    full = Path(path).expanduser()
    if full.is_dir():
        return ""
    if full.exists():
        return f"working directory {path!r} exists and is not a directory; name a directory"
    return (
        f"working directory {path!r} does not exist; create it, or choose an existing "
        "directory"
    )


def ensure_workdir(path: str, topic: TopicInfo, own_root: str) -> str:
    """The directory `path` (with `~` expanded); `ConfigError` saying what to change when it
    cannot be used (missing, a file in the way, no permission, ...).

    Created only when it lies under `own_root` (the per-topic and ephemeral folders hostd
    owns): a topic's or an assistant's own choice must exist, also when it was removed
    after the topic was created (the agent would work in an empty new folder)."""
    full = Path(os.path.normpath(Path(path).expanduser()))  # no `..` out of the root
    root = Path(os.path.normpath(Path(own_root).expanduser()))
    if not full.is_relative_to(root) and not full.exists():
        raise ConfigError(
            f"working directory {str(full)!r} of topic {topic.id} does not exist (hostd creates "
            "only its own folders); create it, or use another working directory",
            details={"path": str(full), "topic_id": topic.id},
        )
    try:
        full.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            f"working directory {str(full)!r} cannot be used: {exc.strerror or exc}; "
            f"set another working directory for topic {topic.id} (or its assistant)",
            details={"path": str(full), "topic_id": topic.id},
        ) from exc
    return str(full)


def turn_failure(exc: Exception, topic_id: str) -> HostdError:
    """The turn boundary's exception map: what ends a turn when setting it up or driving it
    raised. A hostd error is the turn's error as it is; anything else is a bug or an
    environment failure (an unreadable file, a vanished directory): logged with its traceback,
    and the turn ends `internal_error` naming it, so the topic stays usable."""
    if isinstance(exc, HostdError):
        return exc
    log.error("topic %s: a turn failed on %s", topic_id, type(exc).__name__, exc_info=exc)
    return InternalError(
        f"the turn failed: {type(exc).__name__}: {exc} (details in the daemon log)",
        details={"exception": type(exc).__name__},
    )


class TurnHost(Protocol):
    """What a `TurnRunner` needs of its topic's host (`TopicHost` is one): declared here, so
    this module never imports the host."""

    topic_id: str
    info: TopicInfo

    @property
    def session(self) -> DriverSession | None: ...

    def start_soon(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> None: ...

    def queue_command(self, key: str, cmd: HostCommand) -> None: ...

    def end_turn(self, end: TurnEnd) -> None: ...

    def feed_runtime(self, events: list[DriverEvent]) -> None: ...

    def feed(self, batch: list[DriverEvent], now: float) -> None: ...

    async def open_session(self, opts: SessionOptions) -> DriverSession: ...

    async def wait_resets(self) -> None: ...

    def detach_session(self) -> None: ...


# --- one topic's turn effects ------------------------------------------------------------------


class TurnRunner:
    """Executes the effects of `host`'s current turn machine (see the module docstring)."""

    def __init__(self, host: TurnHost, services: TurnServices, *, lane: int = 0) -> None:
        self.host = host
        self.services = services
        #: A multi-answer turn's extra lane (`hostd.shell.lanes`) stores no steps and
        #: releases no workspace: those are the turn's, and lane 0 ends last.
        self.lane = lane
        self.machine: TurnMachine | None = None
        #: Delegated children's sessions by key (`<topic>/delegate<n>`).
        self.children: dict[str, DriverSession] = {}
        self._hook_scope: trio.CancelScope | None = None

    # --- feeding the machine ----------------------------------------------------------------

    # The machine's `now` is wall time: it only stamps steps (stored, shown to people).

    def begin(self, machine: TurnMachine) -> None:
        self.machine = machine
        self.execute(machine, machine.start(time.time()))

    def feed(self, machine: TurnMachine, step: Callable[[float], list[fx.TurnEffect]]) -> None:
        """Give the machine one input (a closure over it) and execute what it returns."""
        try:
            effects = step(time.time())
        except Exception as exc:  # a bug in the machine: end the turn, keep the topic
            effects = machine.lost(turn_failure(exc, self.host.topic_id), time.time())
        self.execute(machine, effects)

    def execute(self, machine: TurnMachine, effects: list[fx.TurnEffect]) -> None:
        host = self.host
        for eff in effects:
            if isinstance(eff, fx.SendToDriver):
                host.queue_command(eff.key, eff.send)
            elif isinstance(eff, fx.EndTurn):
                host.end_turn(eff.end)
            elif isinstance(eff, fx.AppendText):
                host.feed_runtime(
                    [ChunkEvent(turn_id=machine.turn_id, chunk=TextDelta(text=eff.text))]
                )
            elif isinstance(eff, fx.Notify):
                self.services.notify(eff.method, eff.args)
            elif isinstance(eff, fx.SaveSteps):
                if self.lane:
                    continue
                self.services.writer.put(_steps_op(eff.topic_id, eff.outcome))
                # The final status is stored (queued before this, in order): the turn's
                # standalone workspace goes now, once (`Workspaces.leave` never raises).
                host.start_soon(self.services.standalone.leave, host.topic_id, machine.turn_id)
            elif isinstance(eff, fx.CancelHook):
                if self._hook_scope is not None:
                    self._hook_scope.cancel()
            elif isinstance(eff, fx.LoadConfig):
                cached = self.services.config.cached(eff.assistant)
                if cached is not None:  # the hot path: no task, no thread
                    self.feed(machine, partial(machine.config_loaded, *cached))
                else:
                    self._spawn(machine, self._load_config, eff)
            elif isinstance(eff, fx.RunHook):
                self._spawn(machine, self._run_hook, eff)
            elif isinstance(eff, fx.PrepareStep):
                self._spawn(machine, self._prepare_step, eff)
            elif isinstance(eff, fx.OpenSession):
                # A task even for an open session: a `ResetSession` (rewind, fork) queued
                # before it must close that session first.
                self._spawn(machine, self._open, eff)
            elif isinstance(eff, fx.AskRetry):
                self._spawn(machine, self._ask_retry, eff)
            elif isinstance(eff, fx.CloseSession):
                self._spawn(machine, self._close, eff)
            else:  # pragma: no cover - an effect kind nobody taught the shell
                log.error("topic %s: unknown turn effect %r ignored", host.topic_id, eff)

    def _spawn(self, machine: TurnMachine, fn: Callable[..., Awaitable[None]], eff: Any) -> None:
        self.host.start_soon(self._guarded, machine, fn, eff)

    async def _guarded(
        self, machine: TurnMachine, fn: Callable[..., Awaitable[None]], eff: Any
    ) -> None:
        try:
            await fn(machine, eff)
        except Exception as exc:  # the turn boundary's map: the turn ends, the topic lives
            error = turn_failure(exc, self.host.topic_id)
            self.feed(machine, partial(machine.lost, error))

    # --- effects that wait ------------------------------------------------------------------

    async def _load_config(self, machine: TurnMachine, eff: fx.LoadConfig) -> None:
        assistant, roles = await self.services.config.load(eff.assistant)
        self.feed(machine, partial(machine.config_loaded, assistant, roles))

    async def _run_hook(self, machine: TurnMachine, eff: fx.RunHook) -> None:
        from hostd.shell.hooks import run_create_hook, run_next_hook

        run = run_create_hook if eff.kind == "create" else run_next_hook
        with trio.CancelScope() as scope:
            self._hook_scope = scope
            try:
                result: object = await run(eff.spec, eff.context)
            except HookError as exc:
                self.feed(machine, partial(machine.hook_failed, exc))
                return
            finally:
                if self._hook_scope is scope:
                    self._hook_scope = None
            self.feed(machine, partial(machine.hook_returned, result))

    async def _prepare_step(self, machine: TurnMachine, eff: fx.PrepareStep) -> None:
        """The observers' `prepare_step` chain, cancellable like a hook (a stop). Observers
        never break a turn: one that raises is skipped (`ObserverChain`), and a chain that
        takes longer than `PREPARE_STEP_TIMEOUT` is given up: the step goes as it was."""
        with trio.CancelScope() as scope:
            self._hook_scope = scope
            try:
                prep = eff.prep
                with trio.move_on_after(PREPARE_STEP_TIMEOUT) as bound:
                    prep = await self.services.observers.prepare_step(eff.prep)
                if bound.cancelled_caught:
                    log.warning(
                        "topic %s: observers' prepare_step took over %.0f s; step sent unprepared",
                        self.host.topic_id,
                        PREPARE_STEP_TIMEOUT,
                    )
            finally:
                if self._hook_scope is scope:
                    self._hook_scope = None
            self.feed(machine, partial(machine.step_prepared, prep))

    async def _open(self, machine: TurnMachine, eff: fx.OpenSession) -> None:
        host = self.host
        if eff.root:
            await host.wait_resets()  # a rewind's reset closes the old session first
        opts = eff.options
        ws = workspace_of(opts.options) if eff.root else None
        if ws is not None:
            # A standalone workspace (hostd/core/workspaces.py): created (seeded) before the
            # driver starts. A turn-scoped one is new each turn, so the topic's session (in
            # the last turn's folder) is replaced, quietly: it did not fail.
            opts = await self.services.standalone.enter(host.topic_id, machine.turn_id, ws, opts)
            if ws.scope == "turn" and host.session is not None:
                host.detach_session()
        current = host.session
        if eff.root and current is not None and current.alive:
            session = current  # the topic's session lives across turns (a broken one does not)
        else:
            workdir = await trio.to_thread.run_sync(
                ensure_workdir, opts.working_dir, host.info, str(self.services.workspaces)
            )
            opts = replace(opts, working_dir=workdir)
            if eff.root:
                session = await host.open_session(opts)
            else:
                session = await self.services.supervisor.open(eff.key, opts)
                self.children[eff.key] = session
                host.start_soon(self._pump_child, machine, eff.key, session)
        caps = session.capabilities
        self.feed(machine, partial(machine.session_opened, eff.key, caps))

    async def _ask_retry(self, machine: TurnMachine, eff: fx.AskRetry) -> None:
        retry = await self.services.observers.error(eff.info)
        self.feed(machine, partial(machine.retry_decided, retry))

    async def _close(self, machine: TurnMachine, eff: fx.CloseSession) -> None:
        self.children.pop(eff.key, None)
        with trio.CancelScope(shield=True):  # also when the topic is being deleted
            try:
                await self.services.supervisor.close(eff.key)
            except HostdError as exc:
                log.info("closing delegated session %s: %s", eff.key, exc)

    async def _pump_child(self, machine: TurnMachine, key: str, session: DriverSession) -> None:
        """A child session's events into the host, like the topic's own pump (its resume
        tokens and checkpoints are dropped: they are not the topic's)."""
        from hostd.shell.drivers.supervisor import SessionEnded

        error: HostdError | None = None
        async for item in session.events:
            if isinstance(item, SessionEnded):
                error = item.error
                break
            batch: list[DriverEvent] = [
                e for e in item if not isinstance(e, ResumeToken | Checkpoint)
            ]
            if batch:
                self.host.feed(batch, trio.current_time())
        if machine.over or self.children.get(key) is not session:
            return
        lost = error or DriverCrashed(
            "the delegated driver session ended during a turn", driver=session.driver
        )
        self.feed(machine, partial(machine.lost, lost))

    def session_for(self, key: str) -> DriverSession | None:
        return self.children.get(key)


def _steps_op(topic_id: str, outcome: Any) -> st.PutSteps:
    return st.PutSteps(
        topic_id,
        outcome.turn_id,
        tuple(
            st.StepRow(
                kind=s.kind,
                status=s.status,
                started_at=s.started,
                ended_at=s.ended,
                data=_step_data(s),
            )
            for s in outcome.steps
        ),
    )


def _step_data(step: StepRecord) -> dict[str, Any]:
    data: dict[str, Any] = {"index": step.index, "depth": step.depth}
    if step.detail:
        data["detail"] = step.detail
    if step.error:
        data["error"] = step.error
    if step.error_code:
        data["error_code"] = step.error_code
    return data


__all__ = [
    "CONTINUE_PROMPT",
    "ConfigCache",
    "TurnRunner",
    "TurnServices",
    "continue_text",
    "ensure_workdir",
    "missing_workdir",
    "turn_failure",
]
