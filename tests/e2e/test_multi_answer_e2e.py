"""Several models answering one message, through the real daemon and scripted drivers.

The topic runs the scripted driver with model `m0`; `also` adds scripted sessions of models
`m1` and `bad`. One script makes the lanes differ (`/model NAME` gates the lines below it).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from hostd.client import Subscription, open_client
from hostd.core.transcript import Transcript
from hostd.shell.paths import Paths
from hostd_protocol.client_messages import (
    ApprovalRequested,
    MessageRow,
    RowUpdated,
    TopicEvent,
    TurnEnded,
    TurnStarted,
)
from hostd_protocol.common import AnswerTarget
from hostd_protocol.errors import InvalidArgument
from tests.e2e import daemon_proc
from tests.turns import text_of

pytestmark = pytest.mark.e2e

M1 = AnswerTarget(driver="scripted", model="m1")
BAD = AnswerTarget(driver="scripted", model="bad")
SCRIPT = "\n".join(
    [
        "/model m0",
        "/text zero",
        "/model m1",
        "/text one",
        "/model bad",
        "/text partial",
        "/error the bad model failed",
    ]
)


def answers(rows: list[MessageRow]) -> list[tuple[int, str, str, bool]]:
    return [(r.lane, r.status, text_of(r), r.alternative) for r in rows if r.role == "assistant"]


async def until_end(sub: Subscription, turn_id: str, seen: list[TopicEvent]) -> TurnEnded:
    async for ev in sub:
        seen.append(ev)
        if isinstance(ev, TurnEnded) and ev.turn_id == turn_id:
            return ev
    raise AssertionError("the subscription ended")


async def test_several_models_answer_one_message(home: Path) -> None:
    paths = Paths.under(home)
    with trio.fail_after(90):
        d = await daemon_proc.start(home)
        try:
            async with open_client(paths) as c, open_client(paths) as w2:
                t = await c.create_topic(title="lanes", driver="scripted", model="m0")
                async with c.attach(t.id) as sub, w2.attach(t.id) as sub2:
                    sent = await c.send(t.id, SCRIPT, "start", also=[M1, BAD])
                    seen: list[TopicEvent] = []
                    ended = await until_end(sub, sent.turn_id, seen)
                    await until_end(sub2, sent.turn_id, [])
                    # Exactly one turn end, once every lane ended; one failing stopped none.
                    (started,) = [e for e in seen if isinstance(e, TurnStarted)]
                    assert started.lanes == [
                        AnswerTarget(driver="scripted", model="m0"),
                        M1,
                        BAD,
                    ]
                    assert ended.status == "success"
                    assert [e.turn_id for e in seen if isinstance(e, TurnEnded)] == [sent.turn_id]
                    rows = (await c.history(t.id)).rows
                    assert answers(rows) == [
                        (0, "success", "zero", False),
                        (1, "success", "one", True),
                        (2, "error", "partial", True),
                    ]
                    bad = rows[3]
                    assert "the bad model failed" in bad.error and bad.target == BAD
                    # Both windows and a late attach hold the same rows (marks included).
                    assert sub.transcript.rows() == sub2.transcript.rows()
                    async with open_client(paths) as w3, w3.attach(t.id) as late:
                        assert answers(late.transcript.rows()) == answers(rows)

                    # Choose lane 1: marks move; the next turn's history holds it only,
                    # in a fresh session (the topic's own session wrote lane 0's answer).
                    mark = Transcript(sub.transcript.snapshot())
                    await c.choose_answer(t.id, rows[2].id)
                    async for ev in sub:
                        mark.apply(ev)
                        if isinstance(ev, RowUpdated) and ev.row_id == rows[2].id:
                            assert ev.alternative is False
                            break
                    assert answers(mark.rows())[:2] == [
                        (0, "success", "zero", True),
                        (1, "success", "one", False),
                    ]
                    nxt = await c.send(t.id, "/whoami\n/history")
                    await until_end(sub, nxt.turn_id, [])
                    answer = text_of((await c.history(t.id)).rows[-1])
                    assert answer.startswith("new session ")
                    assert answer.endswith(f"user: {SCRIPT}\nassistant: one")
                    assert answer.count("assistant:") == 1  # not zero, not partial

                    # Steering such a turn is refused; auto queues; stop ends every lane.
                    busy = await c.send(t.id, "/text going\n/wait", also=[M1])
                    with pytest.raises(InvalidArgument, match=r"cannot be steered"):
                        await c.send(t.id, "turn left", "steer")
                    queued = await c.send(t.id, "/text after", "auto")
                    assert queued.disposition == "queued"
                    await c.stop(t.id)
                    stopped = await until_end(sub, busy.turn_id, [])
                    assert stopped.status == "stopped"
                    lanes = [r for r in (await c.history(t.id)).rows if r.turn_id == busy.turn_id]
                    assert [(r.lane, r.status) for r in lanes if r.role == "assistant"] == [
                        (0, "stopped"),
                        (1, "stopped"),
                    ]

                    # Approvals from two lanes (their drivers use the same ids) both work.
                    appr = await c.send(t.id, "/approve Bash", "start", also=[M1])
                    asked: list[ApprovalRequested] = []
                    async for ev in sub:
                        if isinstance(ev, ApprovalRequested):
                            asked.append(ev)
                            await c.answer_approval(t.id, ev.approval.id, True)
                            if len(asked) == 2:
                                break
                    assert sorted(a.approval.lane for a in asked) == [0, 1]
                    assert len({a.approval.id for a in asked}) == 2
                    assert (await until_end(sub, appr.turn_id, [])).status == "success"
                    history = (await c.history(t.id)).rows
                    assert [r.status for r in history if r.turn_id == appr.turn_id] == [
                        "success"
                    ] * 3
        finally:
            assert await d.terminate() == 0

        # After a restart the marks are still there (stored), and history keeps them.
        d2 = await daemon_proc.start(home)
        try:
            async with open_client(paths) as c:
                rows = (await c.history(t.id)).rows
                first = [r for r in rows if r.turn_id == sent.turn_id]
                assert answers(first) == [
                    (0, "success", "zero", True),
                    (1, "success", "one", False),
                    (2, "error", "partial", True),
                ]
                assert first[3].target == BAD
        finally:
            assert await d2.terminate() == 0


async def test_stop_reaches_a_lane_still_running_after_lane_0_ended(home: Path) -> None:
    paths = Paths.under(home)
    with trio.fail_after(60):
        d = await daemon_proc.start(home)
        try:
            async with open_client(paths) as c:
                t = await c.create_topic(title="stop", driver="scripted", model="m0")
                async with c.attach(t.id) as sub:
                    script = "/model m0\n/text quick\n/model m1\n/text slow\n/wait"
                    sent = await c.send(t.id, script, "start", also=[M1])
                    async for _ev in sub:  # lane 0 has answered; lane 1 said "slow" and waits
                        now = answers(sub.transcript.rows())
                        if len(now) == 2 and now[0][1] == "success" and now[1][2] == "slow":
                            break
                    await c.stop(t.id)
                    ended = await until_end(sub, sent.turn_id, [])
                    # Lane 0 succeeded, so the turn did; lane 1 kept its partial answer.
                    assert ended.status == "success"
                    rows = (await c.history(t.id)).rows
                    assert answers(rows) == [
                        (0, "success", "quick", False),
                        (1, "stopped", "slow", True),
                    ]
                    # The topic goes on normally.
                    nxt = await c.send(t.id, "/text again")
                    assert (await until_end(sub, nxt.turn_id, [])).status == "success"
        finally:
            assert await d.terminate() == 0
