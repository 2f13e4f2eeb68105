"""Multi-answer turns in the topic runtime (`hostd.core.runtime_lanes`), one path each."""

from __future__ import annotations

import pytest

from hostd.core.effects import ResetSession, StartLane, ToDriver
from hostd.core.runtime_lanes import lane_topic
from hostd_protocol.client_messages import (
    ApprovalRequested,
    TopicInfo,
    TurnEnded,
    TurnStarted,
    UsageUpdated,
)
from hostd_protocol.common import AnswerTarget, TextDelta, Usage
from hostd_protocol.driver_messages import (
    ApprovalRequest,
    ApprovalResponse,
    ApprovalWithdrawn,
    ChunkEvent,
    DriverFatal,
    Interrupt,
    ResumeToken,
    TurnEnd,
    UsageEvent,
)
from hostd_protocol.errors import (
    AlreadyAnswered,
    DriverCrashed,
    InvalidArgument,
    NotFound,
    TopicBusy,
)
from tests.core.runtime_harness import NO_INJECT, Harness

B = AnswerTarget(driver="other", model="m2")
C = AnswerTarget(assistant="reviewer")


def lane(h: Harness, n: int, event: object) -> None:
    h.take(h.rt.lane_event(n, event, h.now))  # type: ignore[arg-type]


def lane_text(h: Harness, n: int, text: str) -> None:
    lane(h, n, ChunkEvent(turn_id=h.turn, chunk=TextDelta(text=text)))


def answers(h: Harness) -> list[tuple[int, str, str, bool]]:
    """(lane, status, text, alternative) of every answer row, by position."""
    snap = h.rt.snapshot(10_000)
    h.history()  # the window agrees
    return [
        (
            r.lane,
            r.status,
            "".join(p.text for p in r.parts if isinstance(p, TextDelta)),
            r.alternative,
        )
        for r in snap.rows
        if r.role == "assistant"
    ]


def multi(h: Harness, text: str = "compare", *also: AnswerTarget) -> str:
    result = h.send(text, "start", also=list(also or (B, C)))
    return result.turn_id


def test_a_send_with_also_opens_one_row_per_lane_and_starts_each() -> None:
    h = Harness()
    turn = multi(h)
    (started,) = h.events(TurnStarted)
    assert started.lanes == [AnswerTarget(driver="scripted", model="m1"), B, C]
    rows = [r for r in h.rt.snapshot().rows if r.role == "assistant"]
    # Lane 0 is the choice until one is made (a crash mid-turn still leaves one).
    assert [(r.lane, r.target, r.status, r.alternative) for r in rows] == [
        (0, started.lanes[0], "pending", False),
        (1, B, "pending", True),
        (2, C, "pending", True),
    ]
    assert [r.position for r in rows] == [2, 3, 4]
    (start,) = h.starts()
    lanes = h.of(StartLane)
    assert [(s.lane, s.target) for s in lanes] == [(1, B), (2, C)]
    assert all(s.turn_id == turn and s.send.text == "compare" for s in lanes)
    assert start.send.message_id == lanes[0].send.message_id


def test_lanes_stream_apart_end_apart_and_the_turn_ends_once() -> None:
    h = Harness()
    turn = multi(h)
    h.chunk("zero")
    lane_text(h, 1, "one")
    lane_text(h, 2, "two")
    lane(h, 1, TurnEnd(turn_id=turn, status="error", error="boom", error_code="x_failed"))
    assert h.rt.active_turn_id == turn  # one lane failing stops nothing
    lane_text(h, 2, " more")
    h.end()
    assert not h.events(TurnEnded)
    lane(h, 2, TurnEnd(turn_id=turn, status="success"))
    (ended,) = h.events(TurnEnded)
    assert (ended.status, ended.error) == ("success", "")
    assert answers(h) == [
        (0, "success", "zero", False),
        (1, "error", "one", True),
        (2, "success", "two more", True),
    ]
    failed = next(r for r in h.rt.snapshot().rows if r.lane == 1)
    assert (failed.error, failed.error_code) == ("boom", "x_failed")
    assert h.rt.state == "idle"
    # Late events of an ended lane or turn change nothing.
    before = len(h.effects)
    lane(h, 1, ChunkEvent(turn_id=turn, chunk=TextDelta(text="late")))
    assert h.effects[before:] == []


def test_the_first_successful_answer_is_chosen_when_lane_0_failed() -> None:
    h = Harness()
    turn = multi(h, "q", B)
    h.end("error", error="no")
    lane_text(h, 1, "good")
    lane(h, 1, TurnEnd(turn_id=turn, status="success"))
    assert answers(h) == [(0, "error", "", True), (1, "success", "good", False)]
    # The topic's own session wrote lane 0's answer: it is replaced.
    assert h.of(ResetSession)
    h.send("next", "start")
    (_, start) = h.starts()
    texts = [(m.role, m.text) for m in h.rt.history_for(start.send.message_id)]
    assert texts == [("user", "q"), ("assistant", "good")]


def test_all_lanes_failing_ends_the_turn_with_the_first_error() -> None:
    h = Harness()
    turn = multi(h, "q", B)
    lane(h, 1, DriverFatal(code="driver_crashed", message="lane died"))
    h.end("error", error="zero died", error_code="z")
    (ended,) = h.events(TurnEnded)
    assert (ended.status, ended.error, ended.error_code) == ("error", "zero died", "z")
    assert h.rt.active_turn_id is None
    assert turn


def test_lane_lost_ends_only_that_lane() -> None:
    h = Harness()
    turn = multi(h, "q", B)
    h.take(h.rt.lane_lost(1, DriverCrashed("no such driver", driver="other"), h.now))
    assert [a[1] for a in answers(h)] == ["pending", "error"]
    h.chunk("fine")
    h.end()
    (ended,) = h.events(TurnEnded)
    assert ended.status == "success" and ended.turn_id == turn
    assert not h.of(ResetSession)  # lane 0 chosen: the topic's session keeps its answer


def test_stop_interrupts_every_lane_and_ends_stopped() -> None:
    h = Harness()
    turn = multi(h)
    h.call("stop")
    interrupts = [(e.lane, e.command) for e in h.of(ToDriver) if isinstance(e.command, Interrupt)]
    assert interrupts == [
        (0, Interrupt(turn_id=turn)),
        (1, Interrupt(turn_id=turn)),
        (2, Interrupt(turn_id=turn)),
    ]
    h.end("stopped")
    lane(h, 1, TurnEnd(turn_id=turn, status="stopped"))
    lane(h, 2, TurnEnd(turn_id=turn, status="stopped"))
    (ended,) = h.events(TurnEnded)
    assert ended.status == "stopped"


def test_driver_lost_ends_every_lane_still_running() -> None:
    h = Harness()
    multi(h)
    h.take(h.rt.driver_lost(DriverCrashed("gone", driver="scripted"), h.now))
    (ended,) = h.events(TurnEnded)
    assert ended.status == "error"
    assert [a[1] for a in answers(h)] == ["error", "error", "error"]


def test_steering_a_multi_answer_turn_is_refused_and_auto_queues() -> None:
    h = Harness()
    turn = multi(h)
    with pytest.raises(InvalidArgument, match=r"cannot be steered"):
        h.send("steer me", "steer")
    assert h.send("later", "auto").disposition == "queued"
    with pytest.raises(TopicBusy):
        h.send("now", "start")
    assert h.rt.active_turn_id == turn


def test_a_send_with_also_never_steers_and_keeps_also_when_queued() -> None:
    h = Harness()
    h.send("first", "start")
    with pytest.raises(InvalidArgument, match=r"cannot be steered"):
        h.send("x", "steer", also=[B])
    queued = h.send("second", "auto", also=[B])
    assert queued.disposition == "queued"
    h.end()
    (started_2,) = h.events(TurnStarted)[1:]
    assert started_2.lanes[1:] == [B]


def test_bad_also_is_refused_before_anything_changes() -> None:
    h = Harness()
    with pytest.raises(InvalidArgument, match=r"^also\[0\] names nobody"):
        h.send("q", "start", also=[AnswerTarget()])
    with pytest.raises(InvalidArgument, match=r"at most 7"):
        h.send("q", "start", also=[B] * 8)
    assert h.rt.snapshot().rows == []


def test_usage_per_lane_and_summed_for_the_turn() -> None:
    h = Harness()
    turn = multi(h, "q", B)
    h.ev(UsageEvent(turn_id=turn, usage=Usage(input_tokens=10, output_tokens=1)))
    lane(h, 1, UsageEvent(turn_id=turn, usage=Usage(input_tokens=5, output_tokens=2)))
    last = h.events(UsageUpdated)[-1]
    assert (last.lane, last.lane_usage) == (1, Usage(input_tokens=5, output_tokens=2))
    assert last.usage == Usage(input_tokens=15, output_tokens=3)
    h.end()
    lane(h, 1, TurnEnd(turn_id=turn, status="success"))
    rows = [r for r in h.rt.snapshot().rows if r.role == "assistant"]
    assert [r.usage for r in rows] == [
        Usage(input_tokens=10, output_tokens=1),
        Usage(input_tokens=5, output_tokens=2),
    ]


def test_lane_approvals_have_unique_ids_and_answer_the_right_session() -> None:
    h = Harness()
    turn = multi(h, "q", B)
    h.ev(ApprovalRequest(turn_id=turn, approval_id="a1", tool="Bash"))
    lane(h, 1, ApprovalRequest(turn_id=turn, approval_id="a1", tool="Bash"))
    ids = [(e.approval.id, e.approval.lane) for e in h.events(ApprovalRequested)]
    assert ids == [("a1", 0), ("a1~1", 1)]
    h.call("answer_approval", "a1~1", True)
    (answer,) = [e for e in h.of(ToDriver) if isinstance(e.command, ApprovalResponse)]
    assert (answer.lane, answer.command.approval_id, answer.command.allow) == (1, "a1", True)
    # Lane 0 ending closes only its own approvals.
    h.end()
    assert [a.id for a in h.rt.snapshot().approvals] == []  # a1~1 was answered, a1 cancelled


def test_a_lane_withdraws_its_own_approval_only() -> None:
    h = Harness()
    turn = multi(h, "q", B)
    h.ev(ApprovalRequest(turn_id=turn, approval_id="a1", tool="Bash"))
    lane(h, 1, ApprovalRequest(turn_id=turn, approval_id="a1", tool="Bash"))
    lane(h, 1, ApprovalWithdrawn(turn_id=turn, approval_id="a1", reason="gone"))
    assert [a.id for a in h.rt.snapshot().approvals] == ["a1"]
    with pytest.raises(AlreadyAnswered, match=r"\(cancelled: gone\)"):
        h.rt.answer_approval("a1~1", True, h.now)


def test_choose_answer_after_the_turn_marks_and_replaces_the_session() -> None:
    h = Harness()
    turn = multi(h, "q", B)
    h.chunk("zero")
    h.end()
    lane_text(h, 1, "one")
    lane(h, 1, TurnEnd(turn_id=turn, status="success"))
    assert not h.of(ResetSession)
    row1 = next(r for r in h.rt.snapshot().rows if r.lane == 1)
    h.call("choose_answer", row1.id)
    assert answers(h) == [(0, "success", "zero", True), (1, "success", "one", False)]
    assert len(h.of(ResetSession)) == 1
    h.call("choose_answer", row1.id)  # already chosen: nothing
    assert len(h.of(ResetSession)) == 1
    h.send("next", "start")
    start = h.starts()[-1]
    texts = [m.text for m in h.rt.history_for(start.send.message_id)]
    assert texts == ["q", "one"]


def test_choose_during_the_turn_holds_at_its_end() -> None:
    h = Harness()
    turn = multi(h, "q", B)
    row1 = next(r for r in h.rt.snapshot().rows if r.lane == 1)
    h.call("choose_answer", row1.id)
    assert answers(h) == [(0, "pending", "", True), (1, "pending", "", False)]
    h.end()
    lane(h, 1, TurnEnd(turn_id=turn, status="error", error="x"))
    assert answers(h) == [(0, "success", "", True), (1, "error", "", False)]
    assert h.of(ResetSession)


def test_choose_refusals() -> None:
    h = Harness(NO_INJECT)
    h.send("plain", "start")
    plain = next(r for r in h.rt.snapshot().rows if r.role == "assistant")
    with pytest.raises(InvalidArgument, match=r"not an answer of a multi-answer turn"):
        h.call("choose_answer", plain.id)
    with pytest.raises(NotFound):
        h.call("choose_answer", "nope")
    h.end()
    multi(h, "q", B)
    turn = h.turn
    row1 = next(r for r in h.rt.snapshot().rows if r.lane == 1)
    h.end()
    lane(h, 1, TurnEnd(turn_id=turn, status="success"))
    h.send("again", "start")
    with pytest.raises(TopicBusy, match=r"once it has ended"):
        h.call("choose_answer", row1.id)


def test_regenerate_of_a_multi_answer_message_asks_the_same_answerers() -> None:
    h = Harness()
    turn = multi(h, "q", B)
    h.end()
    lane(h, 1, TurnEnd(turn_id=turn, status="success"))
    h.take(h.rt.regenerate(h.now)[1])
    assert h.events(TurnStarted)[-1].lanes[1:] == [B]


def test_extra_lanes_ignore_what_only_the_topic_session_owns() -> None:
    h = Harness()
    turn = multi(h, "q", B)
    before = len(h.effects)
    lane(h, 1, ResumeToken(token="lane-token"))
    lane(h, 1, TurnEnd(turn_id="other-turn", status="success"))
    assert [type(e).__name__ for e in h.effects[before:]] == []
    assert h.rt.active_turn_id == turn


def test_lane_topic_falls_back_to_the_topic() -> None:
    topic = TopicInfo(id="T", assistant="a", driver="d", model="m")
    assert lane_topic(topic, AnswerTarget(model="x")).driver == "d"
    assert (lane_topic(topic, AnswerTarget(model="x")).model, lane_topic(topic, B).driver) == (
        "x",
        "other",
    )
    picked = lane_topic(topic, C)
    assert (picked.assistant, picked.driver, picked.model) == ("reviewer", "", "")
