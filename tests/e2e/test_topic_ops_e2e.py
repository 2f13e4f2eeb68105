"""Rewind, regenerate, edit-and-resend and fork through the real daemon and scripted driver."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from hostd.client import Subscription, open_client
from hostd.core.transcript import Transcript
from hostd.shell.paths import Paths
from hostd_protocol.client_messages import (
    MessageRow,
    RowsRemoved,
    Snapshot,
    TurnEnded,
    TurnStarted,
)
from hostd_protocol.errors import TopicBusy
from tests.e2e import daemon_proc
from tests.turns import text_of

pytestmark = pytest.mark.e2e


async def turn_over(sub: Subscription, turn_id: str = "") -> TurnEnded:
    """Events until the end of `turn_id` (or of the next turn that starts, when "")."""
    async for ev in sub:
        if isinstance(ev, TurnStarted) and not turn_id:
            turn_id = ev.turn_id
        if isinstance(ev, TurnEnded) and ev.turn_id == turn_id:
            return ev
    raise AssertionError("the subscription ended")


def visible(rows: list[MessageRow]) -> list[tuple[str, str]]:
    return [(r.role, text_of(r)) for r in rows]


async def test_rewind_regenerate_edit_and_fork(home: Path) -> None:
    paths = Paths.under(home)
    with trio.fail_after(90):
        d = await daemon_proc.start(home)
        try:
            async with open_client(paths) as c, open_client(paths) as w2:
                t = await c.create_topic(title="ops", driver="scripted")
                async with c.attach(t.id) as sub, w2.attach(t.id) as sub2:
                    for text in ("/text one", "/text two"):
                        sent = await c.send(t.id, text)
                        await turn_over(sub, sent.turn_id)
                        await turn_over(sub2, sent.turn_id)
                    rows = (await c.history(t.id)).rows
                    u1, a1, u2, a2 = (r.id for r in rows)
                    # A window that goes away now and reconnects with `since` after the rewind.
                    away = Transcript(sub.transcript.snapshot())

                    # Rewind to the first answer: both windows and a late attach agree.
                    assert await c.rewind(t.id, a1) == [u2, a2]
                    async for ev in sub2:
                        if isinstance(ev, RowsRemoved):
                            assert ev.row_ids == [u2, a2]
                            break
                    expect = [("user", "/text one"), ("assistant", "one")]
                    assert visible((await c.history(t.id)).rows) == expect
                    async with open_client(paths) as w3, w3.attach(t.id) as late:
                        assert visible(late.transcript.rows()) == expect
                    async with open_client(paths) as w4, w4.attach(t.id, since=away.seq) as back:
                        async for ev in back:  # the replay: the rewind is its last event
                            assert not isinstance(ev, Snapshot)
                            away.apply(ev)
                            if isinstance(ev, RowsRemoved):
                                break
                    assert visible(away.rows()) == expect
                    all_rows = (await c.history_all(t.id)).rows
                    assert [(r.id, r.superseded) for r in all_rows] == [
                        (u1, False), (a1, False), (u2, True), (a2, True)
                    ]

                    # The vendor session was replaced and fed the history that is left.
                    sent = await c.send(t.id, "/whoami\n/history")
                    assert (await turn_over(sub, sent.turn_id)).status == "success"
                    answer = text_of((await c.history(t.id)).rows[-1])
                    assert answer.startswith("new session ")
                    assert answer.endswith("user: /text one\nassistant: one")
                    assert "two" not in answer
                    await turn_over(sub2, sent.turn_id)
                    assert visible(sub.transcript.rows()) == visible(sub2.transcript.rows())

                    # Regenerate: the last message is answered again, its old rows superseded.
                    before = (await c.history(t.id)).rows
                    regen = await c.regenerate(t.id)
                    assert regen.disposition == "started"
                    await turn_over(sub, regen.turn_id)
                    after = (await c.history(t.id)).rows
                    assert [r.id for r in after[:2]] == [u1, a1]
                    assert {r.id for r in after} & {r.id for r in before[2:]} == set()
                    assert text_of(after[2]) == "/whoami\n/history"

                    # Edit and resend while a turn runs: refused, unless stop is asked.
                    busy = await c.send(t.id, "/text Waiting.\n/wait")
                    with pytest.raises(TopicBusy, match=r"cannot resend a message while"):
                        await c.edit_resend(t.id, busy.row_id, "/text edited")
                    with pytest.raises(TopicBusy, match=r"cannot rewind while a turn runs"):
                        await c.rewind(t.id, a1)
                    edited = await c.edit_resend(t.id, busy.row_id, "/text edited", stop=True)
                    assert edited.disposition == "queued"
                    assert (await turn_over(sub, busy.turn_id)).status == "stopped"
                    await turn_over(sub)
                    rows = (await c.history(t.id)).rows
                    assert visible(rows)[-2:] == [("user", "/text edited"), ("assistant", "edited")]
                    assert busy.row_id not in {r.id for r in rows}

                    # Fork at the first answer: a new topic with that history; the original
                    # is untouched and both go on independently.
                    original = visible(rows)
                    fork = await c.fork_topic(t.id, a1)
                    assert fork.title == "Fork of ops at message 2"
                    assert (fork.driver, fork.id != t.id) == ("scripted", True)
                    assert visible((await c.history(fork.id)).rows) == expect
                    async with c.attach(fork.id) as fsub:
                        sent = await c.send(fork.id, "/history")
                        await turn_over(fsub, sent.turn_id)
                    fork_answer = text_of((await c.history(fork.id)).rows[-1])
                    assert fork_answer == "user: /text one\nassistant: one"
                    sent = await c.send(t.id, "/text original goes on")
                    await turn_over(sub, sent.turn_id)
                    assert visible((await c.history(t.id)).rows) == [
                        *original,
                        ("user", "/text original goes on"),
                        ("assistant", "original goes on"),
                    ]
                    assert len((await c.history(fork.id)).rows) == 4
        finally:
            assert await d.terminate() == 0

        # After a restart, superseded rows stay out of the visible history.
        d2 = await daemon_proc.start(home)
        try:
            async with open_client(paths) as c:
                rows = (await c.history(t.id)).rows
                assert all(not r.superseded for r in rows)
                assert visible(rows)[:2] == expect
                async with c.attach(t.id) as sub:
                    assert visible(sub.transcript.rows()) == visible(rows)
        finally:
            assert await d2.terminate() == 0
