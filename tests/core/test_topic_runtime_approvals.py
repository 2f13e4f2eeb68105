"""Unit tests of the topic runtime: approvals (the first answer wins, options, timeouts, a
stop denies; DESIGN.md invariant 2). Every test runs through `Harness`.
"""

from __future__ import annotations

import pytest

from hostd.core.effects import (
    SaveApproval,
    SetTimer,
)
from hostd.core.runtime_approvals import APPROVAL_TIMER
from hostd_protocol.client_messages import (
    ApprovalInfo,
    ApprovalRequested,
    ApprovalResolved,
)
from hostd_protocol.common import (
    ApprovalOption,
)
from hostd_protocol.driver_messages import (
    ApprovalRequest,
    ApprovalResponse,
    ApprovalWithdrawn,
)
from hostd_protocol.errors import (
    AlreadyAnswered,
    InvalidArgument,
    NotFound,
)
from tests.core.runtime_harness import Harness

# --- approvals ------------------------------------------------------------------------------


def test_approval_first_answer_wins() -> None:
    h = Harness()
    h.send("U1")
    effects = h.ev(ApprovalRequest(turn_id=h.turn, approval_id="ap1", tool="bash", input={"c": 1}))
    (requested,) = h.events(ApprovalRequested, effects)
    assert requested.approval.status == "open" and requested.approval.tool == "bash"
    assert h.of(SaveApproval, effects)[0].approval == requested.approval
    assert h.of(SetTimer, effects) == [SetTimer(APPROVAL_TIMER, h.now + 60.0)]
    assert h.rt.snapshot().approvals == [requested.approval]
    effects = h.call("answer_approval", "ap1", True, by="w1", reason="ok")
    assert h.commands(ApprovalResponse, effects) == [
        ApprovalResponse(approval_id="ap1", allow=True, reason="ok")
    ]
    resolved = h.events(ApprovalResolved, effects)[0]
    assert (resolved.status, resolved.answered_by) == ("allowed", "w1")
    assert h.of(SetTimer, effects) == [SetTimer(APPROVAL_TIMER, None)]
    with pytest.raises(
        AlreadyAnswered, match=r"^approval ap1 was already answered \(allowed\) by window w1$"
    ):
        h.rt.answer_approval("ap1", False, h.now, by="w2")
    with pytest.raises(NotFound, match=r"^approval nope does not exist in topic T$"):
        h.rt.answer_approval("nope", False, h.now)


def test_approval_options_pass_through_and_are_checked() -> None:
    h = Harness()
    h.send("U1")
    options = [
        ApprovalOption(id="always", label="Always Allow", kind="allow_always"),
        ApprovalOption(id="allow", label="Allow", kind="allow_once"),
        ApprovalOption(id="reject", label="Reject", kind="reject_once"),
    ]
    effects = h.ev(ApprovalRequest(turn_id=h.turn, approval_id="ap1", tool="bash", options=options))
    (requested,) = h.events(ApprovalRequested, effects)
    assert requested.approval.options == options
    with pytest.raises(
        InvalidArgument,
        match=r"^approval ap1 has no option 'never' \(options: always, allow, reject\)$",
    ):
        h.rt.answer_approval("ap1", True, h.now, option_id="never")
    with pytest.raises(InvalidArgument, match=r"^option 'reject' \(reject_once\) does not allow$"):
        h.rt.answer_approval("ap1", True, h.now, option_id="reject")
    effects = h.call("answer_approval", "ap1", True, by="w1", option_id="always")
    assert h.commands(ApprovalResponse, effects) == [
        ApprovalResponse(approval_id="ap1", allow=True, option_id="always")
    ]
    resolved = h.events(ApprovalResolved, effects)[0]
    assert (resolved.status, resolved.option_id) == ("allowed", "always")
    assert h.of(SaveApproval, effects)[0].approval.option_id == "always"


def test_approvals_are_independent_and_time_out() -> None:
    h = Harness()
    h.send("U1")
    h.ev(ApprovalRequest(turn_id=h.turn, approval_id="ap1", tool="a"))
    h.now += 10
    h.ev(ApprovalRequest(turn_id=h.turn, approval_id="ap2", tool="b"))
    h.ev(ApprovalRequest(turn_id=h.turn, approval_id="ap2", tool="b"))  # duplicate: ignored
    assert len(h.rt.snapshot().approvals) == 2
    h.call("answer_approval", "ap2", False, by="w1")
    assert h.call("tick") == []  # early tick: nothing due
    h.now += 55
    effects = h.call("tick")
    assert h.commands(ApprovalResponse, effects) == [
        ApprovalResponse(approval_id="ap1", allow=False, reason="nobody answered within 60 s")
    ]
    assert h.events(ApprovalResolved, effects)[0].status == "timed_out"
    with pytest.raises(
        AlreadyAnswered,
        match=r"^approval ap1 is closed \(timed_out: nobody answered within 60 s\); there is "
        r"nothing to answer any more$",
    ):
        h.rt.answer_approval("ap1", True, h.now)
    assert h.rt.snapshot().approvals == []


def test_timer_follows_the_earliest_deadline() -> None:
    h = Harness()
    h.send("U1")
    h.ev(ApprovalRequest(turn_id=h.turn, approval_id="ap1", tool="a"))
    h.now += 10
    h.ev(ApprovalRequest(turn_id=h.turn, approval_id="ap2", tool="b"))
    h.now += 50
    effects = h.call("tick")
    assert h.of(SetTimer, effects) == [SetTimer(APPROVAL_TIMER, 170.0)]
    effects = h.call("answer_approval", "ap2", True)
    assert h.of(SetTimer, effects) == [SetTimer(APPROVAL_TIMER, None)]


def test_approval_request_while_stopping_is_denied_at_once() -> None:
    h = Harness()
    h.send("U1")
    h.call("stop")
    effects = h.ev(ApprovalRequest(turn_id=h.turn, approval_id="ap1", tool="a"))
    assert h.commands(ApprovalResponse, effects)[0].allow is False
    assert h.rt.snapshot().approvals == []
    with pytest.raises(AlreadyAnswered, match=r"\(cancelled: the turn was stopped\)"):
        h.rt.answer_approval("ap1", True, h.now)


def test_stored_open_approvals_are_over_after_a_restart() -> None:
    stale = ApprovalInfo(id="ap1", topic_id="T", turn_id="t-old", tool="bash")
    h = Harness(approvals=[stale])
    assert h.rt.snapshot().approvals == []
    with pytest.raises(AlreadyAnswered):
        h.rt.answer_approval("ap1", True, h.now)


def test_a_withdrawn_request_closes_for_every_window_and_refuses_a_late_answer() -> None:
    h = Harness()
    h.send("U1")
    h.ev(ApprovalRequest(turn_id=h.turn, approval_id="ap1", tool="a"))
    h.ev(ApprovalRequest(turn_id=h.turn, approval_id="ap2", tool="b"))
    why = "the agent withdrew its permission request"
    effects = h.ev(ApprovalWithdrawn(turn_id=h.turn, approval_id="ap1", reason=why))
    (resolved,) = h.events(ApprovalResolved, effects)
    assert (resolved.approval_id, resolved.status, resolved.reason) == ("ap1", "cancelled", why)
    assert h.of(SaveApproval, effects)[0].approval.reason == why
    assert h.commands(ApprovalResponse, effects) == []  # the driver asked nobody to answer
    assert [a.id for a in h.rt.snapshot().approvals] == ["ap2"]
    with pytest.raises(
        AlreadyAnswered,
        match=r"^approval ap1 is closed \(cancelled: the agent withdrew its permission "
        r"request\); there is nothing to answer any more$",
    ) as caught:
        h.rt.answer_approval("ap1", True, h.now, by="w1")
    assert caught.value.details == {"status": "cancelled", "reason": why}
    # Twice, for an answered one, an unknown one, another turn's: nothing happens.
    assert h.ev(ApprovalWithdrawn(turn_id=h.turn, approval_id="ap1", reason="x")) == []
    h.call("answer_approval", "ap2", True, by="w1")
    assert h.ev(ApprovalWithdrawn(turn_id=h.turn, approval_id="ap2", reason="x")) == []
    assert h.ev(ApprovalWithdrawn(turn_id=h.turn, approval_id="nope")) == []
    h.ev(ApprovalRequest(turn_id=h.turn, approval_id="ap3", tool="c"))
    assert h.ev(ApprovalWithdrawn(turn_id="t-other", approval_id="ap3")) == []
    # No reason given: one is said; the timer follows (none left open).
    effects = h.ev(ApprovalWithdrawn(turn_id=h.turn, approval_id="ap3", reason=" "))
    assert h.events(ApprovalResolved, effects)[0].reason == "the driver withdrew the request"
    assert h.of(SetTimer, effects) == [SetTimer(APPROVAL_TIMER, None)]
