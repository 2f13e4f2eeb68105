"""The turn pipeline: every turn, one readable function, top to bottom.

`run_turn` is the order of DESIGN.md "The turn pipeline"; each numbered comment in it is one
step. It runs over small protocols (`TurnSink` for the stream and the store, `DriverTurn` for
the driver's part, `Connect` for the handshake) so it is tested with in-memory fakes and
wired to the daemon's `TopicHost` by an adapter.

Rules this module guards (DESIGN invariant 7):

- A refused permission check returns before anything exists: no row, no event, no record.
- Every turn that passed the check ends with exactly one `TurnSink.end(outcome)` for the
  root, whatever happens: success, driver error, stop, driver crash, hook exception,
  cancellation, delegation. `end` runs shielded from cancellation (the flush must happen
  even while the task is being cancelled) and before any exception propagates.
- The final status has one truth, `TurnRecord.status` (default success). Typed hostd errors
  (unresolved role, hook error, driver error) end the turn as `error` and are returned in the
  outcome; anything else is a bug: it is recorded, written, and re-raised. Cancellation is a
  stop, never an error row, and propagates (unless it was our own interrupt).
- Delegated runs are children: they write through the root's sink but never start or end the
  stream; their status folds into the root's.
- Resume data exists only in a non-success outcome (`TurnRecord.finish`).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import trio

from hostd.core.assistants import AssistantCatalog, AssistantConfig, RolesConfig
from hostd.core.connector import Connector, resolve_connector
from hostd.core.history_overlap import history_window, merge_history
from hostd.core.turn_record import ResumeData, TurnOutcome, TurnRecord, TurnStack
from hostd.shell.hooks import (
    Continue,
    Delegate,
    ErrorInfo,
    Finish,
    HookContext,
    ObserverChain,
    StepPrep,
    TurnInfo,
    UpdateOptions,
    run_create_hook,
    run_next_hook,
)
from hostd.shell.turn_workdir import plan_workdir as plan_workdir
from hostd.shell.turn_workdir import turn_workdir as turn_workdir
from hostd_protocol.client_messages import TopicInfo
from hostd_protocol.common import (
    Capabilities,
    HistoryMessage,
    ToolCall,
    ToolResult,
    TurnStatus,
    Usage,
)
from hostd_protocol.errors import (
    DriverError,
    HookError,
    HostdError,
    PermissionDenied,
)

log = logging.getLogger(__name__)

#: What a stateful driver is told when a turn that had partly answered is continued.
CONTINUE_PROMPT = "Continue exactly where you stopped; do not repeat what you already wrote."
#: How many times a next hook may `Continue` one turn (a runaway-loop guard).
MAX_CONTINUES = 8
#: How long the shielded final write may take before we give up on it (seconds).
FLUSH_TIMEOUT = 10.0


# --- requests and results -----------------------------------------------------------------------


@dataclass(frozen=True)
class Identity:
    """Who asks: the local user (peer uid of the socket) and the profile they act as."""

    uid: int
    profile: str = ""


@dataclass(frozen=True)
class TurnRequest:
    """One user turn to run."""

    topic: TopicInfo
    turn_id: str
    text: str
    identity: Identity
    #: The stored user row of `text`; empty when the pipeline must store the new input.
    message_id: str = ""
    #: Per-send option overrides (beat topic settings, which beat the assistant's).
    options: Mapping[str, Any] = field(default_factory=dict)
    #: Messages the client sent along (its transcript); overlap with history is removed.
    history: Sequence[HistoryMessage] = ()
    #: Set when this turn continues a failed/stopped one (`continue_request`).
    resume: ResumeData | None = None


@dataclass(frozen=True)
class StreamStart:
    """The root's stream start: what `turn-started` says."""

    turn_id: str
    driver: str
    model: str
    capabilities: Capabilities
    assistant: str = ""


@dataclass(frozen=True)
class SessionSpec:
    """Everything a driver session for this turn needs (maps onto supervisor.SessionOptions)."""

    connector: Connector
    working_dir: str
    system_prompt: str
    options: Mapping[str, Any]


@dataclass(frozen=True)
class DriverCall:
    """One driver step of a turn (step 10)."""

    topic_id: str
    turn_id: str
    #: 0 for the user's turn, > 0 for a delegated child run inside it.
    depth: int
    session: SessionSpec
    text: str
    history: Sequence[HistoryMessage]
    message_id: str = ""
    report: TurnReporter | None = None


@dataclass(frozen=True)
class DriverResult:
    """How the driver's turn ended (its `TurnEnd`)."""

    status: TurnStatus
    error: str = ""
    error_code: str = ""
    #: The visible text the driver answered (for the next hook).
    answer: str = ""
    #: True when any chunk arrived (a stopped/failed turn with output is continued, not resent).
    output: bool = False


class TurnSink(Protocol):
    """Where a turn writes: the stream of attached windows and the store.

    `start`/`end` are called for the root only, each exactly once per turn that passed the
    permission check (`end` also when `start` was never reached).
    """

    async def start(self, start: StreamStart) -> None: ...

    async def end(self, outcome: TurnOutcome) -> None: ...

    async def notice(self, turn_id: str, code: str, message: str, level: str) -> None: ...

    async def store_input(self, turn_id: str, message: HistoryMessage) -> None:
        """Store the genuinely new user input (only when the request had no stored row)."""
        ...

    async def answer(self, turn_id: str, text: str) -> None:
        """Write answer text that did not come from a driver (a next hook's `Finish`)."""
        ...

    async def load_history(self, topic_id: str, limit: int) -> list[HistoryMessage]:
        """The newest stored messages of the topic before this turn, oldest first."""
        ...


class Connect(Protocol):
    """Open (or reuse) the driver session for `spec`; returns the handshake's capabilities."""

    async def __call__(self, topic_id: str, spec: SessionSpec) -> Capabilities: ...


class DriverTurn(Protocol):
    """Run one driver turn to its end; raises `DriverError` if the driver crashed."""

    async def __call__(self, call: DriverCall) -> DriverResult: ...


PermissionCheck = Callable[[Identity, TopicInfo], None]


def default_permission(daemon_uid: int | None = None) -> PermissionCheck:
    """Same user as the daemon, and, if the topic is bound to a profile, that profile."""
    uid = os.getuid() if daemon_uid is None else daemon_uid

    def check(identity: Identity, topic: TopicInfo) -> None:
        if identity.uid != uid:
            raise PermissionDenied(
                f"uid {identity.uid} may not use topic {topic.id} (the daemon runs as uid {uid})",
                details={"topic_id": topic.id},
            )
        owner = topic.options.get("profile")
        if isinstance(owner, str) and owner and identity.profile and owner != identity.profile:
            raise PermissionDenied(
                f"topic {topic.id} belongs to profile {owner!r}, not {identity.profile!r}",
                details={"topic_id": topic.id},
            )

    return check


class Interrupts:
    """Who to call to stop the running turn of a topic (step 2). One turn per topic."""

    def __init__(self) -> None:
        self._stops: dict[str, Callable[[], None]] = {}

    @contextmanager
    def register(self, topic_id: str, stop: Callable[[], None]) -> Iterator[None]:
        self._stops[topic_id] = stop
        try:
            yield
        finally:
            if self._stops.get(topic_id) is stop:
                del self._stops[topic_id]

    def interrupt(self, topic_id: str) -> bool:
        """Stop the topic's running turn; False when none runs."""
        stop = self._stops.get(topic_id)
        if stop is None:
            return False
        stop()
        return True


@dataclass
class PipelineDeps:
    """What the pipeline runs against. The daemon builds one; tests build fakes."""

    sink: TurnSink
    connect: Connect
    driver_turn: DriverTurn
    assistants: AssistantCatalog
    roles: RolesConfig
    #: Base folder of per-topic and ephemeral working directories.
    workspaces: Path
    observers: ObserverChain = field(default_factory=ObserverChain)
    permission: PermissionCheck = field(default_factory=default_permission)
    interrupts: Interrupts = field(default_factory=Interrupts)
    clock: Callable[[], float] = time.monotonic


# --- pure helpers -------------------------------------------------------------------------------


def merge_options(*layers: Mapping[str, Any]) -> dict[str, Any]:
    """Merge option layers, later ones winning (assistant < topic < send).

    `metadata` is merged key by key rather than replaced, so a send that adds one metadata
    key does not drop the assistant's others. A `None` value removes the key.
    """
    out: dict[str, Any] = {}
    for layer in layers:
        for key, value in layer.items():
            if value is None:
                out.pop(key, None)
            elif key == "metadata" and isinstance(value, Mapping):
                base = out.get("metadata")
                out["metadata"] = {**(base if isinstance(base, Mapping) else {}), **value}
            else:
                out[key] = value
    return out


def continue_request(
    topic: TopicInfo, turn_id: str, resume: ResumeData, identity: Identity
) -> TurnRequest:
    """A request that continues a failed or stopped turn from its resume data.

    Nothing new is stored as user input: the original message is already a row. If the driver
    had answered part of it, it is asked to continue; otherwise the input is sent again.
    """
    text = CONTINUE_PROMPT if resume.partial else resume.text
    return TurnRequest(
        topic=topic,
        turn_id=turn_id,
        text=text,
        identity=identity,
        message_id=f"continue:{turn_id}",
        options=resume.options,
        resume=resume,
    )


# --- the reporter drivers call back into --------------------------------------------------------


class TurnReporter:
    """Given to `DriverTurn`: records tool steps and usage as the driver streams."""

    def __init__(
        self,
        record: TurnRecord,
        info: TurnInfo,
        observers: ObserverChain,
        clock: Callable[[], float],
    ) -> None:
        self._record = record
        self._info = info
        self._observers = observers
        self._clock = clock
        self._tools: dict[str, Any] = {}

    async def output(self) -> None:
        """Any chunk arrived: a failure now has partial output (continue, not resend)."""
        self._record.partial = True

    async def tool(self, event: ToolCall | ToolResult) -> None:
        self._record.partial = True
        now = self._clock()
        if isinstance(event, ToolCall):
            self._tools[event.call_id] = self._record.begin_step("tool", now, event.name)
        else:
            step = self._tools.pop(event.call_id, None)
            if step is not None:
                self._record.end_step(
                    step,
                    now,
                    "error" if event.is_error else "success",
                    event.output[:200] if event.is_error else "",
                )
                await self._observers.step(self._info, step)
        await self._observers.tool(self._info, event)

    async def usage(self, usage: Usage) -> None:
        await self._observers.usage(self._info, usage)


# --- the pipeline -------------------------------------------------------------------------------


class _RootStream:
    """The root's stream: start at most once, end exactly once (with a start before it)."""

    def __init__(self, sink: TurnSink, turn_id: str) -> None:
        self._sink = sink
        self._turn_id = turn_id
        self.started = False
        self.ended = False

    async def start(self, start: StreamStart) -> None:
        if self.started:
            raise RuntimeError(f"turn {self._turn_id}: stream started twice")
        self.started = True
        await self._sink.start(start)

    async def end(self, outcome: TurnOutcome) -> None:
        if self.ended:
            raise RuntimeError(f"turn {self._turn_id}: stream ended twice")
        self.ended = True
        if not self.started:
            # Failed before the connector was known: windows still get a start for the end.
            self.started = True
            await self._sink.start(
                StreamStart(turn_id=self._turn_id, driver="", model="", capabilities=Capabilities())
            )
        await self._sink.end(outcome)


@dataclass
class _Turn:
    """What every step of one root turn (and its children) shares."""

    req: TurnRequest
    deps: PipelineDeps
    stack: TurnStack
    record: TurnRecord
    stream: _RootStream
    info: TurnInfo

    def now(self) -> float:
        return self.deps.clock()


async def run_turn(req: TurnRequest, deps: PipelineDeps) -> TurnOutcome:
    """Run one user turn through every step; see the module docstring for the guarantees.

    Raises:
        PermissionDenied: the identity may not use the topic (nothing was written).
        trio.Cancelled: the task was cancelled from outside (the turn was written `stopped`).
        Exception: a bug (the turn was written `error` first).
    """
    # 1. Permission: a refusal returns before anything exists, so nothing to clean up.
    deps.permission(req.identity, req.topic)

    # 2. Register the interrupt: a stop cancels this scope; the turn ends `stopped`.
    scope = trio.CancelScope()
    with deps.interrupts.register(req.topic.id, scope.cancel):
        turn = _Turn(
            req=req,
            deps=deps,
            stack=TurnStack(),
            record=TurnRecord(
                turn_id=req.turn_id,
                started=deps.clock(),
                text=req.resume.text if req.resume else req.text,
                assistant=req.topic.assistant,
                options=dict(req.options),
            ),
            stream=_RootStream(deps.sink, req.turn_id),
            info=TurnInfo(
                topic_id=req.topic.id,
                turn_id=req.turn_id,
                assistant=req.topic.assistant,
                profile=req.identity.profile,
            ),
        )
        record = turn.record
        failure: BaseException | None = None
        try:
            with scope:
                await _run(
                    turn,
                    depth=0,
                    assistant_name=req.topic.assistant,
                    text=req.text,
                    send_options=req.options,
                )
            if scope.cancelled_caught:
                record.stop("stopped by the user")
        except HostdError as exc:
            # Expected failures (config, hooks, drivers) end the turn; the outcome says why.
            record.fail_from(exc)
        except BaseException as exc:
            failure = exc
            cancelled = _only_cancelled(exc)
            record.fail_from(exc, cancelled=cancelled)
            if not cancelled:
                log.exception("turn %s of topic %s failed with a bug", req.turn_id, req.topic.id)
        # 12. Stream end (root only) and the final record: exactly once, on every path.
        outcome = record.finish(deps.clock())
        await _flush(turn, outcome)
        if failure is not None:
            raise failure
        return outcome


def _only_cancelled(exc: BaseException) -> bool:
    """A cancellation, also when it arrives as a group of cancellations (from a nursery in a
    driver turn): a stop, never an error row."""
    if isinstance(exc, trio.Cancelled):
        return True
    if isinstance(exc, BaseExceptionGroup):
        _match, rest = exc.split(trio.Cancelled)
        return rest is None
    return False


async def _flush(turn: _Turn, outcome: TurnOutcome) -> None:
    # Shielded: during cancellation an unshielded await would raise before the write.
    with trio.CancelScope(shield=True), trio.move_on_after(FLUSH_TIMEOUT) as timeout:
        try:
            await turn.stream.end(outcome)
        except Exception:
            log.exception("turn %s: writing the final state failed", outcome.turn_id)
        await turn.deps.observers.turn_finish(turn.info, outcome)
    if timeout.cancelled_caught:
        log.error("turn %s: writing the final state timed out", outcome.turn_id)


async def _run(
    turn: _Turn, *, depth: int, assistant_name: str, text: str, send_options: Mapping[str, Any]
) -> None:
    """Steps 3-11 for the root (depth 0) or a delegated child (depth > 0)."""
    req, deps, record = turn.req, turn.deps, turn.record
    topic = req.topic
    is_root = depth == 0
    assistant = deps.assistants.get(assistant_name)

    # 3. Merge options: assistant defaults < topic settings < per-send overrides.
    options = merge_options(assistant.options, topic.options, send_options)

    # 4. Enter the stack: root or child; always exit.
    frame = turn.stack.enter(req.turn_id if is_root else f"{req.turn_id}.{depth}", assistant.name)
    try:
        # 5. The turn record is the root's (opened in `run_turn`): a child's steps land in it
        # tagged with their depth, and its failures set the one final status.

        # 6. Resolve the connector, then the capabilities from the driver's handshake.
        connector = resolve_connector(
            assistant,
            deps.roles,
            profile=req.identity.profile,
            # The topic's explicit choice applies to its own assistant, not to a delegate.
            topic_driver=topic.driver if is_root else "",
            topic_model=topic.model if is_root else "",
        )

        # 8 (before the handshake, because the session is opened in the working directory).
        with turn_workdir(assistant, topic, deps.workspaces) as workdir:
            spec = SessionSpec(
                connector=connector,
                working_dir=str(workdir),
                system_prompt=assistant.system_prompt,
                options=options,
            )
            capabilities = await deps.connect(topic.id, spec)
            if is_root:
                await turn.stream.start(
                    StreamStart(
                        turn_id=req.turn_id,
                        driver=connector.driver,
                        model=connector.model,
                        capabilities=capabilities,
                        assistant=assistant.name,
                    )
                )
                turn.info = TurnInfo(
                    topic_id=topic.id,
                    turn_id=req.turn_id,
                    assistant=assistant.name,
                    driver=connector.driver,
                    model=connector.model,
                    profile=req.identity.profile,
                )
                await deps.observers.turn_start(turn.info)

            # 7. History, for drivers that need it; only the genuinely new input is stored.
            history = await _history(turn, assistant, capabilities, text, is_root)

            # 9. Create hook: may change options, or delegate (then no driver call here).
            if assistant.create_hook:
                step = record.begin_step(
                    "hook_create", turn.now(), assistant.create_hook, depth=depth
                )
                ctx = HookContext(
                    topic_id=topic.id,
                    turn_id=req.turn_id,
                    assistant=assistant.name,
                    text=text,
                    options=options,
                    profile=req.identity.profile,
                    history=history,
                    depth=depth,
                )
                try:
                    created = await run_create_hook(assistant.create_hook, ctx)
                except BaseException as exc:
                    _end_failed(record, step, exc, turn.now())
                    raise
                record.end_step(step, turn.now())
                await deps.observers.step(turn.info, step)
                if isinstance(created, Delegate):
                    await _delegate(turn, depth, created, text)
                    return
                if isinstance(created, UpdateOptions):
                    options = merge_options(options, created.options)
                    spec = SessionSpec(
                        connector=connector,
                        working_dir=spec.working_dir,
                        system_prompt=spec.system_prompt,
                        options=options,
                    )

            # 10-11. Driver turn, then the next hook (continue / delegate / finish).
            await _drive(turn, depth, assistant, spec, text, history, capabilities)
    finally:
        turn.stack.exit(frame)


async def _history(
    turn: _Turn,
    assistant: AssistantConfig,
    capabilities: Capabilities,
    text: str,
    is_root: bool,
) -> list[HistoryMessage]:
    """Step 7. A failed load warns visibly and goes on without stored history."""
    req, deps = turn.req, turn.deps
    stored: list[HistoryMessage] = []
    if capabilities.needs_history and assistant.history_size > 0:
        try:
            stored = history_window(
                await deps.sink.load_history(req.topic.id, assistant.history_size),
                assistant.history_size,
            )
        except Exception as exc:  # a broken store must not block the answer
            log.warning("turn %s: loading history failed: %s", req.turn_id, exc)
            await deps.sink.notice(
                req.turn_id,
                "history_unavailable",
                f"stored history could not be loaded ({exc}); answering without it",
                "warning",
            )
    merged = merge_history(
        stored, req.history if is_root else (), text, text_id=req.message_id if is_root else ""
    )
    if is_root and not req.message_id and merged.new_input is not None:
        await deps.sink.store_input(req.turn_id, merged.new_input)
    return merged.messages if capabilities.needs_history else []


async def _drive(
    turn: _Turn,
    depth: int,
    assistant: AssistantConfig,
    spec: SessionSpec,
    text: str,
    history: list[HistoryMessage],
    capabilities: Capabilities,
) -> None:
    """Steps 10 and 11: the driver turn (with bounded retries), then the next hook."""
    req, deps, record = turn.req, turn.deps, turn.record
    reporter = TurnReporter(record, turn.info, deps.observers, deps.clock)
    for _round in range(MAX_CONTINUES + 1):
        result = await _llm_step(turn, depth, spec, text, history, reporter)
        if result.status != "success" or not assistant.next_hook:
            return
        step = record.begin_step("hook_next", turn.now(), assistant.next_hook, depth=depth)
        ctx = HookContext(
            topic_id=req.topic.id,
            turn_id=req.turn_id,
            assistant=assistant.name,
            text=text,
            options=spec.options,
            profile=req.identity.profile,
            history=history,
            depth=depth,
            answer=result.answer,
            status=result.status,
        )
        try:
            nxt = await run_next_hook(assistant.next_hook, ctx)
        except BaseException as exc:
            _end_failed(record, step, exc, turn.now())
            raise
        record.end_step(step, turn.now())
        await deps.observers.step(turn.info, step)
        if nxt is None:
            return
        if isinstance(nxt, Finish):
            await deps.sink.answer(req.turn_id, nxt.response)
            return
        if isinstance(nxt, Delegate):
            await _delegate(turn, depth, nxt, text)
            return
        assert isinstance(nxt, Continue)
        if capabilities.needs_history:
            # A stateless driver must see the round it just answered.
            history = [
                *history,
                HistoryMessage(role="user", text=text),
                HistoryMessage(role="assistant", text=result.answer),
            ]
        text = nxt.text
    raise HookError(
        f"next hook {assistant.next_hook!r} continued turn {req.turn_id} more than "
        f"{MAX_CONTINUES} times; it must return None or Finish at some point",
        details={"hook": assistant.next_hook},
    )


async def _llm_step(
    turn: _Turn,
    depth: int,
    spec: SessionSpec,
    text: str,
    history: list[HistoryMessage],
    reporter: TurnReporter,
) -> DriverResult:
    """Step 10: one driver turn; a failure may be retried if an observer asks (bounded)."""
    req, deps, record = turn.req, turn.deps, turn.record
    attempt = 0
    while True:
        prep = await deps.observers.prepare_step(
            StepPrep(turn_id=req.turn_id, text=text, options=spec.options, history=history)
        )
        step_spec = SessionSpec(
            connector=spec.connector,
            working_dir=spec.working_dir,
            system_prompt=spec.system_prompt,
            options=prep.options,
        )
        step = record.begin_step("llm", turn.now(), spec.connector.driver, depth=depth)
        call = DriverCall(
            topic_id=req.topic.id,
            turn_id=req.turn_id,
            depth=depth,
            session=step_spec,
            text=prep.text,
            history=list(prep.history),
            message_id=req.message_id if depth == 0 else "",
            report=reporter,
        )
        try:
            result = await deps.driver_turn(call)
        except DriverError as exc:
            # A crash is this step's failure, like an error the driver reported itself.
            result = DriverResult(status="error", error=str(exc), error_code=exc.code)
        except BaseException as exc:
            _end_failed(record, step, exc, turn.now())
            raise
        if result.output:
            record.partial = True
        record.end_step(step, turn.now(), result.status, result.error, result.error_code)
        await deps.observers.step(turn.info, step)
        if result.status == "error":
            retry = await deps.observers.error(
                ErrorInfo(
                    topic_id=req.topic.id,
                    turn_id=req.turn_id,
                    step="llm",
                    error=result.error,
                    error_code=result.error_code,
                    attempt=attempt,
                )
            )
            if retry:
                attempt += 1
                continue
        record.set_status(result.status, result.error, result.error_code)
        return result


async def _delegate(turn: _Turn, depth: int, delegate: Delegate, text: str) -> None:
    """Run `delegate.assistant` as a child of this turn: same sink, no stream start/end."""
    record = turn.record
    step = record.begin_step("delegate", turn.now(), delegate.assistant, depth=depth)
    try:
        await _run(
            turn,
            depth=depth + 1,
            assistant_name=delegate.assistant,
            text=delegate.text or text,
            send_options=merge_options(turn.req.options, delegate.options),
        )
    except BaseException as exc:
        _end_failed(record, step, exc, turn.now())
        raise
    record.end_step(step, turn.now(), "success" if record.status == "success" else record.status)
    await turn.deps.observers.step(turn.info, step)


def _end_failed(record: TurnRecord, step: Any, exc: BaseException, now: float) -> None:
    """End a running step for an exception on its way out (the turn's status is set by the
    root's handler, so the first cause wins)."""
    if isinstance(exc, trio.Cancelled):
        record.end_step(step, now, "stopped")
    elif isinstance(exc, HostdError):
        record.end_step(step, now, "error", exc.message, exc.code)
    else:
        record.end_step(step, now, "error", f"{type(exc).__name__}: {exc}", "internal_error")


__all__ = [
    "CONTINUE_PROMPT",
    "Connect",
    "DriverCall",
    "DriverResult",
    "DriverTurn",
    "Identity",
    "Interrupts",
    "PipelineDeps",
    "SessionSpec",
    "StreamStart",
    "TurnReporter",
    "TurnRequest",
    "TurnSink",
    "continue_request",
    "default_permission",
    "merge_options",
    "plan_workdir",
    "run_turn",
    "turn_workdir",
]
