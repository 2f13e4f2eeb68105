"""What assistant hooks and observers see and return: plain values, shared by the turn
machine (`hostd.core.turn`, which decides what a result means) and the shell (`hostd.shell.hooks`,
which calls the user's code). Hook authors import them from `hostd.hooks`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from hostd_protocol.common import HistoryMessage


@dataclass(frozen=True)
class HookContext:
    """What a create or next hook sees. Read-only: hooks answer with a result value."""

    topic_id: str
    turn_id: str
    assistant: str
    text: str
    options: Mapping[str, Any]
    profile: str = ""
    history: Sequence[HistoryMessage] = ()
    depth: int = 0
    #: For the next hook: the answer the driver just gave (its text parts) and its status.
    answer: str = ""
    status: str = ""


@dataclass(frozen=True)
class Delegate:
    """Run the turn (or its continuation) as `assistant`, as a child of this turn.

    From the create hook, the child replaces this turn's driver call. `text` defaults to the
    current input; `options` are per-send overrides for the child.
    """

    assistant: str
    text: str = ""
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class UpdateOptions:
    """Create hook: merge these options over the turn's merged options."""

    options: Mapping[str, Any]


@dataclass(frozen=True)
class Continue:
    """Next hook: run the driver again with `text` as the next input of the same turn."""

    text: str


@dataclass(frozen=True)
class Finish:
    """Next hook: end the turn with this custom response (stored as an assistant answer)."""

    response: str


CreateResult = UpdateOptions | Delegate | None
NextResult = Continue | Delegate | Finish | None


@dataclass(frozen=True)
class TurnInfo:
    """A turn as observers see it at its start."""

    topic_id: str
    turn_id: str
    assistant: str
    driver: str = ""
    model: str = ""
    profile: str = ""
    depth: int = 0


@dataclass(frozen=True)
class StepPrep:
    """One driver step about to be sent, as observers' `prepare_step` sees it: exactly what
    the driver will get (`text`, per-step `options`, and `history`, empty for a driver that
    keeps its own). An observer returns a (modified) copy, and the copy is what is sent; the
    stored user row keeps the user's text. Called before each step's first send: the turn's
    first, each `Continue`, a delegated child's first (a retry resends the prepared step)."""

    turn_id: str
    text: str
    options: Mapping[str, Any]
    history: Sequence[HistoryMessage] = ()
    topic_id: str = ""
    #: The assistant whose step it is (a delegated child's own) and its delegation depth.
    assistant: str = ""
    depth: int = 0

    def with_options(self, **changes: Any) -> StepPrep:
        return replace(self, options={**self.options, **changes})


@dataclass(frozen=True)
class ErrorInfo:
    """A failed step, offered to every observer; any may ask for a retry."""

    topic_id: str
    turn_id: str
    step: str
    error: str
    error_code: str
    attempt: int


__all__ = [
    "Continue",
    "CreateResult",
    "Delegate",
    "ErrorInfo",
    "Finish",
    "HookContext",
    "NextResult",
    "StepPrep",
    "TurnInfo",
    "UpdateOptions",
]
