"""The seam between the sans-IO topic runtime and the trio shell that runs it.

The runtime (`hostd.core.topic_runtime.TopicRuntime`) takes inputs (client requests, driver events,
time) and returns a list of `Effect`s. The shell (`hostd.shell.daemon`) carries them out, in list
order, without interpreting them:

- `Emit`: fan the event out to every attached window and into the topic's replay buffer. The
  runtime has already stamped it with the next `seq` (strictly increasing per topic).
- `SaveRow` / `DeleteRow` / `SaveApproval` / `SaveResumeToken` / `SaveTurn`: hand to the store
  writer. `durable=True` marks a boundary the store must commit before the shell acknowledges
  anything that follows (a user message, a status change); plain content updates are batched
  on the flush interval. The shell coalesces repeated `SaveRow`s of one row between flushes,
  so emitting one per chunk is cheap: the row object is immutable, the store keeps the newest.
- `StartTurn`: make sure the topic's driver session is open (single-flight, warm-aware), then
  send it `send`. If opening fails, feed `TopicRuntime.driver_lost` back.
- `ToDriver`: send a command to the topic's open driver session (redirect, interrupt,
  approval response); with `lane` > 0, to that lane's session (a multi-answer turn). If no
  session is open, feed `driver_lost`.
- `StartLane`: a multi-answer turn's extra answer: run `send` in a driver session of its own
  for `target` (`hostd.core.runtime_lanes`); its events come back through
  `TopicRuntime.lane_event`, and its end ends only its lane.
- `TouchRow`: a row's content grew (streamed chunks). Not durable; it carries a `RowSnapshot`
  of the row at that chunk, taken in O(1) (no copy of the answer so far). The store writer
  keeps the newest per row and builds that one at its next flush, so a long answer is copied
  once per flush, not per chunk, and the store never calls back into the runtime. A row
  removed meanwhile comes as a later `DeleteRow` (or `SaveRow`), which replaces the touch.
  Status and position changes still come as `SaveRow(durable=True)` with the full row.
- `SaveTopic`: persist the topic record (rename).
- `ResetSession`: the history changed under the vendor session (a rewind): close the topic's
  driver session and forget its resume token, both before any later `StartTurn`, so the next
  turn opens a new vendor session: started from `resume_at` (a vendor checkpoint of the kept
  history) when the driver can, else fresh and fed the remaining history by the shell
  (`hostd.core.vendor_session`).
- `SetTimer`: call `TopicRuntime.tick(now)` at or after `deadline` (monotonic seconds, the
  same clock as the `now` arguments). A later `SetTimer` with the same `name` replaces it;
  `deadline=None` cancels it.
"""

from __future__ import annotations

from dataclasses import dataclass

from hostd.core.rows import RowSnapshot
from hostd_protocol.client_messages import ApprovalInfo, MessageRow, TopicEvent, TopicInfo
from hostd_protocol.common import AnswerTarget, TurnStatus
from hostd_protocol.driver_messages import HostCommand, Send


@dataclass(frozen=True, slots=True)
class Emit:
    event: TopicEvent


@dataclass(frozen=True, slots=True)
class SaveRow:
    row: MessageRow
    durable: bool = False


@dataclass(frozen=True, slots=True)
class TouchRow:
    """The content of a row changed: the row as it is now (`RowSnapshot.freeze()` builds it)."""

    row: RowSnapshot

    @property
    def row_id(self) -> str:
        return self.row.base.id


@dataclass(frozen=True, slots=True)
class SaveTopic:
    topic: TopicInfo


@dataclass(frozen=True, slots=True)
class DeleteRow:
    row_id: str


@dataclass(frozen=True, slots=True)
class SaveApproval:
    approval: ApprovalInfo


@dataclass(frozen=True, slots=True)
class SaveResumeToken:
    token: str


@dataclass(frozen=True, slots=True)
class SaveTurn:
    """A turn's record: written at start (status None = running) and at its end."""

    turn_id: str
    status: TurnStatus | None
    error: str = ""
    error_code: str = ""
    #: Resume data, stored only when the turn did not succeed (DESIGN invariant 7).
    resume_text: str = ""


@dataclass(frozen=True, slots=True)
class StartTurn:
    """A turn begins: the shell starts its turn machine (`hostd.core.turn`) with `send`."""

    turn_id: str
    send: Send


@dataclass(frozen=True, slots=True)
class ToDriver:
    """A command for the driver of the running turn (steer, interrupt, approval answer)."""

    command: HostCommand
    #: The lane of a multi-answer turn whose session gets it (0: the topic's own).
    lane: int = 0


@dataclass(frozen=True, slots=True)
class StartLane:
    """An extra answer of a multi-answer turn: lane `lane` answers `send` as `target`."""

    turn_id: str
    lane: int
    target: AnswerTarget
    send: Send


@dataclass(frozen=True, slots=True)
class ResetSession:
    """Replace the vendor session: close it and drop the resume token (see module doc)."""

    #: A `Checkpoint` token of the last kept row: the next session may start from it.
    resume_at: str = ""


@dataclass(frozen=True, slots=True)
class SetTimer:
    name: str
    deadline: float | None


Effect = (
    Emit
    | SaveRow
    | TouchRow
    | SaveTopic
    | DeleteRow
    | SaveApproval
    | SaveResumeToken
    | SaveTurn
    | StartTurn
    | StartLane
    | ToDriver
    | ResetSession
    | SetTimer
)
