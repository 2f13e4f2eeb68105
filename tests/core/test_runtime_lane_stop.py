"""Stopping one answer of a multi-answer turn (`LaneOps.stop_answer`, protocol 1.2)."""

from __future__ import annotations

import pytest

from hostd.core.effects import ResetSession, StartTurn, ToDriver
from hostd_protocol.client_messages import ApprovalRequested, RowUpdated, TurnEnded
from hostd_protocol.common import AnswerTarget
from hostd_protocol.driver_messages import ApprovalRequest, ApprovalResponse, Interrupt, TurnEnd
from hostd_protocol.errors import DriverCrashed, InvalidArgument, NotFound, NothingToStop
from tests.core.runtime_harness import Harness
from tests.core.test_runtime_lanes import answers, lane, lane_text, multi

B = AnswerTarget(driver="other", model="m2")
C = AnswerTarget(assistant="reviewer")


def row_of(h: Harness, n: int) -> str:
    return next(r.id for r in h.rt.snapshot(10_000).rows if r.role == "assistant" and r.lane == n)


def interrupts(h: Harness, since: int = 0) -> list[int]:
    """The lanes interrupted by the effects after `since`."""
    return [e.lane for e in h.of(ToDriver, h.effects[since:]) if isinstance(e.command, Interrupt)]


def test_stopping_one_extra_answer_interrupts_only_its_lane() -> None:
    h = Harness()
    turn = multi(h)
    lane_text(h, 1, "one")
    before = len(h.effects)
    h.call("stop", row_id=row_of(h, 1))
    assert interrupts(h, before) == [1]
    assert not h.rt.stopping  # the turn is not stopping: the others go on
    h.chunk("zero")
    lane_text(h, 2, "two")
    lane(h, 1, TurnEnd(turn_id=turn, status="stopped"))
    assert h.rt.active_turn_id == turn and not h.events(TurnEnded)
    h.end()
    lane(h, 2, TurnEnd(turn_id=turn, status="success"))
    (ended,) = h.events(TurnEnded)
    assert ended.status == "success"
    assert answers(h) == [
        (0, "success", "zero", False),
        (1, "stopped", "one", True),
        (2, "success", "two", True),
    ]


def test_stopping_lane_0_interrupts_the_topic_session_and_the_turn_goes_on() -> None:
    h = Harness()
    turn = multi(h, "q", B)
    h.chunk("zero")
    before = len(h.effects)
    h.call("stop", row_id=row_of(h, 0))
    assert interrupts(h, before) == [0]
    h.end("stopped")
    assert h.rt.active_turn_id == turn
    lane_text(h, 1, "one")
    lane(h, 1, TurnEnd(turn_id=turn, status="success"))
    (ended,) = h.events(TurnEnded)
    assert ended.status == "success"
    # The answer that succeeded is chosen; the topic's session wrote the stopped one.
    assert answers(h) == [(0, "stopped", "zero", True), (1, "success", "one", False)]
    assert h.of(ResetSession)


def test_stop_of_a_row_that_is_not_an_answer_of_the_running_turn_is_refused() -> None:
    h = Harness()
    first = multi(h, "q", B)
    old_answer = row_of(h, 1)
    h.end()
    lane(h, 1, TurnEnd(turn_id=first, status="success"))
    with pytest.raises(NothingToStop):
        h.call("stop", row_id=old_answer)
    multi(h, "again", B)
    user = next(r.id for r in reversed(h.rt.snapshot().rows) if r.role == "user")
    snap = h.rt.snapshot()
    with pytest.raises(NotFound, match=r"^row bogus is not in the visible history"):
        h.call("stop", row_id="bogus")
    with pytest.raises(InvalidArgument, match=r"is not an answer of the running turn"):
        h.call("stop", row_id=user)
    with pytest.raises(InvalidArgument, match=r"is not an answer of the running turn"):
        h.call("stop", row_id=old_answer)
    assert h.rt.snapshot() == snap and not h.rt.stopping


def test_an_ended_or_stopped_answer_is_not_interrupted_again() -> None:
    h = Harness()
    turn = multi(h)
    h.call("stop", row_id=row_of(h, 1))
    lane(h, 2, TurnEnd(turn_id=turn, status="success"))
    before = len(h.effects)
    h.call("stop", row_id=row_of(h, 1))  # a second window's click: nothing new
    h.call("stop", row_id=row_of(h, 2))  # ended already
    assert h.effects[before:] == []
    h.call("stop")  # the whole turn: only lane 0 still needs an interrupt
    assert interrupts(h, before) == [0]


def test_an_answer_stop_cancels_its_approvals_only_and_refuses_new_ones() -> None:
    h = Harness()
    turn = multi(h, "q", B)
    h.ev(ApprovalRequest(turn_id=turn, approval_id="a0", tool="Bash"))
    lane(h, 1, ApprovalRequest(turn_id=turn, approval_id="a1", tool="Bash"))
    h.call("stop", row_id=row_of(h, 1))
    (cancel,) = [e for e in h.of(ToDriver) if isinstance(e.command, ApprovalResponse)]
    assert (cancel.lane, cancel.command.approval_id, cancel.command.allow) == (1, "a1", False)
    assert [a.id for a in h.rt.snapshot().approvals] == ["a0"]
    lane(h, 1, ApprovalRequest(turn_id=turn, approval_id="a2", tool="Bash"))
    assert [e.approval.id for e in h.events(ApprovalRequested)] == ["a0", "a1~1"]
    assert [a.id for a in h.rt.snapshot().approvals] == ["a0"]


def test_every_answer_stopped_ends_stopped_and_the_queue_runs_on() -> None:
    h = Harness()
    turn = multi(h, "q", B)
    queued = h.send("next", "auto")
    assert queued.disposition == "queued"
    h.call("stop", row_id=row_of(h, 0))
    h.call("stop", row_id=row_of(h, 1))
    assert h.rt.row(queued.row_id).status == "queued"  # type: ignore[union-attr]
    h.end("stopped")
    starts = len(h.of(StartTurn))
    lane(h, 1, TurnEnd(turn_id=turn, status="stopped"))
    (ended,) = h.events(TurnEnded)
    assert ended.status == "stopped"
    (start,) = h.of(StartTurn)[starts:]
    assert start.send.message_id == queued.row_id


def test_a_stopped_answer_whose_session_is_lost_ends_stopped() -> None:
    h = Harness()
    multi(h)
    h.call("stop", row_id=row_of(h, 1))
    h.take(h.rt.lane_lost(1, DriverCrashed("gone", driver="other"), h.now))
    h.call("stop", row_id=row_of(h, 2))
    # The topic's driver is lost: lanes still running end with the turn, a stopped one stopped.
    h.take(h.rt.driver_lost(DriverCrashed("gone", driver="scripted"), h.now))
    assert [a[1] for a in answers(h)] == ["error", "stopped", "stopped"]
    assert len(h.events(TurnEnded)) == 1


def test_stop_naming_the_answer_of_a_one_answer_turn_stops_the_turn() -> None:
    h = Harness()
    h.send("q", "start")
    queued = h.send("later", "queue")
    answer = next(r.id for r in h.rt.snapshot().rows if r.role == "assistant")
    h.call("stop", row_id=answer)
    assert h.rt.stopping and interrupts(h) == [0]
    assert any(e.row_id == queued.row_id and e.status == "draft" for e in h.events(RowUpdated))
