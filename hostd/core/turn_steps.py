"""The turn machine's steps: how each pipeline step begins (a hook runs, a session opens, a
step is prepared or sent to the driver, a continue, a delegation, the end). `TurnMachine`'s
handlers (`hostd.core.turn`) decide which step comes next; these build its effects and move
the phase. Each returns the effects to execute, like every input of the machine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from hostd.core.hook_api import Delegate, HookContext, StepPrep, TurnInfo
from hostd.core.options import merge_options
from hostd.core.sandbox_policy import policy_of
from hostd.core.turn_effects import (
    EndTurn,
    LoadConfig,
    Notify,
    OpenSession,
    PrepareStep,
    RunHook,
    SendToDriver,
    TurnEffect,
)
from hostd.core.turn_record import MAX_DEPTH, StepRecord, TurnRecord
from hostd.core.turn_state import MAX_CONTINUES, Frame, Phase
from hostd.core.workspaces import workspace_of
from hostd_protocol.client_messages import TopicInfo
from hostd_protocol.common import Capabilities, HistoryMessage, TurnStatus
from hostd_protocol.driver_messages import Send, TurnEnd
from hostd_protocol.errors import HookError, HostdError

__all__ = ["TurnSteps"]


class TurnSteps:
    """The steps of `TurnMachine` (a mixin: one concept, kept beside the machine's table)."""

    topic: TopicInfo
    send: Send
    profile: str
    prepare: bool
    key: str
    phase: Phase
    frames: list[Frame]
    record: TurnRecord
    info: TurnInfo
    held: TurnEnd | None
    llm: StepRecord | None
    hook_step: StepRecord | None
    sandbox_step: StepRecord | None
    answer: list[str]
    child_keys: list[str]
    last_send: Send | None

    if TYPE_CHECKING:  # provided by TurnMachine

        @property
        def turn_id(self) -> str: ...

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
                key=f"{self.key}/delegate{depth}",
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
