"""Stopping one answer of a multi-answer turn (protocol 1.2), through the real daemon with
scripted drivers: the stopped answer ends `stopped`, the other completes, the turn ends once.

Lane 0 runs model `m0`, lane 1 `m1` (`/model NAME` gates the script lines below it). The
answer that goes on waits on an approval, so the test decides when it finishes.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from hostd.client import Subscription, open_client
from hostd.shell.paths import Paths
from hostd_protocol.client_messages import ApprovalRequested, MessageRow, TopicEvent, TurnEnded
from hostd_protocol.errors import InvalidArgument, NotFound
from tests.e2e import daemon_proc
from tests.e2e.test_multi_answer_e2e import M1, answers, until_end

pytestmark = pytest.mark.e2e


def answer_rows(sub: Subscription) -> list[MessageRow]:
    return [r for r in sub.transcript.rows() if r.role == "assistant"]


async def until(sub: Subscription, seen: list[TopicEvent], ready: object) -> None:
    """Reads events until `ready()` holds (checked after each event)."""
    async for ev in sub:
        seen.append(ev)
        if ready():  # type: ignore[operator]
            return
    raise AssertionError("the subscription ended")


async def test_stopping_one_answer_lets_the_other_complete(home: Path) -> None:
    paths = Paths.under(home)
    with trio.fail_after(60):
        d = await daemon_proc.start(home)
        try:
            async with open_client(paths) as c:
                t = await c.create_topic(title="stop one", driver="scripted", model="m0")
                async with c.attach(t.id) as sub:
                    # Lane 1 is stopped; lane 0 waits on an approval, then completes.
                    script = "/model m0\n/text zero\n/approve Bash\n/model m1\n/text one\n/wait"
                    sent = await c.send(t.id, script, "start", also=[M1])
                    seen: list[TopicEvent] = []
                    await until(
                        sub,
                        seen,
                        lambda: (
                            any(isinstance(e, ApprovalRequested) for e in seen)
                            and answers(sub.transcript.rows())[1][2] == "one"
                        ),
                    )
                    (approval,) = [e for e in seen if isinstance(e, ApprovalRequested)]
                    zero, one = answer_rows(sub)
                    user = next(r for r in sub.transcript.rows() if r.role == "user")
                    # Not an answer of the running turn: refused, nothing stopped.
                    with pytest.raises(InvalidArgument, match=r"not an answer of the running"):
                        await c.stop(t.id, row_id=user.id)
                    with pytest.raises(NotFound, match=r"^row bogus is not in the visible"):
                        await c.stop(t.id, row_id="bogus")
                    await c.stop(t.id, row_id=one.id)
                    await until(sub, seen, lambda: answer_rows(sub)[1].status == "stopped")
                    assert answer_rows(sub)[0].status == "pending"  # lane 0 goes on
                    await c.answer_approval(t.id, approval.approval.id, True)
                    ended = await until_end(sub, sent.turn_id, seen)
                    assert ended.status == "success"
                    rows = (await c.history(t.id)).rows
                    assert answers(rows) == answers(sub.transcript.rows())
                    (ok, stopped) = answers(rows)
                    assert ok[:2] == (0, "success") and "approved: ran Bash" in ok[2]
                    assert stopped == (1, "stopped", "one", True)
                    assert [r.id for r in rows if r.role == "assistant"] == [zero.id, one.id]

                    # Lane 0's answer stopped alone: the turn goes on until lane 1 ends.
                    script = "/model m0\n/text zero\n/wait\n/model m1\n/text one\n/approve Bash"
                    sent2 = await c.send(t.id, script, "start", also=[M1])
                    seen2: list[TopicEvent] = []
                    await until(
                        sub, seen2, lambda: any(isinstance(e, ApprovalRequested) for e in seen2)
                    )
                    (approval2,) = [e for e in seen2 if isinstance(e, ApprovalRequested)]
                    first = answer_rows(sub)[-2]
                    await c.stop(t.id, row_id=first.id)
                    await until(sub, seen2, lambda: answer_rows(sub)[-2].status == "stopped")
                    assert answer_rows(sub)[-1].status == "pending"
                    await c.answer_approval(t.id, approval2.approval.id, True)
                    ended2 = await until_end(sub, sent2.turn_id, seen2)
                    assert ended2.status == "success"
                    rows = (await c.history(t.id)).rows
                    # The answer that succeeded is the one the conversation goes on from.
                    assert [a[:2] + a[3:] for a in answers(rows)[-2:]] == [
                        (0, "stopped", True),
                        (1, "success", False),
                    ]
                    # One turn end per turn, each after its last answer ended.
                    ends = [e.turn_id for e in [*seen, *seen2] if isinstance(e, TurnEnded)]
                    assert ends == [sent.turn_id, sent2.turn_id]
                    # The topic goes on normally; a stop naming an old answer is refused.
                    nxt = await c.send(t.id, "/text again\n/wait")
                    with pytest.raises(InvalidArgument, match=r"not an answer of the running"):
                        await c.stop(t.id, row_id=one.id)
                    answer = (await c.history(t.id)).rows[-1]
                    assert answer.turn_id == nxt.turn_id and answer.status == "pending"
                    await c.stop(t.id, row_id=answer.id)  # its one answer: the turn stops
                    assert (await until_end(sub, nxt.turn_id, [])).status == "stopped"
        finally:
            assert await d.terminate() == 0
