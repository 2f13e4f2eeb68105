"""The topic runtime: a sans-IO state machine for one topic (skeleton; implementation follows).

Inputs are client requests, driver events and time (`now`, monotonic seconds); outputs are
`hostd.runtime_effects.Effect` values the trio shell carries out in order. See
docs/internal-contracts.md for the contract and DESIGN.md invariants 1-7 for the rules.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hostd.runtime_effects import Effect
from hostd_protocol.client_messages import (
    ApprovalInfo,
    MessageRow,
    SendResult,
    Snapshot,
    TopicInfo,
)
from hostd_protocol.common import Capabilities, SendIntent, TopicState
from hostd_protocol.driver_messages import DriverEvent
from hostd_protocol.errors import DriverError

__all__ = ["TopicRuntime"]


class TopicRuntime:
    """Everything that happens to one topic, as a pure synchronous state machine.

    Every method returns the effects to carry out, or raises a typed `hostd_protocol.errors`
    error (TopicBusy, NothingToStop, NotFound, AlreadyAnswered, InvalidArgument) having changed
    nothing.
    """

    def __init__(
        self,
        topic: TopicInfo,
        rows: list[MessageRow],
        approvals: list[ApprovalInfo],
        last_seq: int,
        *,
        new_id: Callable[[str], str],
        wall: Callable[[], float],
        capabilities: Capabilities | None = None,
        approval_timeout: float = 600.0,
    ) -> None:
        raise NotImplementedError

    # --- client requests ------------------------------------------------------------------

    def send(
        self,
        text: str,
        intent: SendIntent,
        now: float,
        *,
        client_msg_id: str = "",
        options: dict[str, Any] | None = None,
    ) -> tuple[SendResult, list[Effect]]:
        """Accept a user message: start a turn, steer the running one, or queue it."""
        raise NotImplementedError

    def stop(self, now: float) -> list[Effect]:
        """Interrupt the running turn; queued messages and unsent steers become drafts."""
        raise NotImplementedError

    def answer_approval(
        self, approval_id: str, allow: bool, now: float, *, by: str = "", reason: str = ""
    ) -> list[Effect]:
        """First answer wins; a later one raises AlreadyAnswered."""
        raise NotImplementedError

    def edit_queued(self, row_id: str, text: str, now: float) -> list[Effect]:
        """Replace the text of a queued or draft row."""
        raise NotImplementedError

    def discard_queued(self, row_id: str, now: float) -> list[Effect]:
        """Remove a queued or draft row."""
        raise NotImplementedError

    def send_now(self, row_id: str, now: float) -> list[Effect]:
        """Run a queued or draft row next, stopping the running turn if there is one."""
        raise NotImplementedError

    def resume_queue(self, now: float) -> list[Effect]:
        """After a restart (or a paused queue): start the oldest queued row when idle."""
        raise NotImplementedError

    def rename(self, title: str, now: float) -> list[Effect]:
        """Change the topic title (SaveTopic + TopicChanged)."""
        raise NotImplementedError

    # --- driver side ----------------------------------------------------------------------

    def driver_ready(self, capabilities: Capabilities, now: float) -> list[Effect]:
        """The driver session (re)started with these capabilities."""
        raise NotImplementedError

    def driver_event(self, event: DriverEvent, now: float) -> list[Effect]:
        """One event from the topic's driver; stray events are ignored safely."""
        raise NotImplementedError

    def driver_lost(self, error: DriverError, now: float) -> list[Effect]:
        """The driver crashed or could not be opened: end the running turn as error."""
        raise NotImplementedError

    def tick(self, now: float) -> list[Effect]:
        """Timers: deny approvals nobody answered within `approval_timeout`."""
        raise NotImplementedError

    # --- queries --------------------------------------------------------------------------

    def snapshot(self, max_rows: int = 500) -> Snapshot:
        """Rows (newest `max_rows`, by position), open approvals, state, seq: consistent."""
        raise NotImplementedError

    def row(self, row_id: str) -> MessageRow | None:
        """The current row (for the store writer after `TouchRow`); None if it is gone."""
        raise NotImplementedError

    @property
    def state(self) -> TopicState:
        raise NotImplementedError

    @property
    def active_turn_id(self) -> str | None:
        raise NotImplementedError

    @property
    def seq(self) -> int:
        raise NotImplementedError
