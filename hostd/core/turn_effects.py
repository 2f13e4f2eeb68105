"""The turn machine's effects: what the shell does for a turn (`hostd.shell.turns` executes
them), each answered, where it says so, by an input of `hostd.core.turn.TurnMachine`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from hostd.core.hook_api import ErrorInfo, HookContext, StepPrep
from hostd.core.options import SessionOptions
from hostd.core.turn_record import TurnOutcome
from hostd_protocol.driver_messages import Send, TurnEnd


@dataclass(frozen=True)
class LoadConfig:
    """Read assistant `assistant` ("" = default) and the roles -> `config_loaded` / `lost`."""

    assistant: str


@dataclass(frozen=True)
class RunHook:
    """Call the user's hook (cancellable) -> `hook_returned` / `hook_failed`."""

    kind: Literal["create", "next"]
    spec: str
    context: HookContext


@dataclass(frozen=True)
class CancelHook:
    """Cancel the running hook (or `PrepareStep`); its result, if any, is not fed."""


@dataclass(frozen=True)
class OpenSession:
    """Create `options.working_dir`, open (or reuse, for the root) the session `key` ->
    `session_opened` / `lost`. The root session resumes with the topic's token."""

    key: str
    options: SessionOptions
    root: bool


@dataclass(frozen=True)
class PrepareStep:
    """Offer the step to the observers' `prepare_step` chain (cancellable, like a hook) ->
    `step_prepared` with what to send."""

    prep: StepPrep


@dataclass(frozen=True)
class SendToDriver:
    """Write `send` to session `key` (in order with the runtime's commands); a failure ->
    `lost`. The driver's `TurnEnd` for it comes back as `driver_end`."""

    key: str
    send: Send


@dataclass(frozen=True)
class AppendText:
    """Add text to the turn's answer (a next hook's `Finish` response)."""

    text: str


@dataclass(frozen=True)
class AskRetry:
    """Offer a failed step to the observers -> `retry_decided`."""

    info: ErrorInfo


@dataclass(frozen=True)
class EndTurn:
    """Feed this end to the runtime: it emits the turn's one `TurnEnded` -> `turn_ended`."""

    end: TurnEnd


@dataclass(frozen=True)
class CloseSession:
    """Close a delegated child's session."""

    key: str


@dataclass(frozen=True)
class SaveSteps:
    """Store the sealed turn's steps."""

    topic_id: str
    outcome: TurnOutcome


@dataclass(frozen=True)
class Notify:
    """An observer call (`turn_start`, `step`, `tool`, `turn_finish`), queued in order."""

    method: str
    args: tuple[Any, ...]


TurnEffect = (
    LoadConfig
    | RunHook
    | CancelHook
    | OpenSession
    | PrepareStep
    | SendToDriver
    | AppendText
    | AskRetry
    | EndTurn
    | CloseSession
    | SaveSteps
    | Notify
)


__all__ = [
    "AppendText",
    "AskRetry",
    "CancelHook",
    "CloseSession",
    "EndTurn",
    "LoadConfig",
    "Notify",
    "OpenSession",
    "PrepareStep",
    "RunHook",
    "SaveSteps",
    "SendToDriver",
    "TurnEffect",
]
