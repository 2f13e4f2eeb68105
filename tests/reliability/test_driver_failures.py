"""Drivers that die or misbehave: each is a clear, bounded failure of its own topic only
(DESIGN.md invariants 9 and 11). Real driver processes (the scripted driver's failure modes)
under an in-process daemon with the default 3 s interrupt grace.

Only a driver that never answers the handshake meets a 2 s timer (it always does: it
hangs). Drivers that must complete or break their handshake by themselves run under a
daemon whose handshake timeout only limits a hang (`HANG_LIMIT`, the fixture's default): on
a loaded 2-core box a Python driver can take more than 2 s to start, which once turned a
crash or a good topic into a `driver_timeout` (CLOSING3, "Noticed and left alone").
"""

from __future__ import annotations

import os
import select
import signal

import pytest
import trio

from hostd.client import open_client
from hostd.shell.paths import Paths
from hostd_dev.stress.dbcheck import row_text
from hostd_protocol.client_messages import RowAppended, TopicEvent, TurnEnded
from hostd_scripted.player import words_text
from tests.reliability.conftest import (
    HANG_LIMIT,
    TurnOutcome,
    first_chunk,
    run_turn,
    start_in_process,
)

pytestmark = pytest.mark.e2e

# No timing asserts: each test checks that a failure ends its own turn, with its own error,
# while the rest goes on (event order), under a deadline that only ends a hang. How fast a
# failure surfaces and how long the good topic's longest gap is are `scripts/bench failures`
# rows (docs/benchmarks.md, "Timing checks moved out of the tests").


def _answer(outcome: TurnOutcome) -> str:
    return row_text(next(r for r in outcome.rows if r.turn_id == outcome.end.turn_id
                         and r.role == "assistant").parts)


async def test_driver_kill9_mid_turn_fails_the_turn_then_resumes(
    nursery: trio.Nursery, paths: Paths
) -> None:
    with trio.fail_after(40):
        d = await start_in_process(nursery, paths)
        async with open_client(paths) as c:
            t = await c.create_topic(driver="scripted")
            first = await run_turn(c, t.id, "/whoami\nhello")
            assert first.end.status == "success", first.end
            token = _answer(first).removeprefix("new session ")
            session = d.daemon.supervisor.session(t.id)
            assert session is not None and session.resume_token == token

            chunks = 0

            async def kill_after_chunks(ev: TopicEvent) -> None:
                nonlocal chunks
                if isinstance(ev, RowAppended):
                    chunks += 1
                    if chunks == 10:
                        os.kill(session.pid, signal.SIGKILL)

            second = await run_turn(
                c, t.id, "/stderr last words before the kill\n/chunks 400 size=8 rate=100\nq2",
                on_event=kill_after_chunks,
            )
            assert second.end.status == "error"
            assert second.end.error_code == "driver_crashed"
            assert "was killed by SIGKILL" in second.end.error
            assert f"during turn {second.end.turn_id}" in second.end.error  # names its turn
            assert "last words before the kill" in second.end.error  # the stderr tail
            partial = _answer(second)
            # The partial answer is kept, and the crash ended the turn: the 4 s stream did
            # not run to its end.
            assert 10 * 8 <= len(partial) < 400 * 8

            third = await run_turn(c, t.id, "/whoami\nagain")
            assert third.end.status == "success"
            assert _answer(third) == f"resumed {token}"  # the stored resume token was passed
        await d.stop()


def _wait_exited(pid: int) -> None:
    """Block (without letting the daemon run) until process `pid` has exited: its pidfd
    turns readable when it is a zombie, whoever reaps it later."""
    fd = os.pidfd_open(pid)
    try:
        ready, _, _ = select.select([fd], [], [], 10.0)
        assert ready, f"process {pid} did not exit"
    finally:
        os.close(fd)


async def test_a_send_right_after_the_driver_died_between_turns_runs_on_a_new_driver(
    nursery: trio.Nursery, paths: Paths
) -> None:
    """Issue 31 item 7: the driver is killed between turns and a message is sent at once,
    before the daemon could notice: the turn runs (exactly once) on a new driver process that
    resumed the vendor session, not `driver_crashed` blaming a turn that never ran."""
    with trio.fail_after(40):
        d = await start_in_process(nursery, paths)
        sup = d.daemon.supervisor
        async with open_client(paths) as c:
            t = await c.create_topic(driver="scripted")
            first = await run_turn(c, t.id, "/whoami\nhello")
            token = _answer(first).removeprefix("new session ")
            for attempt in range(3):  # each order of "send" and "noticed the death"
                old = sup.session(t.id)
                assert old is not None and old.alive
                spawned = sup.statistics().spawned
                os.kill(old.pid, signal.SIGKILL)
                _wait_exited(old.pid)
                again = await run_turn(c, t.id, f"/whoami\nagain {attempt}")
                assert again.end.status == "success", again.end
                assert _answer(again) == f"resumed {token}"
                new = sup.session(t.id)
                assert new is not None and new.pid != old.pid
                assert sup.statistics().spawned == spawned + 1  # one new driver, one run
                users = [r for r in again.rows if r.role == "user"]
                assert [row_text(r.parts) for r in users].count(f"/whoami\nagain {attempt}") == 1
                answers = [r for r in again.rows if r.turn_id == again.end.turn_id
                           and r.role == "assistant"]
                assert len(answers) == 1
        await d.stop()


async def test_misbehaving_drivers_fail_their_topic_only(
    nursery: trio.Nursery, paths: Paths
) -> None:
    bad = {
        "garbage": ("/text before\n/garbage\nq", {}),
        "oversized": ("/text before\n/oversized\nq", {}),
        "crash-at-handshake": ("q", {"crash_at_handshake": True}),
        "garbage-at-handshake": ("q", {"garbage_at_handshake": True}),
    }
    # What a loaded machine does to a good driver: it starts late (2.5 s here, past the
    # 2 s timer). Slow is not broken: it must answer.
    late = ("/text late but fine\nq", {"start_delay": 2.5})
    expect = {
        "garbage": ("driver_protocol_error", "wrote a bad frame"),
        "oversized": ("driver_protocol_error", "wrote a bad frame"),
        "crash-at-handshake": ("driver_crashed", "exited during the handshake"),
        "garbage-at-handshake": ("driver_protocol_error", "bad frame during the handshake"),
    }
    with trio.fail_after(HANG_LIMIT + 60):
        d = await start_in_process(nursery, paths)
        outcomes: dict[str, TurnOutcome] = {}
        async with open_client(paths) as c:
            good = await c.create_topic(driver="scripted", title="good")
            slow = await c.create_topic(driver="scripted", title="late", options=late[1])
            topics = {
                name: await c.create_topic(driver="scripted", title=name, options=opts)
                for name, (_, opts) in bad.items()
            }
            others_ended = trio.Event()

            async def one(name: str, topic_id: str, text: str) -> None:
                outcomes[name] = await run_turn(c, topic_id, text)

            async def the_others() -> None:
                async with trio.open_nursery() as n:
                    n.start_soon(one, "late", slow.id, late[0])
                    for name, (text, _) in bad.items():
                        n.start_soon(one, name, topics[name].id, text)
                others_ended.set()

            # The good topic streams (100 chunks/s, until stopped) before, during and after
            # the others' failures: they start once it streams, and it is stopped only after
            # it went on streaming past the last of them.
            after_the_others = 0
            async with c.attach(good.id, max_rows=10_000) as sub, trio.open_nursery() as n:
                sent = await c.send(good.id, "/chunks 100000 size=8 rate=100\ngood")
                await first_chunk(sub)
                n.start_soon(the_others)
                async for ev in sub:
                    if isinstance(ev, RowAppended) and others_ended.is_set():
                        after_the_others += 1
                        if after_the_others == 20:
                            await c.stop(good.id)
                    if isinstance(ev, TurnEnded) and ev.turn_id == sent.turn_id:
                        ended = ev
                        break
                rows = sub.transcript.rows()

            assert (ended.status, after_the_others >= 20) == ("stopped", True), ended
            streamed = row_text(next(r for r in rows if r.turn_id == sent.turn_id
                                     and r.role == "assistant").parts)
            # Whole and in order: the answer is the start of the scripted text.
            assert len(streamed) >= 20 * 8 and words_text(100_000 * 8).startswith(streamed)
            assert outcomes["late"].end.status == "success", outcomes["late"].end
            assert _answer(outcomes["late"]) == "late but fine"
            for name, (code, words) in expect.items():
                end = outcomes[name].end
                assert (end.status, end.error_code) == ("error", code), (name, end)
                assert words in end.error, (name, end.error)

            # Each failed topic works again with a well-behaved turn (a new driver process).
            again = await run_turn(c, topics["garbage"].id, "/text fine now\nq")
            assert again.end.status == "success"
            assert (await c.status()).pid == os.getpid()
        await d.stop()


async def test_a_driver_that_never_handshakes_times_out_alone(
    nursery: trio.Nursery, paths: Paths
) -> None:
    """The 2 s handshake timer: a driver that never answers fails its topic with
    `driver_timeout`, the daemon and its other topics untouched."""
    with trio.fail_after(40):
        d = await start_in_process(nursery, paths, handshake_timeout=2.0)
        async with open_client(paths) as c:
            hung = await c.create_topic(driver="scripted", options={"hang_at_handshake": True})
            other = await c.create_topic(driver="scripted")
            outcome = await run_turn(c, hung.id, "q")
            assert (outcome.end.status, outcome.end.error_code) == ("error", "driver_timeout")
            assert "did not complete the handshake within 2s" in outcome.end.error
            assert (await c.status()).pid == os.getpid()
            assert {t.id for t in await c.list_topics()} == {hung.id, other.id}
        await d.stop()


async def test_stray_late_and_hanging_drivers(nursery: trio.Nursery, paths: Paths) -> None:
    with trio.fail_after(40):
        d = await start_in_process(nursery, paths)
        async with open_client(paths) as c:
            t = await c.create_topic(driver="scripted")
            # Events for a turn that does not exist, and after the turn ended: ignored.
            stray = await run_turn(c, t.id, "/stray\n/text real\n/late\nq")
            assert stray.end.status == "success"
            assert _answer(stray) == "real"
            after = await run_turn(c, t.id, "/text next\nq")
            assert _answer(after) == "next"
            assert "late" not in _answer(after) and "stray" not in _answer(after)

            # A driver that ignores the interrupt is killed after the grace: the turn ends
            # `stopped`, and the next turn gets a new driver.
            async with c.attach(t.id) as sub:
                sent = await c.send(t.id, "/text about to hang\n/hang\nq")
                await first_chunk(sub)
                spawned = d.daemon.supervisor.statistics().spawned
                await c.stop(t.id)
                end = None
                async for ev in sub:
                    if isinstance(ev, TurnEnded) and ev.turn_id == sent.turn_id:
                        end = ev
                        break
                assert end is not None and end.status == "stopped"
            assert (await run_turn(c, t.id, "/text alive\nq")).end.status == "success"
            assert d.daemon.supervisor.statistics().spawned == spawned + 1
        await d.stop()
