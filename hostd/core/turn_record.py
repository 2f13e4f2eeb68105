"""Per-turn bookkeeping: the single final-status truth, step records, the root/child stack.

Pure and synchronous (time comes in as `now`). The turn machine (`hostd.core.turn`) drives
it; this module guards the rules that make "every exit path writes exactly one final state"
checkable:

- A turn's final status has one source of truth, `TurnRecord.status`, which starts as
  `success`. Anything that goes wrong sets it (`fail`, `stop`, `fail_from`) before the
  pipeline leaves; the first failure wins (a later error while cleaning up does not hide the
  cause), except that an error always beats a stop.
- `finish()` seals the record and returns the `TurnOutcome` to write; a second `finish()`
  raises, so a double write is a bug that shows, not a silent duplicate.
- Resume data is part of the outcome only when the turn did not succeed.
- Steps (`hook_create`, `llm`, `tool`, `hook_next`, `delegate`) each end with a status; a
  step still running when the turn finishes ends with the turn's status.
- `TurnStack`: the user's turn is the root; a delegated run is a child. Only the root opens
  and closes the stream and writes the final state; a child records its steps (tagged with
  its depth) and its status in the root's one `TurnRecord` (a failed child fails the root).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import msgspec

from hostd_protocol.common import TurnStatus
from hostd_protocol.errors import HookError, HostdError

StepKind = Literal["hook_create", "sandbox", "llm", "tool", "hook_next", "delegate"]
StepStatus = Literal["running", "success", "error", "stopped"]

#: How deep delegations may nest before the pipeline refuses (a hook loop guard).
MAX_DEPTH = 8


class ResumeData(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """What `continue` needs to pick a failed or stopped turn up again.

    Stored (as JSON, in the turn record's `resume_text`) only when the turn did not succeed.
    """

    #: The user's input of the failed turn.
    text: str
    assistant: str = ""
    #: The per-send option overrides of the failed turn (assistant/topic ones are reloaded).
    options: dict[str, Any] = {}
    #: The step that failed or was stopped, e.g. "llm".
    failed_step: str = ""
    #: True when the driver had already answered part of it (continue instead of resend).
    partial: bool = False
    status: TurnStatus = "error"


_resume_encoder = msgspec.json.Encoder()
_resume_decoder = msgspec.json.Decoder(ResumeData)


def encode_resume(data: ResumeData) -> str:
    return _resume_encoder.encode(data).decode()


def decode_resume(text: str) -> ResumeData | None:
    """The resume data of a stored turn, or None when it has none (or it is unreadable)."""
    if not text:
        return None
    try:
        return _resume_decoder.decode(text)
    except msgspec.DecodeError:
        return None


@dataclass
class StepRecord:
    kind: StepKind
    index: int
    started: float
    status: StepStatus = "running"
    ended: float | None = None
    error: str = ""
    error_code: str = ""
    #: Nesting depth of the turn that ran it (0 = root), so child steps stay recognizable.
    depth: int = 0
    detail: str = ""


@dataclass(frozen=True)
class TurnOutcome:
    """The sealed result of a turn: what the store writes and what `turn-end` says."""

    turn_id: str
    status: TurnStatus
    error: str = ""
    error_code: str = ""
    steps: tuple[StepRecord, ...] = ()
    resume: ResumeData | None = None
    started: float = 0.0
    ended: float = 0.0

    @property
    def resume_text(self) -> str:
        return encode_resume(self.resume) if self.resume is not None else ""


class TurnAlreadyFinished(RuntimeError):
    """`finish()` was called twice: a pipeline bug (it would write two final states)."""


@dataclass
class TurnRecord:
    """The bookkeeping of one turn (root or child)."""

    turn_id: str
    started: float
    text: str = ""
    assistant: str = ""
    options: dict[str, Any] = field(default_factory=dict)
    status: TurnStatus = "success"
    error: str = ""
    error_code: str = ""
    steps: list[StepRecord] = field(default_factory=list)
    #: Set once the driver produced any output (decides continue vs resend on resume).
    partial: bool = False
    finished: bool = False

    # --- the final-status truth ------------------------------------------------------------

    def fail(self, message: str, code: str = "internal_error") -> None:
        """Mark the turn failed. The first error is kept; an error replaces a stop."""
        if self.status != "error":
            self.status, self.error, self.error_code = "error", message, code

    def stop(self, message: str = "") -> None:
        """Mark the turn stopped (user stop or cancellation), unless it already failed."""
        if self.status == "success":
            self.status, self.error, self.error_code = "stopped", message, ""

    def set_status(self, status: TurnStatus, error: str = "", code: str = "") -> None:
        """Adopt a status reported by someone else (the driver's turn end, a child turn)."""
        if status == "error":
            self.fail(error or "the turn failed", code or "driver_turn_error")
        elif status == "stopped":
            self.stop(error)

    def fail_from(self, exc: BaseException, *, cancelled: bool = False) -> None:
        """Record an exception leaving the pipeline: cancellation is a stop, never an error."""
        if cancelled:
            self.stop("cancelled")
        elif isinstance(exc, HostdError):
            self.fail(exc.message, exc.code)
        else:
            self.fail(f"{type(exc).__name__}: {exc}", "internal_error")

    # --- steps -----------------------------------------------------------------------------

    def begin_step(
        self, kind: StepKind, now: float, detail: str = "", *, depth: int = 0
    ) -> StepRecord:
        """Open a step; `depth` > 0 marks a step of a delegated child run."""
        step = StepRecord(kind=kind, index=len(self.steps), started=now, depth=depth, detail=detail)
        self.steps.append(step)
        return step

    def end_step(
        self,
        step: StepRecord,
        now: float,
        status: StepStatus = "success",
        error: str = "",
        code: str = "",
    ) -> None:
        if step.status != "running":
            return  # already ended (e.g. by a nested exit path)
        step.status, step.ended, step.error, step.error_code = status, now, error, code

    @property
    def failed_step(self) -> StepRecord | None:
        for step in reversed(self.steps):
            if step.status in ("error", "stopped"):
                return step
        return None

    # --- sealing ------------------------------------------------------------------------------

    def finish(self, now: float) -> TurnOutcome:
        """Seal the record; returns what to write. Raises `TurnAlreadyFinished` the 2nd time."""
        if self.finished:
            raise TurnAlreadyFinished(f"turn {self.turn_id} finished twice")
        self.finished = True
        for step in self.steps:
            if step.status == "running":
                # A step interrupted by the exit path ends with the turn's status.
                step.status, step.ended = (
                    ("success" if self.status == "success" else self.status),
                    now,
                )
                if self.status == "error" and not step.error:
                    step.error, step.error_code = self.error, self.error_code
        resume = None
        if self.status != "success":
            failed = self.failed_step
            resume = ResumeData(
                text=self.text,
                assistant=self.assistant,
                options=dict(self.options),
                failed_step=failed.kind if failed else "",
                partial=self.partial,
                status=self.status,
            )
        return TurnOutcome(
            turn_id=self.turn_id,
            status=self.status,
            error=self.error,
            error_code=self.error_code,
            steps=tuple(self.steps),
            resume=resume,
            started=self.started,
            ended=now,
        )


@dataclass(frozen=True)
class Frame:
    """One entry of the turn stack."""

    turn_id: str
    depth: int
    assistant: str = ""

    @property
    def is_root(self) -> bool:
        return self.depth == 0


class TurnStack:
    """The chain of turns of one request: the root (user turn) and nested delegations.

    `enter` must be paired with `exit` (the pipeline does it in a `finally`); exiting out of
    order is a bug and raises.
    """

    def __init__(self, max_depth: int = MAX_DEPTH) -> None:
        self._frames: list[Frame] = []
        self.max_depth = max_depth

    def enter(self, turn_id: str, assistant: str = "") -> Frame:
        """Push a turn. Raises `HookError` when delegation nests deeper than `max_depth`."""
        if len(self._frames) > self.max_depth:
            chain = " -> ".join(f.assistant or f.turn_id for f in self._frames)
            raise HookError(
                f"delegation nested deeper than {self.max_depth} levels ({chain} -> "
                f"{assistant or turn_id}); a create/next hook probably delegates in a loop",
                details={"depth": len(self._frames)},
            )
        frame = Frame(turn_id=turn_id, depth=len(self._frames), assistant=assistant)
        self._frames.append(frame)
        return frame

    def exit(self, frame: Frame) -> None:
        if not self._frames or self._frames[-1] is not frame:
            raise RuntimeError(f"turn stack exited out of order at {frame.turn_id}")
        self._frames.pop()

    @property
    def root(self) -> Frame | None:
        return self._frames[0] if self._frames else None

    @property
    def depth(self) -> int:
        return len(self._frames)

    def chain(self) -> list[str]:
        return [f.assistant or f.turn_id for f in self._frames]
