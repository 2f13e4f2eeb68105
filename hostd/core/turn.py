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

The machine's phases, frames and limits are in `hostd.core.turn_state`; how each step begins
(its effects) in `hostd.core.turn_steps` (mixed in); the table and the handlers that decide
the next step are here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import msgspec

from hostd.core.assistants import AssistantConfig, RolesConfig
from hostd.core.history_overlap import history_window, merge_history
from hostd.core.hook_api import (
    Continue,
    Delegate,
    ErrorInfo,
    Finish,
    StepPrep,
    TurnInfo,
    UpdateOptions,
)
from hostd.core.options import merge_options, session_options
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
from hostd.core.turn_record import StepRecord, TurnRecord
from hostd.core.turn_state import MAX_CONTINUES, MAX_RETRIES, Frame, Phase, TurnStateError
from hostd.core.turn_steps import TurnSteps
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


@dataclass
class TurnMachine(TurnSteps):
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
        key: The root frame's session key: "" = the topic's own session (`topic.id`); a
            multi-answer turn's extra lane runs with `<topic>/lane<n>-<turn>` (its children
            below it).
        fresh: The root session is opened new for this turn and must be fed the history even
            when its driver keeps its own (a multi-answer lane); otherwise a history sent
            before the capabilities were known is dropped for a driver that needs none.
    """

    topic: TopicInfo
    send: Send
    workspaces: str
    now: float
    transcript: list[HistoryMessage] = field(default_factory=list)
    profile: str = ""
    ask_retry: bool = False
    prepare: bool = False
    key: str = ""
    fresh: bool = False
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
        self.key = self.key or self.topic.id
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
        return self.key

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
                key=self.key,
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
            elif send.history and not self.fresh:
                send = replace_send(send, history=[])
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
