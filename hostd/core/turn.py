"""The turn: one sans-IO state machine from a started turn to its one end.

`TopicRuntime` owns what windows see of a turn (its rows, `TurnStarted` / `TurnEnded`, the
stored turn record); a `TurnMachine` owns the pipeline steps in between. Together they are the
only place a turn's state lives: the shell (`hostd.shell.turns`) executes the effects listed
below and feeds their results back as inputs; it decides nothing.

Rules this module guards:

- The steps run in the seed's order, one phase each (the table `TABLE` reads top to bottom):
  config (the assistant and roles, read by the shell) -> options and connector
  (`hostd.core.options.session_options`) -> create hook (may change options or delegate) ->
  session open (workspace created by the shell) -> history (stored window + the client's
  transcript, overlap removed) -> [observers prepare the step] -> driver turn (tool steps,
  bounded retries) -> next hook (continue, delegate, finish) -> end. Permission is checked before the runtime accepts the
  message (a refusal leaves nothing behind), so it is not a phase here.
- Every input in every phase has an outcome (the table is total: `test_turn_machine` checks
  it). An input a phase does not expect is ignored there (`_ignore`): a late hook result
  after a stop, a session that opened after the turn ended (a child's is closed).
- Exactly one end: the machine ends a turn by one `EndTurn` (fed to the runtime, which emits
  the one `TurnEnded`), then waits in `ENDING` for that `TurnEnded` (`turn_ended`). The
  runtime may also end a turn by itself (a deleted topic): `turn_ended` is accepted in
  every phase, and seals the steps either way.
- Observers' `prepare_step` (only when one is installed: `prepare`) sees each step before its
  first send and decides what is sent; it runs like a hook: a stop cancels it.
- Stop: a running hook is cancelled (`CancelHook`) and the turn ends `stopped` at once; while
  the driver answers, the runtime's `Interrupt` goes to `session_key` and the driver's end
  passes (as `stopped`). Any failure (`lost`: a session that cannot open or broke, a send
  that failed, an exception in the shell, mapped to a `HostdError` there) ends the turn
  `error` with its message, or `stopped` when a stop was asked.
- Delegation runs a child frame inside the root turn: its own session (`<topic>/delegate<n>`),
  the root's turn id (its chunks land in the root's answer), commands routed to it, closed at
  the end. A child's end ends the root turn: a delegation is the last step of its turn.
- A failed driver step with no output may run again when the observers ask (`AskRetry`), at
  most `MAX_RETRIES` times per step. A next hook may continue at most `MAX_CONTINUES` times.
- Steps (`hook_create`, `sandbox`, `llm`, `tool`, `hook_next`, `delegate`) are recorded in one
  `TurnRecord` and saved once, at the end (`SaveSteps`); steps still running take the
  turn's status.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import msgspec

from hostd.core.assistants import AssistantConfig, RolesConfig
from hostd.core.history_overlap import history_window, merge_history
from hostd.core.hook_api import (
    Continue,
    Delegate,
    ErrorInfo,
    Finish,
    HookContext,
    StepPrep,
    TurnInfo,
    UpdateOptions,
)
from hostd.core.options import SessionOptions, merge_options, session_options
from hostd.core.sandbox_policy import policy_of
from hostd.core.turn_effects import (
    AppendText,
    AskRetry,
    CancelHook,
    CloseSession,
    EndTurn,
    LoadConfig,
    Notify,
    OpenSession,
    PrepareStep,
    RunHook,
    SaveSteps,
    SendToDriver,
    TurnEffect,
)
from hostd.core.turn_record import MAX_DEPTH, StepRecord, TurnRecord
from hostd.core.workspaces import workspace_of
from hostd_protocol.client_messages import TopicInfo
from hostd_protocol.common import (
    Capabilities,
    Chunk,
    HistoryMessage,
    TextDelta,
    ToolCall,
    ToolResult,
    TurnStatus,
)
from hostd_protocol.driver_messages import Send, TurnEnd
from hostd_protocol.errors import HookError, HostdError

#: A next hook may continue one turn this many times.
MAX_CONTINUES = 8
#: A failed driver step may run again this many times (when an observer asks).
MAX_RETRIES = 3


class Phase(enum.Enum):
    """Where a turn is. Each phase but the last two waits for one effect's result."""

    CONFIG = "config"  # LoadConfig out: the frame's assistant and the roles
    CREATE_HOOK = "create_hook"  # RunHook(create) out
    OPENING = "opening"  # OpenSession out
    PREPARING = "preparing"  # PrepareStep out: the observers decide what the step sends
    DRIVING = "driving"  # SendToDriver out: the driver answers until its TurnEnd
    RETRY = "retry"  # AskRetry out: run the failed step again?
    NEXT_HOOK = "next_hook"  # RunHook(next) out
    ENDING = "ending"  # EndTurn out: waiting for the runtime's TurnEnded
    ENDED = "ended"  # steps saved; every input is ignored


# --- frames -----------------------------------------------------------------------------------


@dataclass
class Frame:
    """The root assistant (depth 0) or a delegated child of the turn."""

    assistant_name: str
    depth: int
    text: str
    options: dict[str, Any]
    history: list[HistoryMessage]
    key: str
    assistant: AssistantConfig | None = None
    session: SessionOptions | None = None
    capabilities: Capabilities | None = None
    continues: int = 0


class TurnStateError(RuntimeError):
    """An input the table does not know (a bug in the shell); nothing was changed."""


@dataclass
class TurnMachine:
    """One running turn (see the module docstring). Inputs are the methods below the table;
    each returns the effects to execute, in order.

    Args:
        topic: The topic as it is when the turn starts.
        send: The runtime's `Send` (turn id, user row id, text, stored history, per-send
            options).
        workspaces: The one working-directory root.
        transcript: The client's own transcript sent with the message (history overlap).
        profile: The requester's profile (role resolution, hook context).
        ask_retry: Whether observers can ask for retries (else a failed step just ends).
        prepare: Whether observers prepare each step (`PrepareStep`; else it goes straight
            to the driver).
        now: Monotonic seconds; every input takes `now` too.
    """

    topic: TopicInfo
    send: Send
    workspaces: str
    now: float
    transcript: list[HistoryMessage] = field(default_factory=list)
    profile: str = ""
    ask_retry: bool = False
    prepare: bool = False
    phase: Phase = Phase.CONFIG
    frames: list[Frame] = field(default_factory=list)
    record: TurnRecord = field(init=False)
    info: TurnInfo = field(init=False)
    stopping: bool = False
    #: The driver end a next hook or a retry question is holding.
    held: TurnEnd | None = None
    llm: StepRecord | None = None
    hook_step: StepRecord | None = None
    sandbox_step: StepRecord | None = None
    tools: dict[str, StepRecord] = field(default_factory=dict)
    answer: list[str] = field(default_factory=list)
    attempts: int = 0
    child_keys: list[str] = field(default_factory=list)
    #: The last Send of the current step (a retry sends it again; while PREPARING, the one
    #: the observers are preparing).
    last_send: Send | None = None

    def __post_init__(self) -> None:
        self.record = TurnRecord(turn_id=self.send.turn_id, started=self.now, text=self.send.text)
        self.info = TurnInfo(
            topic_id=self.topic.id,
            turn_id=self.send.turn_id,
            assistant=self.topic.assistant,
            driver=self.topic.driver,
            model=self.topic.model,
            profile=self.profile,
        )

    # --- queries ---------------------------------------------------------------------------

    @property
    def turn_id(self) -> str:
        return self.send.turn_id

    @property
    def session_key(self) -> str:
        """Where the runtime's commands (interrupt, steer, approvals) go now."""
        for frame in reversed(self.frames):
            if frame.capabilities is not None:
                return frame.key
        return self.topic.id

    @property
    def over(self) -> bool:
        return self.phase in (Phase.ENDING, Phase.ENDED)

    # --- inputs ----------------------------------------------------------------------------

    def start(self, now: float) -> list[TurnEffect]:
        """The turn begins: read the root assistant's config."""
        if self.frames:
            raise TurnStateError(f"turn {self.turn_id} already started")
        self.frames.append(
            Frame(
                assistant_name=self.topic.assistant,
                depth=0,
                text=self.send.text,
                options=dict(self.send.options),
                history=list(self.send.history),
                key=self.topic.id,
            )
        )
        return [LoadConfig(self.topic.assistant)]

    def config_loaded(
        self, assistant: AssistantConfig, roles: RolesConfig, now: float
    ) -> list[TurnEffect]:
        return self._input("config_loaded", now, assistant, roles)

    def hook_returned(self, result: object, now: float) -> list[TurnEffect]:
        return self._input("hook_returned", now, result)

    def hook_failed(self, error: HostdError, now: float) -> list[TurnEffect]:
        return self._input("hook_failed", now, error)

    def session_opened(self, key: str, capabilities: Capabilities, now: float) -> list[TurnEffect]:
        return self._input("session_opened", now, key, capabilities)

    def step_prepared(self, prep: StepPrep, now: float) -> list[TurnEffect]:
        """The observers' `prepare_step` chain returned: send what it says."""
        return self._input("step_prepared", now, prep)

    def chunk(self, chunk: Chunk, now: float) -> list[TurnEffect]:
        """A chunk of the answer (tool steps, the text a next hook reads)."""
        return self._input("chunk", now, chunk)

    def driver_end(self, end: TurnEnd, now: float) -> list[TurnEffect]:
        """The driver's `TurnEnd` of the current step (not yet fed to the runtime)."""
        return self._input("driver_end", now, end)

    def retry_decided(self, retry: bool, now: float) -> list[TurnEffect]:
        return self._input("retry_decided", now, retry)

    def stop(self, now: float) -> list[TurnEffect]:
        """The user stopped the turn (the runtime has already sent its `Interrupt`)."""
        return self._input("stop", now)

    def lost(self, error: HostdError, now: float) -> list[TurnEffect]:
        """A session failed or broke, a send failed, or the shell raised (mapped)."""
        return self._input("lost", now, error)

    def turn_ended(
        self, status: TurnStatus, error: str, error_code: str, now: float
    ) -> list[TurnEffect]:
        """The runtime emitted this turn's `TurnEnded`."""
        return self._input("turn_ended", now, status, error, error_code)

    def _input(self, name: str, now: float, *args: Any) -> list[TurnEffect]:
        handler = TABLE[self.phase].get(name)
        if handler is None:
            raise TurnStateError(f"turn {self.turn_id}: input {name!r} in phase {self.phase}")
        return handler(self, now, *args)

    # --- handlers (named in TABLE) -----------------------------------------------------------

    def _ignore(self, now: float, *args: Any) -> list[TurnEffect]:
        return []

    def _on_config(
        self, now: float, assistant: AssistantConfig, roles: RolesConfig
    ) -> list[TurnEffect]:
        frame = self.frames[-1]
        frame.assistant = assistant
        out: list[TurnEffect] = []
        if frame.depth == 0:
            self.record.assistant = assistant.name
            self.info = replace(self.info, assistant=assistant.name)
            out.append(Notify("turn_start", (self.info,)))
        try:
            frame.session = session_options(
                self.topic,
                assistant,
                roles,
                self.workspaces,
                profile=self.profile,
                child=frame.depth > 0,
            )
        except HostdError as exc:
            return [*out, *self._end("error", exc.message, exc.code)]
        if frame.depth == 0:
            self.info = replace(self.info, driver=frame.session.driver, model=frame.session.model)
        if assistant.create_hook:
            return [*out, *self._run_hook("create", assistant.create_hook, now)]
        return [*out, *self._open(frame, now)]

    def _on_hook_returned(self, now: float, result: object) -> list[TurnEffect]:
        frame = self.frames[-1]
        kind = "create" if self.phase is Phase.CREATE_HOOK else "next"
        allowed: tuple[type, ...] = (
            (UpdateOptions, Delegate) if kind == "create" else (Continue, Delegate, Finish)
        )
        if result is not None and not isinstance(result, allowed):
            names = ", ".join(t.__name__ for t in allowed)
            return self._on_hook_failed(
                now,
                HookError(
                    f"{kind} hook returned a {type(result).__name__}; expected None or {names}"
                ),
            )
        out = self._end_hook_step(now)
        if isinstance(result, Delegate):
            return [*out, *self._delegate(result, now)]
        if kind == "create":
            if isinstance(result, UpdateOptions):
                frame.options = merge_options(frame.options, result.options)
            return [*out, *self._open(frame, now)]
        held = self.held
        assert held is not None
        self.held = None
        if result is None:
            return [*out, *self._end_with(held)]
        if isinstance(result, Finish):
            text: list[TurnEffect] = [AppendText(result.response)] if result.response else []
            return [*out, *text, *self._end_with(held)]
        assert isinstance(result, Continue)
        return [*out, *self._continue(frame, result.text, now)]

    def _on_hook_failed(self, now: float, error: HostdError) -> list[TurnEffect]:
        out = self._end_hook_step(now, error)
        self.held = None
        return [*out, *self._end("error", error.message, error.code)]

    def _on_session_opened(
        self, now: float, key: str, capabilities: Capabilities
    ) -> list[TurnEffect]:
        frame = self.frames[-1]
        if key != frame.key:
            return []
        frame.capabilities = capabilities
        step, self.sandbox_step = self.sandbox_step, None
        if step is not None:
            self.record.end_step(step, now)
        if frame.depth == 0:
            send = replace_send(self.send, options=frame.options)
            if capabilities.needs_history:
                size = frame.assistant.history_size if frame.assistant else len(send.history)
                merged = merge_history(
                    history_window(send.history, size),
                    self.transcript,
                    send.text,
                    text_id=send.message_id,
                )
                send = replace_send(send, history=merged.messages)
        else:
            send = Send(
                turn_id=self.turn_id,
                text=frame.text,
                options=frame.options,
                history=frame.history if capabilities.needs_history else [],
            )
        return self._step(frame, send, now)

    def _on_prepared(self, now: float, prep: StepPrep) -> list[TurnEffect]:
        assert self.last_send is not None
        send = replace_send(
            self.last_send, text=prep.text, options=dict(prep.options), history=list(prep.history)
        )
        return self._drive(self.frames[-1], send, now)

    def _on_chunk(self, now: float, chunk: Chunk) -> list[TurnEffect]:
        self.record.partial = True
        depth = self.frames[-1].depth
        if isinstance(chunk, TextDelta):
            frame = self.frames[-1]
            if frame.assistant is not None and frame.assistant.next_hook:
                self.answer.append(chunk.text)
            return []
        if isinstance(chunk, ToolCall):
            self.tools[chunk.call_id] = self.record.begin_step("tool", now, chunk.name, depth=depth)
            return [Notify("tool", (self.info, chunk))]
        if isinstance(chunk, ToolResult):
            out: list[TurnEffect] = []
            step = self.tools.pop(chunk.call_id, None)
            if step is not None:
                if chunk.is_error:
                    self.record.end_step(step, now, "error", chunk.output[:200])
                else:
                    self.record.end_step(step, now)
                out.append(Notify("step", (self.info, step)))
            out.append(Notify("tool", (self.info, chunk)))
            return out
        return []

    def _on_driver_end(self, now: float, end: TurnEnd) -> list[TurnEffect]:
        if end.turn_id != self.turn_id:
            return []
        frame = self.frames[-1]
        out: list[TurnEffect] = []
        if self.llm is not None:
            self.record.end_step(self.llm, now, end.status, end.error, end.error_code)
            out.append(Notify("step", (self.info, self.llm)))
            self.llm = None
        if self.stopping or end.status == "stopped":
            return [*out, *self._end_with(end)]
        if end.status == "error":
            if self.ask_retry and not self.record.partial and self.attempts < MAX_RETRIES:
                self.held = end
                self.phase = Phase.RETRY
                info = ErrorInfo(
                    topic_id=self.topic.id,
                    turn_id=self.turn_id,
                    step="llm",
                    error=end.error,
                    error_code=end.error_code,
                    attempt=self.attempts,
                )
                return [*out, AskRetry(info)]
            return [*out, *self._end_with(end)]
        assistant = frame.assistant
        if assistant is not None and assistant.next_hook:
            self.held = end
            return [*out, *self._run_hook("next", assistant.next_hook, now)]
        return [*out, *self._end_with(end)]

    def _on_retry(self, now: float, retry: bool) -> list[TurnEffect]:
        held = self.held
        assert held is not None
        self.held = None
        if not retry:
            return self._end_with(held)
        self.attempts += 1
        assert self.last_send is not None
        return self._drive(self.frames[-1], self.last_send, now)

    def _on_stop(self, now: float) -> list[TurnEffect]:
        self.stopping = True
        if self.phase is Phase.DRIVING:
            return []  # the runtime's Interrupt is on its way; the driver's end passes
        out: list[TurnEffect] = []
        if self.phase in (Phase.CREATE_HOOK, Phase.NEXT_HOOK, Phase.PREPARING):
            out = [CancelHook(), *self._end_hook_step(now, status="stopped")]
        self.held = None
        return [*out, *self._end("stopped", "", "")]

    def _on_lost(self, now: float, error: HostdError) -> list[TurnEffect]:
        out: list[TurnEffect] = []
        if self.phase in (Phase.CREATE_HOOK, Phase.NEXT_HOOK, Phase.PREPARING):
            out = [CancelHook(), *self._end_hook_step(now, error)]
        if self.llm is not None:
            self.record.end_step(self.llm, now, "error", str(error), error.code)
            out.append(Notify("step", (self.info, self.llm)))
            self.llm = None
        self.held = None
        if self.stopping:
            return [*out, *self._end("stopped", "", "")]
        return [*out, *self._end("error", str(error), error.code)]

    def _on_turn_ended(
        self, now: float, status: TurnStatus, error: str, error_code: str
    ) -> list[TurnEffect]:
        out: list[TurnEffect] = []
        if self.phase in (Phase.CREATE_HOOK, Phase.NEXT_HOOK, Phase.PREPARING):
            out.append(CancelHook())
        self.phase = Phase.ENDED
        self.record.set_status(status, error, error_code)
        outcome = self.record.finish(now)
        out.append(SaveSteps(self.topic.id, outcome))
        out.append(Notify("turn_finish", (self.info, outcome)))
        out.extend(CloseSession(key) for key in self.child_keys)
        return out

    def _on_late_session(
        self, now: float, key: str, capabilities: Capabilities
    ) -> list[TurnEffect]:
        """A child session that opened after its turn ended is closed (the root's stays: it
        is the topic's session)."""
        return [CloseSession(key)] if key in self.child_keys else []

    # --- steps ------------------------------------------------------------------------------

    def _run_hook(self, kind: Literal["create", "next"], spec: str, now: float) -> list[TurnEffect]:
        frame = self.frames[-1]
        assert frame.assistant is not None
        self.phase = Phase.CREATE_HOOK if kind == "create" else Phase.NEXT_HOOK
        step_kind: Literal["hook_create", "hook_next"] = (
            "hook_create" if kind == "create" else "hook_next"
        )
        self.hook_step = self.record.begin_step(step_kind, now, spec, depth=frame.depth)
        options = frame.options
        if kind == "create":
            options = merge_options(
                frame.assistant.options,
                self.topic.options if frame.depth == 0 else {},
                frame.options,
            )
        ctx = HookContext(
            topic_id=self.topic.id,
            turn_id=self.turn_id,
            assistant=frame.assistant.name,
            text=frame.text,
            options=options,
            profile=self.profile,
            history=list(frame.history),
            depth=frame.depth,
            answer="".join(self.answer) if kind == "next" else "",
            status=self.held.status if kind == "next" and self.held is not None else "",
        )
        return [RunHook(kind, spec, ctx)]

    def _end_hook_step(
        self, now: float, error: HostdError | None = None, *, status: str = ""
    ) -> list[TurnEffect]:
        step, self.hook_step = self.hook_step, None
        if step is None:
            return []
        if error is not None:
            self.record.end_step(step, now, "error", error.message, error.code)
        elif status == "stopped":
            self.record.end_step(step, now, "stopped")
        else:
            self.record.end_step(step, now)
        return [Notify("step", (self.info, step))]

    def _open(self, frame: Frame, now: float) -> list[TurnEffect]:
        assert frame.session is not None
        self.phase = Phase.OPENING
        if frame.depth > 0:
            self.child_keys.append(frame.key)
        # The sandbox / standalone workspace step (issue 23): recorded when the session's
        # options ask for either; it ends when the session is open (a refusal ends the turn,
        # and the step takes the turn's status).
        try:
            policy = policy_of(frame.session.options)
            workspace = workspace_of(frame.session.options) if frame.depth == 0 else None
        except HostdError as exc:
            return self._end("error", exc.message, exc.code)
        if policy.confined or workspace is not None:
            detail = f"sandbox {policy.describe()}"
            if workspace is not None:
                detail += f"; workspace per {workspace.scope}"
            self.sandbox_step = self.record.begin_step("sandbox", now, detail, depth=frame.depth)
        return [OpenSession(frame.key, frame.session, root=frame.depth == 0)]

    def _step(self, frame: Frame, send: Send, now: float) -> list[TurnEffect]:
        """A new driver step: prepared by the observers first when one prepares steps."""
        if not self.prepare:
            return self._drive(frame, send, now)
        self.phase = Phase.PREPARING
        self.last_send = send
        prep = StepPrep(
            turn_id=self.turn_id,
            text=send.text,
            options=dict(send.options),
            history=tuple(send.history),
            topic_id=self.topic.id,
            assistant=frame.assistant.name if frame.assistant else frame.assistant_name,
            depth=frame.depth,
        )
        return [PrepareStep(prep)]

    def _drive(self, frame: Frame, send: Send, now: float) -> list[TurnEffect]:
        self.phase = Phase.DRIVING
        self.last_send = send
        self.answer.clear()
        detail = frame.session.driver if frame.session is not None else ""
        self.llm = self.record.begin_step("llm", now, detail, depth=frame.depth)
        return [SendToDriver(frame.key, send)]

    def _continue(self, frame: Frame, text: str, now: float) -> list[TurnEffect]:
        frame.continues += 1
        spec = frame.assistant.next_hook if frame.assistant else ""
        if frame.continues > MAX_CONTINUES:
            error = HookError(
                f"next hook {spec!r} continued turn {self.turn_id} more than "
                f"{MAX_CONTINUES} times; it must return None or Finish at some point",
                details={"hook": spec},
            )
            return self._end("error", error.message, error.code)
        caps = frame.capabilities or Capabilities()
        if caps.needs_history:
            # A stateless driver must see the round it just answered.
            frame.history = [
                *frame.history,
                HistoryMessage(role="user", text=frame.text),
                HistoryMessage(role="assistant", text="".join(self.answer)),
            ]
        frame.text = text
        send = Send(
            turn_id=self.turn_id,
            text=text,
            history=frame.history if caps.needs_history else [],
            options=frame.options,
        )
        return self._step(frame, send, now)

    def _delegate(self, delegate: Delegate, now: float) -> list[TurnEffect]:
        parent = self.frames[-1]
        step = self.record.begin_step("delegate", now, delegate.assistant, depth=parent.depth)
        if len(self.frames) > MAX_DEPTH:
            chain = " -> ".join(f.assistant_name or "default" for f in self.frames)
            error = HookError(
                f"delegation nested deeper than {MAX_DEPTH} levels ({chain} -> "
                f"{delegate.assistant}); a create/next hook probably delegates in a loop",
                details={"depth": len(self.frames)},
            )
            self.record.end_step(step, now, "error", error.message, error.code)
            return [
                Notify("step", (self.info, step)),
                *self._end("error", error.message, error.code),
            ]
        depth = parent.depth + 1
        self.frames.append(
            Frame(
                assistant_name=delegate.assistant,
                depth=depth,
                text=delegate.text or parent.text,
                options=merge_options(self.send.options, delegate.options),
                history=list(parent.history),
                key=f"{self.topic.id}/delegate{depth}",
            )
        )
        self.phase = Phase.CONFIG
        return [LoadConfig(delegate.assistant)]

    def _end(self, status: TurnStatus, error: str, code: str) -> list[TurnEffect]:
        return self._end_with(
            TurnEnd(turn_id=self.turn_id, status=status, error=error, error_code=code)
        )

    def _end_with(self, end: TurnEnd) -> list[TurnEffect]:
        self.phase = Phase.ENDING
        return [EndTurn(end)]


def replace_send(send: Send, **changes: Any) -> Send:
    return msgspec.structs.replace(send, **changes)


Handler = Callable[..., list[TurnEffect]]
_T = TurnMachine

#: The machine's inputs (the table's columns).
INPUTS = (
    "config_loaded",
    "hook_returned",
    "hook_failed",
    "session_opened",
    "step_prepared",
    "chunk",
    "driver_end",
    "retry_decided",
    "stop",
    "lost",
    "turn_ended",
)
_ANY: dict[str, Handler] = {
    "stop": _T._on_stop,
    "lost": _T._on_lost,
    "turn_ended": _T._on_turn_ended,
    "session_opened": _T._on_late_session,
}
_OVER: dict[str, Handler] = {"session_opened": _T._on_late_session}


def _row(handlers: Mapping[str, Handler]) -> dict[str, Handler]:
    """A full row: the inputs a phase does not name are ignored there."""
    return {name: handlers.get(name, _T._ignore) for name in INPUTS}


#: phase -> input -> handler, read top to bottom in the pipeline's order. Total: every input
#: has an outcome in every phase (unnamed ones are `_ignore`).
TABLE: Mapping[Phase, Mapping[str, Handler]] = {
    Phase.CONFIG: _row({**_ANY, "config_loaded": _T._on_config}),
    Phase.CREATE_HOOK: _row(
        {**_ANY, "hook_returned": _T._on_hook_returned, "hook_failed": _T._on_hook_failed}
    ),
    Phase.OPENING: _row({**_ANY, "session_opened": _T._on_session_opened}),
    Phase.PREPARING: _row({**_ANY, "step_prepared": _T._on_prepared}),
    Phase.DRIVING: _row({**_ANY, "chunk": _T._on_chunk, "driver_end": _T._on_driver_end}),
    Phase.RETRY: _row({**_ANY, "retry_decided": _T._on_retry}),
    Phase.NEXT_HOOK: _row(
        {**_ANY, "hook_returned": _T._on_hook_returned, "hook_failed": _T._on_hook_failed}
    ),
    Phase.ENDING: _row({**_OVER, "turn_ended": _T._on_turn_ended}),
    Phase.ENDED: _row(_OVER),
}


__all__ = [
    "INPUTS",
    "MAX_CONTINUES",
    "MAX_RETRIES",
    "TABLE",
    "AppendText",
    "AskRetry",
    "CancelHook",
    "CloseSession",
    "EndTurn",
    "Frame",
    "LoadConfig",
    "Notify",
    "OpenSession",
    "Phase",
    "PrepareStep",
    "RunHook",
    "SaveSteps",
    "SendToDriver",
    "TurnEffect",
    "TurnMachine",
    "TurnStateError",
]
