"""The topic runtime's approvals: tool-permission requests any window may answer.

Rules it guards:

- An approval is open only while its turn runs: the first answer wins (`allowed`/`denied`),
  no answer within the timeout denies it (`timed_out`), a stop or the turn's end closes it
  (`cancelled`), and so does its driver withdrawing the request (`cancelled`, with the
  driver's reason). It never reopens.
- A later answer raises `AlreadyAnswered`, naming the outcome and the window that won (or,
  for an approval closed without an answer, why it closed).
- Every close is stored (`SaveApproval`) and shown to every window (`ApprovalResolved`); the
  driver gets an `ApprovalResponse` unless the turn is already over.
- One timer (`APPROVAL_TIMER`) stays set to the earliest open deadline.
"""

from __future__ import annotations

import msgspec

from hostd.core.effects import SaveApproval, SetTimer, ToDriver
from hostd.core.runtime_outbox import Outbox
from hostd_protocol.client_messages import (
    ApprovalInfo,
    ApprovalRequested,
    ApprovalResolved,
    ApprovalStatus,
)
from hostd_protocol.driver_messages import ApprovalResponse
from hostd_protocol.errors import AlreadyAnswered, NotFound

__all__ = ["APPROVAL_TIMER", "ApprovalBook", "driver_approval_id", "lane_approval_id"]

#: The `SetTimer` name of the approval timeout.
APPROVAL_TIMER = "approval-timeout"
#: At most this much of a driver's reason for a withdrawal is kept (shown to every window).
MAX_REASON = 500


def lane_approval_id(lane: int, approval_id: str) -> str:
    """The topic-wide id of a driver's approval: two lanes' drivers of a multi-answer turn
    may both say `a1`, so an extra lane's id gets its lane as a suffix."""
    return f"{approval_id}~{lane}" if lane else approval_id


def driver_approval_id(info: ApprovalInfo) -> str:
    """The id the approval's own driver knows it by (see `lane_approval_id`)."""
    return info.id.rsplit("~", 1)[0] if info.lane else info.id


class ApprovalBook:
    """Every approval of one topic, the open ones' deadlines, and the timer."""

    def __init__(self, topic_id: str, approvals: list[ApprovalInfo], timeout: float) -> None:
        self._topic_id = topic_id
        self.timeout = timeout
        self._all: dict[str, ApprovalInfo] = {}
        for info in approvals:
            if info.status == "open":
                # Stored as open, so its turn died with the previous daemon: it is over.
                info = msgspec.structs.replace(info, status="cancelled", reason="the turn ended")
            self._all[info.id] = info
        self._deadlines: dict[str, float] = {}
        self._timer: float | None = None

    def __contains__(self, approval_id: str) -> bool:
        return approval_id in self._all

    def open(self) -> list[ApprovalInfo]:
        """Open approvals, oldest first."""
        return [self._all[aid] for aid in self._deadlines]

    def open_ids(self, turn_id: str, lane: int | None = None) -> list[str]:
        return [
            aid
            for aid in self._deadlines
            if self._all[aid].turn_id == turn_id and lane in (None, self._all[aid].lane)
        ]

    def check_answerable(self, approval_id: str) -> ApprovalInfo:
        """The open approval, or the typed error a window should see."""
        info = self._all.get(approval_id)
        if info is None:
            raise NotFound(f"approval {approval_id} does not exist in topic {self._topic_id}")
        if info.status in ("allowed", "denied"):
            who = f" by window {info.answered_by}" if info.answered_by else ""
            raise AlreadyAnswered(
                f"approval {approval_id} was already answered ({info.status}){who}",
                details={"status": info.status, "answered_by": info.answered_by},
            )
        if info.status != "open":
            why = f": {info.reason}" if info.reason else ""
            raise AlreadyAnswered(
                f"approval {approval_id} is closed ({info.status}{why}); "
                "there is nothing to answer any more",
                details={"status": info.status, "reason": info.reason},
            )
        return info

    def request(self, info: ApprovalInfo, now: float, out: Outbox) -> None:
        """Open `info` for every window, with a deadline."""
        self._all[info.id] = info
        self._deadlines[info.id] = now + self.timeout
        out.add(SaveApproval(info))
        out.event(ApprovalRequested, approval=info)
        self.arm(out)

    def refuse(self, info: ApprovalInfo, reason: str, out: Outbox) -> None:
        """Deny a request at once, without showing it (its turn is being stopped)."""
        info = msgspec.structs.replace(info, status="cancelled", reason=reason)
        self._all[info.id] = info
        out.add(SaveApproval(info))
        response = ApprovalResponse(approval_id=driver_approval_id(info), allow=False, reason=reason)
        out.add(ToDriver(response, lane=info.lane))

    def resolve(
        self,
        approval_id: str,
        status: ApprovalStatus,
        out: Outbox,
        *,
        by: str = "",
        reason: str = "",
        tell_driver: bool = True,
        option_id: str = "",
    ) -> None:
        """Close an open approval (the caller checked it is open, and `option_id`)."""
        info = msgspec.structs.replace(
            self._all[approval_id],
            status=status,
            answered_by=by,
            reason=reason,
            option_id=option_id,
        )
        self._all[approval_id] = info
        del self._deadlines[approval_id]
        if tell_driver:
            allow = status == "allowed"
            response = ApprovalResponse(
                approval_id=driver_approval_id(info), allow=allow, reason=reason, option_id=option_id
            )
            out.add(ToDriver(response, lane=info.lane))
        out.add(SaveApproval(info))
        out.event(
            ApprovalResolved,
            approval_id=info.id,
            status=status,
            answered_by=by,
            reason=reason,
            option_id=option_id,
        )

    def withdraw(self, approval_id: str, reason: str, out: Outbox) -> None:
        """The driver took its request back (`ApprovalWithdrawn`): close it for every window.
        An approval already closed (answered first, timed out) or unknown stays as it is."""
        info = self._all.get(approval_id)
        if info is None or info.status != "open":
            return
        reason = reason.strip()[:MAX_REASON] or "the driver withdrew the request"
        self.resolve(approval_id, "cancelled", out, reason=reason, tell_driver=False)
        self.arm(out)

    def close_turn(
        self, turn_id: str, reason: str, out: Outbox, *, tell_driver: bool, lane: int | None = None
    ) -> None:
        """Cancel every open approval of `turn_id` (of its lane `lane` only, when given)."""
        for aid in self.open_ids(turn_id, lane):
            self.resolve(aid, "cancelled", out, reason=reason, tell_driver=tell_driver)
        self.arm(out)

    def expire(self, now: float, out: Outbox) -> None:
        """Deny every approval whose deadline has passed; re-arm the timer."""
        due = [aid for aid, deadline in self._deadlines.items() if deadline <= now]
        for aid in due:
            reason = f"nobody answered within {self.timeout:g} s"
            self.resolve(aid, "timed_out", out, reason=reason)
        if due:
            self._timer = None  # it fired: the shell holds no timer any more
        self.arm(out)

    def arm(self, out: Outbox) -> None:
        """Keep the one timer at the earliest open deadline (or cancelled when none)."""
        deadline = min(self._deadlines.values(), default=None)
        if deadline != self._timer:
            self._timer = deadline
            out.add(SetTimer(APPROVAL_TIMER, deadline))
