"""What the store writer batches (operations) and what the store gives back (records).

Plain immutable values, no apsw and no trio: `hostd.shell.store.database` executes them
(`StoreWriter` batches them, `hostd.shell.store.writer`). Operations with the same `op_key`
coalesce inside one batch (the newest wins), which is what makes a `SaveRow` per chunk cheap.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hostd.core.effects import DeleteRow as DeleteRow
from hostd.core.effects import SaveApproval, SaveRow, SaveTopic
from hostd.core.effects import TouchRow as TouchRow
from hostd_protocol.client_messages import ScheduleInfo, TopicInfo
from hostd_protocol.common import Usage

# --- operations (what the writer batches) --------------------------------------------------------

#: Five operations are the topic runtime's own effects, stored as they are: one class each,
#: not a copy (a row, a topic record, an approval, a removed row, a touched row need no
#: topic id). A `TouchRow` carries the row as it was at its chunk (`RowSnapshot`); the newest
#: per row wins in a batch and is built (`row.freeze()`) when the batch is written.
PutTopic = SaveTopic
PutRow = SaveRow
PutApproval = SaveApproval


@dataclass(frozen=True, slots=True)
class DeleteTopic:
    """The topic and everything of it (rows, approvals, turns, steps) go."""

    topic_id: str


@dataclass(frozen=True, slots=True)
class PutSeq:
    """The topic's last emitted seq (a restart continues above it)."""

    topic_id: str
    seq: int


@dataclass(frozen=True, slots=True)
class PutResumeToken:
    topic_id: str
    token: str
    at: float


@dataclass(frozen=True, slots=True)
class PutTurn:
    topic_id: str
    turn_id: str
    status: str | None
    error: str = ""
    error_code: str = ""
    resume_text: str = ""
    at: float = 0.0


@dataclass(frozen=True, slots=True)
class PutTurnUsage:
    """A turn's usage so far (a driver's usage figure is cumulative for its turn, so the
    newest replaces the stored one). Only turns with a `turns` row keep it (root turns)."""

    topic_id: str
    turn_id: str
    usage: Usage


@dataclass(frozen=True, slots=True)
class StepRow:
    """One step of a turn (`hook_create`, `llm`, `tool`, `hook_next`, `delegate`)."""

    kind: str
    status: str
    started_at: float
    ended_at: float | None = None
    #: JSON-able details: index, depth, detail (hook / driver / tool name), error, error_code.
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PutSteps:
    """Every step of one ended turn, written once at its end (replacing any earlier write)."""

    topic_id: str
    turn_id: str
    steps: tuple[StepRow, ...]


@dataclass(frozen=True, slots=True)
class PutSchedule:
    """Insert or replace a schedule (its definition and its last run)."""

    schedule: ScheduleInfo


@dataclass(frozen=True, slots=True)
class DeleteSchedule:
    schedule_id: str


Op = (
    PutTopic
    | DeleteTopic
    | PutSeq
    | PutRow
    | TouchRow
    | DeleteRow
    | PutApproval
    | PutResumeToken
    | PutTurn
    | PutTurnUsage
    | PutSteps
    | PutSchedule
    | DeleteSchedule
)


def op_key(op: Op) -> tuple[str, str]:
    """Ops with the same key coalesce: the newest replaces the older one in a batch."""
    # The two ops every streamed chunk queues come first, by exact type (they are final).
    kind = type(op)
    if kind is PutSeq:
        return ("seq", op.topic_id)  # type: ignore[union-attr]
    if kind is TouchRow:
        return ("row", op.row_id)  # type: ignore[union-attr]
    if isinstance(op, PutTopic):
        return ("topic", op.topic.id)
    if isinstance(op, DeleteTopic):
        return ("topic", op.topic_id)
    if isinstance(op, PutSeq):
        return ("seq", op.topic_id)
    if isinstance(op, PutRow):
        return ("row", op.row.id)
    if isinstance(op, (TouchRow, DeleteRow)):
        return ("row", op.row_id)
    if isinstance(op, PutApproval):
        return ("approval", op.approval.id)
    if isinstance(op, PutResumeToken):
        return ("token", op.topic_id)
    if isinstance(op, PutSteps):
        return ("steps", op.turn_id)
    if isinstance(op, PutTurnUsage):
        return ("usage", op.turn_id)
    if isinstance(op, PutSchedule):
        return ("schedule", op.schedule.id)
    if isinstance(op, DeleteSchedule):
        return ("schedule", op.schedule_id)
    return ("turn", op.turn_id)


def op_topic(op: Op) -> str | None:
    if isinstance(op, PutTopic):
        return op.topic.id
    if isinstance(op, PutRow):
        return op.row.topic_id
    if isinstance(op, TouchRow):
        return op.row.base.topic_id
    if isinstance(op, PutApproval):
        return op.approval.topic_id
    if isinstance(
        op, (DeleteTopic, PutSeq, PutResumeToken, PutTurn, PutTurnUsage, PutSteps)
    ):
        return op.topic_id
    if isinstance(op, PutSchedule):
        return op.schedule.topic_id
    return None


# --- records ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TopicRecord:
    """A stored topic with what the daemon needs to bring it back."""

    info: TopicInfo
    last_seq: int
    resume_token: str | None


@dataclass(frozen=True)
class ReconcileReport:
    rows_failed: int
    approvals_cancelled: int
    turns_failed: int


@dataclass(frozen=True)
class TurnRecord:
    id: str
    topic_id: str
    status: str | None
    error: str
    error_code: str
    resume_text: str
