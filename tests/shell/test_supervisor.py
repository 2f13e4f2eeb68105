"""The driver supervisor with real scripted-driver processes.

Every test is bounded by `trio.fail_after` (inside `serving`) and checks that no process
outlives it. Nothing waits by sleeping: tests wait for the outcome itself (an event on the
session, `SessionEnded`, an open that single-flights onto a prewarm).
"""

from __future__ import annotations

import logging
import os
import re
import select
import signal
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from hostd.shell.drivers.registry import DriverRegistry
from hostd.shell.drivers.supervisor import DriverSession, SessionEnded, SessionOptions, Supervisor
from hostd.testing.conformance import collect_turn
from hostd.testing.processes import child_pids, no_new_children
from hostd_protocol.common import SessionSource, TextDelta
from hostd_protocol.driver_messages import (
    ChunkEvent,
    Redirect,
    ResumeToken,
    Send,
    SteerBoundary,
    SteerInjected,
    TurnEnd,
    UsageEvent,
)
from hostd_protocol.driver_spec import DriverSpec
from hostd_protocol.errors import (
    DriverCrashed,
    DriverProtocolError,
    DriverTimeout,
    DriverUnavailable,
    InvalidArgument,
    TopicClosed,
)
from hostd_scripted.spec import SPEC

BROKEN = DriverSpec(name="broken", module="hostd_no_such_module_anywhere")
REGISTRY = DriverRegistry.from_specs(SPEC, BROKEN)
FAST = {"chunk_rate": 0, "tool_pause": 0}
#: The idle TTL of tests about idleness. A session starts idle when its open returns, so the
#: TTL must outlast any stall between that and the test's next step (a Send, `mark_busy`): a
#: loaded machine can hold a runnable process back for a few hundred ms, and with 0.2 s the
#: idle close then won (reproduced with a 0.3 s stall before that step).
IDLE_TTL = 1.0


def opts(**options: Any) -> SessionOptions:
    return SessionOptions(driver="scripted", options={**FAST, **options})


@pytest.fixture(autouse=True)
def _no_leftover_processes() -> Iterator[None]:
    with no_new_children():
        yield


@pytest.fixture
def base_env(tmp_path: Path) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", os.defpath),
        "HOME": str(tmp_path),
        "LANG": "C.UTF-8",
    }


@asynccontextmanager
async def serving(
    tmp_path: Path, base_env: dict[str, str], *, timeout: float = 60, **kwargs: Any
) -> AsyncIterator[Supervisor]:
    # The supervisor's timers only end hangs here; a test of one passes its own. A scripted
    # driver that was asked to close took more than the default 2 s (+1 s after SIGTERM) to
    # exit on a starved CPU and was reported as killed (DriverTimeout), failing "closed cleanly".
    kwargs.setdefault("handshake_timeout", 10.0)
    kwargs.setdefault("close_timeout", 10.0)
    sup = Supervisor(REGISTRY, base_env=base_env, workdir_root=str(tmp_path / "w"), **kwargs)
    with trio.fail_after(timeout):
        async with trio.open_nursery() as nursery:
            await nursery.start(sup.serve)
            try:
                yield sup
            finally:
                with trio.CancelScope(shield=True):
                    await sup.aclose()


async def turn(session: DriverSession, turn_id: str, text: str) -> Any:
    await session.send(Send(turn_id=turn_id, text=text))
    return await collect_turn(session, turn_id)


async def wait_end(session: DriverSession) -> SessionEnded:
    async for item in session.events:
        if isinstance(item, SessionEnded):
            return item
    raise AssertionError("events closed without SessionEnded")


# --- open: single flight, replacement, stale results ---------------------------------------------


async def test_concurrent_opens_share_one_process(tmp_path: Path, base_env: dict[str, str]) -> None:
    async with serving(tmp_path, base_env) as sup:
        got: list[DriverSession] = []

        async def open_one() -> None:
            got.append(await sup.open("t", opts()))

        async with trio.open_nursery() as nursery:
            for _ in range(8):
                nursery.start_soon(open_one)
        assert len(got) == 8
        assert all(s is got[0] for s in got)
        stats = sup.statistics()
        assert stats.spawned == 1
        assert stats.sessions == 1
        assert stats.connecting == 0
        # A later open reuses the live session.
        assert await sup.open("t", opts()) is got[0]
        assert sup.statistics().spawned == 1


async def test_a_cancelled_waiter_does_not_cancel_the_shared_connect(
    tmp_path: Path, base_env: dict[str, str]
) -> None:
    async with serving(tmp_path, base_env) as sup:
        slow = opts(start_delay=0.3)
        got: list[DriverSession] = []
        first_scope = trio.CancelScope()

        async def first() -> None:  # starts the connect, then gives up
            with first_scope:
                await sup.open("t", slow)

        async def second() -> None:
            got.append(await sup.open("t", slow))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(first)
            nursery.start_soon(second)
            await trio.testing.wait_all_tasks_blocked()
            assert sup.statistics().connecting == 1
            first_scope.cancel()
        assert first_scope.cancelled_caught
        assert len(got) == 1 and got[0].alive
        assert sup.statistics().spawned == 1


async def test_open_with_other_options_replaces_the_session(
    tmp_path: Path, base_env: dict[str, str]
) -> None:
    async with serving(tmp_path, base_env) as sup:
        first = await sup.open("t", opts())
        second = await sup.open("t", opts(extra=1))
        assert second is not first and second.pid != first.pid
        assert (await wait_end(first)).error is None  # closed cleanly, not crashed
        assert sup.statistics().sessions == 1


async def test_close_during_connect_discards_the_stale_result(
    tmp_path: Path, base_env: dict[str, str]
) -> None:
    async with serving(tmp_path, base_env) as sup:
        errors: list[BaseException] = []

        async def opener() -> None:
            try:
                await sup.open("t", opts(start_delay=0.3))
            except TopicClosed as exc:
                errors.append(exc)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(opener)
            await trio.testing.wait_all_tasks_blocked()
            assert sup.statistics().connecting == 1
            await sup.close("t")
        assert [str(e) for e in errors] == ["topic t was closed while its driver was starting"]
        assert sup.statistics().sessions == 0
        assert sup.session("t") is None


async def test_working_dir_per_topic_is_created(tmp_path: Path, base_env: dict[str, str]) -> None:
    async with serving(tmp_path, base_env) as sup:
        await sup.open("topic/../1", opts())
        assert await trio.Path(tmp_path / "w" / "topic_.._1").is_dir()
        explicit = tmp_path / "mine" / "deep"
        s = await sup.open("t2", SessionOptions(driver="scripted", working_dir=str(explicit)))
        assert await trio.Path(explicit).is_dir()
        assert s.alive


async def test_open_after_shutdown_is_refused(tmp_path: Path, base_env: dict[str, str]) -> None:
    async with serving(tmp_path, base_env) as sup:
        pass
    with pytest.raises(TopicClosed, match=r"^the driver supervisor is not running"):
        await sup.open("t", opts())


# --- failures at start -------------------------------------------------------------------------


async def test_unknown_driver_is_unavailable(tmp_path: Path, base_env: dict[str, str]) -> None:
    async with serving(tmp_path, base_env) as sup:
        with pytest.raises(DriverUnavailable, match=r"^no driver named 'nope' is installed"):
            await sup.open("t", SessionOptions(driver="nope"))


async def test_driver_that_cannot_import_reports_its_stderr(
    tmp_path: Path, base_env: dict[str, str]
) -> None:
    async with serving(tmp_path, base_env) as sup:
        with pytest.raises(DriverCrashed) as info:
            await sup.open("t", SessionOptions(driver="broken"))
        err = info.value
        assert err.message == "driver 'broken' exited during the handshake"
        assert err.exit_code == 1
        assert "No module named hostd_no_such_module_anywhere" in err.stderr_tail


async def test_handshake_timeout_kills_and_reports(
    tmp_path: Path, base_env: dict[str, str]
) -> None:
    # Long enough for the interpreter to reach `init` and say so even on a loaded machine (a
    # driver's start took 1.5-2.9 s at load 10, so with 2.5 s its stderr could still be empty).
    async with serving(tmp_path, base_env, handshake_timeout=5.0) as sup:
        with pytest.raises(DriverTimeout) as info:
            await sup.open("t", opts(hang_at_handshake=True))
        err = info.value
        assert err.message == "driver 'scripted' did not complete the handshake within 5s"
        assert err.exit_code == -signal.SIGKILL
        assert "hanging at the handshake" in err.stderr_tail
        assert sup.statistics().sessions == 0


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"garbage_at_handshake": True}, DriverProtocolError, r"bad frame during the handshake"),
        ({"crash_at_handshake": True}, DriverCrashed, r"exited during the handshake"),
        (
            {"fatal": "no credentials"},
            DriverUnavailable,
            r"refused to start: no credentials \(exit code 2\)",
        ),
    ],
)
async def test_bad_starts_are_typed_errors(
    tmp_path: Path, base_env: dict[str, str], options: dict[str, Any], error: type, message: str
) -> None:
    async with serving(tmp_path, base_env) as sup:
        with pytest.raises(error, match=message):
            await sup.open("t", opts(**options))
        assert sup.statistics().sessions == 0
        assert (await sup.open("t", opts())).alive  # and the supervisor goes on


# --- turns, batches, pass-through ---------------------------------------------------------------


async def test_events_arrive_in_batches_one_per_read(
    tmp_path: Path, base_env: dict[str, str]
) -> None:
    async with serving(tmp_path, base_env) as sup:
        session = await sup.open("t", opts())
        # 50 frames written at once (atomically, < PIPE_BUF) are one read, so one batch.
        result = await turn(session, "b", "/burst 50")
        assert result.end is not None and result.end.status == "success"
        await session.send(Send(turn_id="c", text="/burst 50"))
        result = await collect_turn(session, "c")
        assert result.end is not None
        # TurnEnd may share the read (the harness can flush it right behind the burst).
        assert [e.chunk for e in result.events if isinstance(e, ChunkEvent)] == [
            TextDelta(text=f"{i:03d}") for i in range(50)
        ]
        assert result.batches <= 2
        # And a long stream is delivered in far fewer batches than events.
        # (The harness merges the deltas of one pass into one frame: count the stamps.)
        result = await turn(session, "d", "/bench 2000 size=32")
        text = "".join(
            e.chunk.text for e in result.chunks("d") if isinstance(e.chunk, TextDelta)
        )
        assert len(re.findall(r"(\d+):", text)) == 2000
        assert result.batches < 2000


async def test_a_slow_consumer_of_a_full_channel_gets_every_event_in_order(
    tmp_path: Path, base_env: dict[str, str]
) -> None:
    # One batch of room: the reader hands most batches over through the waiting path.
    async with serving(tmp_path, base_env, event_buffer=1) as sup:
        session = await sup.open("t", opts())
        await session.send(Send(turn_id="a", text="/bench 3000 size=32"))
        stamps: list[int] = []
        async for item in session.events:
            assert not isinstance(item, SessionEnded)
            # A read's deltas arrive merged: every chunk's stamp is in the merged text.
            stamps += [
                int(stamp)
                for e in item
                if isinstance(e, ChunkEvent) and isinstance(e.chunk, TextDelta)
                for stamp in re.findall(r"(\d+):", e.chunk.text)
            ]
            if any(isinstance(e, TurnEnd) for e in item):
                break
            await trio.lowlevel.checkpoint()  # slower than the driver
        assert len(stamps) == 3000 and stamps == sorted(stamps)


async def test_a_batch_taker_gets_every_batch_in_order_and_the_channel_only_the_end(
    tmp_path: Path, base_env: dict[str, str]
) -> None:
    async with serving(tmp_path, base_env) as sup:
        session = await sup.open("t", opts())
        taken: list[list[Any]] = []
        session.take_batch = taken.append
        done = trio.Event()
        session.on_turn_end = lambda _s: done.set()
        await session.send(Send(turn_id="a", text="/bench 2000 size=32"))
        await done.wait()
        events = [e for batch in taken for e in batch]
        stamps = [
            int(stamp)
            for e in events
            if isinstance(e, ChunkEvent) and isinstance(e.chunk, TextDelta)
            for stamp in re.findall(r"(\d+):", e.chunk.text)
        ]
        assert len(stamps) == 2000 and stamps == sorted(stamps)
        assert isinstance(events[-1], TurnEnd) and len(taken) < 2000  # batches, not events
        # A taker gets each read's deltas merged (it would merge them itself).
        assert len([e for e in events if isinstance(e, ChunkEvent)]) < 2000
        await sup.close("t")
        assert [item async for item in session.events] == [SessionEnded(None)]


async def test_a_batch_taker_that_raises_ends_its_session_not_the_daemon(
    tmp_path: Path, base_env: dict[str, str]
) -> None:
    async with serving(tmp_path, base_env) as sup:
        session = await sup.open("t", opts())

        def broken(batch: list[Any]) -> None:
            raise RuntimeError("a bug in the taker")

        session.take_batch = broken
        await session.send(Send(turn_id="a", text="hi"))
        end = await wait_end(session)
        assert isinstance(end.error, DriverCrashed)
        assert re.match(r"^internal error reading driver 'scripted': RuntimeError", end.error.message)
        assert (await sup.open("t", opts())).alive  # the next open gets a new process


async def test_steer_is_injected_at_the_tool_boundary(
    tmp_path: Path, base_env: dict[str, str]
) -> None:
    async with serving(tmp_path, base_env) as sup:
        session = await sup.open("t", opts())
        await session.send(
            Send(turn_id="s", text="/text before\n/tool Read wait-steer=10\n/text after")
        )

        async def steer() -> None:
            await session.send(Redirect(turn_id="s", steer_id="st1", text="use tabs"))

        result = await collect_turn(session, "s", on_first_chunk=steer)
        kinds = [type(e) for e in result.events]
        assert kinds.index(SteerInjected) < kinds.index(SteerBoundary)
        boundary = next(e for e in result.events if isinstance(e, SteerBoundary))
        assert boundary.steer_ids == ["st1"]
        assert "You said: use tabs" in result.text


async def test_stray_and_late_events_pass_through(tmp_path: Path, base_env: dict[str, str]) -> None:
    async with serving(tmp_path, base_env) as sup:
        session = await sup.open("t", opts())
        result = await turn(session, "x", "/stray\n/late\n/text ok")
        assert result.end is not None and result.end.status == "success"
        assert any(isinstance(e, ChunkEvent) and e.turn_id == "no-such-turn" for e in result.events)
        assert any(isinstance(e, UsageEvent) and e.turn_id == "no-such-turn" for e in result.events)
        # The late chunk comes after TurnEnd, still for turn x.
        async for batch in session.events:
            assert not isinstance(batch, SessionEnded)
            late = [e for e in batch if isinstance(e, ChunkEvent)]
            if late:
                assert late[0].turn_id == "x" and late[0].chunk == TextDelta(text="late")
                break
        assert session.alive


# --- crashes -----------------------------------------------------------------------------------


async def test_crash_mid_turn_ends_the_session(
    tmp_path: Path, base_env: dict[str, str]
) -> None:
    async with serving(tmp_path, base_env) as sup:
        session = await sup.open("t", opts())
        whole = await turn(session, "w", "/chunks 3 rate=0")
        result = await turn(session, "c", "/chunks 3 rate=0\n/crash 7")
        # The crash itself ends the session (no turn end, no timer): how soon is the bench's
        # `scripts/bench failures` row "crash -> session ended" (the stamp below).
        assert result.end is None and result.ended is not None
        # What was streamed before the crash arrived (the deltas of a read come merged).
        assert result.text == whole.text != ""
        err = result.ended.error
        assert isinstance(err, DriverCrashed)
        assert err.message == "driver 'scripted' exited with code 7 during turn c"
        assert err.exit_code == 7
        assert "crashing on purpose" in err.stderr_tail
        # The driver stamped its CLOCK_MONOTONIC just before os._exit (the bench reads it).
        assert re.search(r"monotonic_ns=\d+", err.stderr_tail), err.stderr_tail
        # Sending to the dead session is a typed error, and the next open starts anew.
        with pytest.raises(DriverCrashed, match=r"exited with code 7"):
            await session.send(Send(turn_id="again", text="hi"))
        fresh = await sup.open("t", opts())
        assert fresh.pid != session.pid
        after = await turn(fresh, "d", "hi")
        assert after.end is not None and after.end.status == "success"
        assert sup.statistics().crashed == 1


async def test_killed_from_outside_mid_turn(tmp_path: Path, base_env: dict[str, str]) -> None:
    async with serving(tmp_path, base_env) as sup:
        session = await sup.open("t", opts())
        async def kill() -> None:
            os.kill(session.pid, signal.SIGKILL)

        await session.send(Send(turn_id="k", text="/chunks 1 rate=0\n/wait"))
        result = await collect_turn(session, "k", on_first_chunk=kill)
        # The kill, not the turn (it waits until interrupted), ended the session.
        assert result.end is None and result.ended is not None
        err = result.ended.error
        assert isinstance(err, DriverCrashed)
        assert err.message == "driver 'scripted' was killed by SIGKILL during turn k"
        assert err.exit_code == -signal.SIGKILL


async def test_a_send_to_a_driver_dead_between_turns_is_not_delivered(
    tmp_path: Path, base_env: dict[str, str]
) -> None:
    """Issue 31 item 7: the process died between turns and a Send is written before the
    session noticed. The Send never reached it: `DriverCrashed` (so the owner may give the
    turn to a new process), and the session's end names no turn (it was not during one)."""
    async with serving(tmp_path, base_env) as sup:
        session = await sup.open("t", opts())
        done = await turn(session, "a", "hi")
        assert done.end is not None and done.end.status == "success"
        os.kill(session.pid, signal.SIGKILL)
        fd = os.pidfd_open(session.pid)
        try:  # blocking on purpose: the session must not see the exit before the send
            assert select.select([fd], [], [], 10.0)[0], "the driver did not die"
        finally:
            os.close(fd)
        with pytest.raises(DriverCrashed, match=r"^driver 'scripted' was killed by SIGKILL \(exit code -9\)$"):
            await session.send(Send(turn_id="b", text="hi"))
        await session.ended.wait()
        assert session.end_error is not None
        assert session.end_error.message == "driver 'scripted' was killed by SIGKILL"
        assert session.running_turn is None


@pytest.mark.parametrize(
    ("text", "needle"),
    [("/garbage", "writing garbage"), ("/oversized", "announcing an oversized frame")],
)
async def test_garbage_mid_turn_kills_with_a_protocol_error(
    tmp_path: Path, base_env: dict[str, str], text: str, needle: str
) -> None:
    async with serving(tmp_path, base_env) as sup:
        session = await sup.open("t", opts())
        result = await turn(session, "g", text)
        assert result.ended is not None
        err = result.ended.error
        assert isinstance(err, DriverProtocolError)
        assert err.message.startswith("driver 'scripted' wrote a bad frame: ")
        assert "maximum" in err.message  # both announce a length over the limit
        assert err.exit_code == -signal.SIGKILL
        assert needle in err.stderr_tail


# --- interrupt ---------------------------------------------------------------------------------


async def test_interrupt_stops_the_turn(tmp_path: Path, base_env: dict[str, str]) -> None:
    async with serving(tmp_path, base_env) as sup:
        session = await sup.open("t", opts())
        await session.send(Send(turn_id="w", text="/chunks 1 rate=0\n/wait"))
        async with trio.open_nursery() as nursery:

            async def stop() -> None:
                nursery.start_soon(session.interrupt, "w", 5.0)

            result = await collect_turn(session, "w", on_first_chunk=stop)
        assert result.end is not None and result.end.status == "stopped"
        assert session.alive
        # Interrupting a turn that is over is a no-op.
        await session.interrupt("w", 0.1)
        assert session.alive


async def test_interrupt_kills_a_driver_that_does_not_stop(
    tmp_path: Path, base_env: dict[str, str]
) -> None:
    async with serving(tmp_path, base_env) as sup:
        session = await sup.open("t", opts())
        await session.send(Send(turn_id="h", text="/chunks 1 rate=0\n/hang"))
        async with trio.open_nursery() as nursery:

            async def stop() -> None:
                nursery.start_soon(session.interrupt, "h", 0.3)

            result = await collect_turn(session, "h", on_first_chunk=stop)
        assert result.ended is not None
        err = result.ended.error
        assert isinstance(err, DriverTimeout)
        assert err.message == (
            "driver 'scripted' did not stop turn h within 0.3s of an interrupt; killed it"
        )
        assert err.exit_code == -signal.SIGKILL
        assert "hanging (ignoring interrupts)" in err.stderr_tail


# --- idle TTL and warm spares ------------------------------------------------------------------


async def test_idle_ttl_closes_after_the_turn_and_prewarms(
    tmp_path: Path, base_env: dict[str, str]
) -> None:
    async with serving(tmp_path, base_env, idle_ttl=IDLE_TTL) as sup:
        session = await sup.open("t", opts())
        # A turn longer than the TTL is never cut: idleness starts after its TurnEnd.
        result = await turn(session, "long", f"/sleep {IDLE_TTL * 1.5}\n/text done")
        assert result.end is not None and result.end.status == "success"
        token = next(e.token for e in result.events if isinstance(e, ResumeToken))
        ended = await wait_end(session)
        assert ended.error is None
        assert sup.statistics().idle_closed == 1
        # The spare for the same options and token is being started; this open waits for it
        # (single flight with the prewarm) and takes it instead of a cold start.
        again = await sup.open("t", opts(), token)
        stats = sup.statistics()
        assert (stats.warm_hits, stats.spawned) == (1, 2)
        assert again.pid != session.pid and again.topic_id == "t"
        check = await turn(again, "who", "/whoami")
        assert check.text == f"resumed {token}"


async def test_mark_busy_pins_the_session(tmp_path: Path, base_env: dict[str, str]) -> None:
    async with serving(tmp_path, base_env, idle_ttl=IDLE_TTL, prewarm_on_idle=False) as sup:
        pinned = await sup.open("pinned", opts())
        sup.mark_busy("pinned")
        other = await sup.open("other", opts())
        # By the time the unpinned one has timed out, the pinned one has been kept.
        assert (await wait_end(other)).error is None
        assert pinned.alive
        sup.mark_idle("pinned")
        assert (await wait_end(pinned)).error is None
        assert sup.statistics().idle_closed == 2
        assert sup.statistics().warm == 0


async def test_warm_spare_is_taken_by_a_matching_open(
    tmp_path: Path, base_env: dict[str, str]
) -> None:
    async with serving(tmp_path, base_env) as sup:
        o = SessionOptions(driver="scripted", working_dir=str(tmp_path / "shared"), options=FAST)
        spare = await sup.prewarm(o)
        assert spare.warmed.is_set()
        assert sup.statistics().warm == 1
        session = await sup.open("t", o)
        assert session is spare and session.topic_id == "t"
        stats = sup.statistics()
        assert (stats.warm, stats.warm_hits, stats.warm_misses, stats.spawned) == (0, 1, 0, 1)
        result = await turn(session, "x", "hello")
        assert result.end is not None and result.end.status == "success"


async def test_mismatching_open_starts_cold_and_drops_the_topics_spare(
    tmp_path: Path, base_env: dict[str, str]
) -> None:
    async with serving(tmp_path, base_env) as sup:
        generic = await sup.prewarm(opts(model_hint="a"), topic_id="")
        mine = await sup.prewarm(opts(model_hint="a"), topic_id="t")
        session = await sup.open("t", opts(model_hint="b"))
        assert session is not generic and session is not mine
        stats = sup.statistics()
        assert (stats.warm_hits, stats.warm_misses, stats.spawned) == (0, 1, 3)
        # The spare made for this topic is useless now and closed; the generic one stays.
        assert mine.ended.is_set()
        assert generic.alive and stats.warm == 1


async def test_spares_are_matched_by_resume_token_too(
    tmp_path: Path, base_env: dict[str, str]
) -> None:
    async with serving(tmp_path, base_env) as sup:
        o = SessionOptions(driver="scripted", working_dir=str(tmp_path / "shared"), options=FAST)
        spare = await sup.prewarm(o, "vendor-session-1")
        fresh = await sup.open("new-topic", o)  # no token: must not continue someone's session
        assert fresh is not spare
        resumed = await sup.open("old-topic", o, "vendor-session-1")
        assert resumed is spare
        assert (await turn(resumed, "w", "/whoami")).text == "resumed vendor-session-1"


async def test_spares_are_matched_by_fork_source_too(
    tmp_path: Path, base_env: dict[str, str]
) -> None:
    async with serving(tmp_path, base_env) as sup:
        o = SessionOptions(
            driver="scripted",
            working_dir=str(tmp_path / "shared"),
            options={**FAST, "fork_session": True},
        )
        source = SessionSource(token="vendor-session-1")
        spare = await sup.prewarm(o, fork_from=source)
        plain = await sup.open("new-topic", o)  # nothing to copy: never the copy
        assert plain is not spare and plain.fork_from is None
        forked = await sup.open("fork-topic", o, fork_from=source)
        assert forked is spare and forked.fork_from == source
        assert forked.capabilities.fork_session
        assert (await turn(forked, "w", "/whoami")).text == "resumed a copy of vendor-session-1"


async def test_max_warm_evicts_the_oldest(tmp_path: Path, base_env: dict[str, str]) -> None:
    async with serving(tmp_path, base_env, max_warm=2) as sup:
        spares = [await sup.prewarm(opts(n=i)) for i in range(3)]
        assert spares[0].ended.is_set()
        assert (await wait_end(spares[0])).error is None
        assert spares[1].alive and spares[2].alive
        assert sup.statistics().warm == 2


async def test_warm_spare_expires(tmp_path: Path, base_env: dict[str, str]) -> None:
    async with serving(tmp_path, base_env, warm_ttl=0.2) as sup:
        spare = await sup.prewarm(opts())
        assert (await wait_end(spare)).error is None
        assert sup.statistics().warm == 0


async def test_a_spare_that_dies_is_not_handed_out(
    tmp_path: Path, base_env: dict[str, str]
) -> None:
    async with serving(tmp_path, base_env) as sup:
        spare = await sup.prewarm(opts())
        os.kill(spare.pid, signal.SIGKILL)
        await wait_end(spare)
        assert sup.statistics().warm == 0
        session = await sup.open("t", opts())
        assert session is not spare and session.alive


# --- resume ------------------------------------------------------------------------------------


async def test_resume_token_round_trip(tmp_path: Path, base_env: dict[str, str]) -> None:
    async with serving(tmp_path, base_env, max_warm=0) as sup:
        first = await sup.open("t", opts())
        result = await turn(first, "1", "/whoami")
        tokens = [e.token for e in result.events if isinstance(e, ResumeToken)]
        assert len(tokens) == 1 and result.text == f"new session {tokens[0]}"
        assert first.resume_token == tokens[0]
        await sup.close("t")
        assert (await wait_end(first)).error is None
        second = await sup.open("t", opts(), tokens[0])
        assert second.pid != first.pid
        again = await turn(second, "2", "/whoami")
        assert again.text == f"resumed {tokens[0]}"
        assert [e.token for e in again.events if isinstance(e, ResumeToken)] == tokens


# --- environment and secrets -------------------------------------------------------------------


async def test_driver_gets_a_minimal_env_and_only_its_own_secrets(
    tmp_path: Path, base_env: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    env = {
        **base_env,
        "ANTHROPIC_API_KEY": "sk-daemon-wide",
        "HOSTD_SCRIPTED_TOKEN": "named-by-the-spec",
        "UNRELATED": "x",
    }
    secret = "sk-live-0123456789"
    async with serving(tmp_path, env) as sup:
        with_key = await sup.open(
            "a", SessionOptions(driver="scripted", options=FAST, secrets={"MY_API_KEY": secret})
        )
        without = await sup.open("b", opts())
        names = set((await turn(with_key, "1", "/envkeys")).text.split())
        # LC_CTYPE may be added by Python itself (PEP 538 locale coercion).
        assert names - {"LC_CTYPE"} == {
            "PATH",
            "HOME",
            "LANG",
            "HOSTD_SCRIPTED_TOKEN",
            "MY_API_KEY",
        }
        assert (await turn(without, "1", "/env MY_API_KEY")).text == "MY_API_KEY=unset"
        assert (await turn(with_key, "2", "/env MY_API_KEY")).text == "MY_API_KEY=set"
        # The driver printed the value on stderr: the tail and the log show it redacted.
        assert f"MY_API_KEY={secret}" not in with_key.stderr_tail
        assert "scripted: env MY_API_KEY=***" in with_key.stderr_tail
        await sup.close("a")
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "env MY_API_KEY=***" in logged  # the stderr line was logged, redacted
    assert secret not in logged
    assert "sk-daemon-wide" not in logged


# --- shutdown ----------------------------------------------------------------------------------


async def test_aclose_closes_sessions_and_spares_gracefully(
    tmp_path: Path, base_env: dict[str, str]
) -> None:
    async with serving(tmp_path, base_env) as sup:
        session = await sup.open("t", opts())
        spare = await sup.prewarm(opts(other=1))
        await sup.aclose()
        assert session.ended.is_set() and spare.ended.is_set()
        assert (session.exit_code, spare.exit_code) == (0, 0)
        assert session.end_error is None


async def test_cancelling_serve_kills_and_reaps_everything(
    tmp_path: Path, base_env: dict[str, str]
) -> None:
    sup = Supervisor(REGISTRY, base_env=base_env, workdir_root=str(tmp_path / "w"))
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            await nursery.start(sup.serve)
            sessions = [await sup.open(f"t{i}", opts()) for i in range(3)]
            await sessions[0].send(Send(turn_id="busy", text="/chunks 1 rate=0\n/hang"))
            nursery.cancel_scope.cancel()
    assert all(s.ended.is_set() for s in sessions)
    assert not child_pids() & {s.pid for s in sessions}


# --- commands that cannot go on the wire -------------------------------------------------------


async def test_options_that_do_not_encode_are_refused_before_spawning(
    tmp_path: Path, base_env: dict[str, str]
) -> None:
    async with serving(tmp_path, base_env) as sup:
        with pytest.raises(InvalidArgument, match=r"^options of driver 'scripted' are not plain"):
            await sup.open("t", opts(bad=object()))
        assert sup.statistics().spawned == 0


async def test_a_command_over_the_frame_limit_fails_alone(
    tmp_path: Path, base_env: dict[str, str]
) -> None:
    async with serving(tmp_path, base_env, max_frame_size=4096) as sup:
        session = await sup.open("t", opts())
        with pytest.raises(DriverProtocolError, match=r"^cannot send Send to driver 'scripted': "):
            await session.send(Send(turn_id="big", text="x" * 10_000))
        assert session.alive
        result = await turn(session, "small", "hi")
        assert result.end is not None and result.end.status == "success"


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            state = fh.read().rsplit(b")", 1)[1].split()[0]
    except OSError:
        return False
    return state != b"Z"


async def test_a_kill_takes_the_drivers_children_with_it(
    tmp_path: Path, base_env: dict[str, str]
) -> None:
    # The driver runs in its own process group, and a kill signals the group: a vendor CLI
    # started by the driver does not outlive it.
    async with serving(tmp_path, base_env) as sup:
        session = await sup.open("t", opts())
        result = await turn(session, "c", "/child")
        child = int(result.text.split()[1])
        assert _running(child)
        # A pidfd becomes readable when the process exits (works for non-children too).
        pidfd = os.pidfd_open(child)
        try:
            await session.send(Send(turn_id="h", text="/hang"))
            await session.interrupt("h", 0.2)
            assert isinstance(session.end_error, DriverTimeout)
            with trio.fail_after(5):
                await trio.lowlevel.wait_readable(pidfd)
        finally:
            os.close(pidfd)
        assert not _running(child)


async def test_a_consumer_that_stops_listening_does_not_block_the_driver(
    tmp_path: Path, base_env: dict[str, str]
) -> None:
    async with serving(tmp_path, base_env, event_buffer=1) as sup:
        session = await sup.open("t", opts())
        await session.events.aclose()
        # 5000 chunks overflow every buffer on the way unless the reader keeps draining.
        await session.send(Send(turn_id="a", text="/bench 5000 size=64\n/wait"))
        # interrupt() returns once TurnEnd(a) was read; a stalled reader would never see it
        # and the driver would be killed after the grace.
        await session.interrupt("a", 5.0)
        assert session.alive and session.active_turn is None


async def test_a_driver_that_failed_to_load_is_unavailable_with_its_reason(
    tmp_path: Path, base_env: dict[str, str]
) -> None:
    from hostd.shell.drivers.registry import DriverEntry

    registry = DriverRegistry(
        {
            "scripted": DriverEntry("scripted", SPEC),
            "bad": DriverEntry("bad", None, "failed to load 'x:SPEC': ImportError: nope"),
        }
    )
    sup = Supervisor(registry, base_env=base_env, workdir_root=str(tmp_path / "w"))
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            await nursery.start(sup.serve)
            with pytest.raises(DriverUnavailable) as info:
                await sup.open("t", SessionOptions(driver="bad"))
            assert info.value.message == (
                "driver 'bad' is installed but unavailable: failed to load 'x:SPEC': "
                "ImportError: nope"
            )
            assert (await sup.open("t", opts())).alive  # the others work
            await sup.aclose()


async def test_a_refused_second_send_does_not_make_the_session_look_idle(
    tmp_path: Path, base_env: dict[str, str]
) -> None:
    async with serving(tmp_path, base_env, idle_ttl=IDLE_TTL, prewarm_on_idle=False) as sup:
        session = await sup.open("t", opts())
        await session.send(Send(turn_id="a", text=f"/sleep {IDLE_TTL * 1.5}\n/text done"))
        await session.send(Send(turn_id="b", text="hi"))  # one turn at a time: refused
        result = await collect_turn(session, "a")
        busy = [e for e in result.events if isinstance(e, TurnEnd) and e.turn_id == "b"]
        assert busy and busy[0].error_code == "topic_busy"
        # Turn a outlasted the TTL: it still finished.
        assert result.end is not None and result.end.status == "success"
        assert result.ended is None
        assert session.active_turn is None
        assert (await wait_end(session)).error is None  # and idled out after it


async def test_writes_to_a_driver_that_stopped_reading_are_bounded(
    tmp_path: Path, base_env: dict[str, str]
) -> None:
    async with serving(tmp_path, base_env) as sup:
        session = await sup.open("t", opts())
        await session.send(Send(turn_id="f", text="/freeze"))
        await wait_frozen(session, "f")
        blocked: list[BaseException] = []

        async def fill_the_pipe() -> None:
            try:
                await session.send(Redirect(turn_id="f", steer_id="s", text="x" * 300_000))
            except DriverCrashed as exc:
                blocked.append(exc)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(fill_the_pipe)
            await trio.testing.wait_all_tasks_blocked()
            # The Interrupt waits behind the stuck write, within the grace, then kills.
            await session.interrupt("f", 0.3)
        assert isinstance(session.end_error, DriverTimeout)
        assert len(blocked) == 1  # the stuck write ended with the process


async def test_a_driver_slow_to_exit_after_its_output_closed_still_closes_cleanly(
    tmp_path: Path, base_env: dict[str, str]
) -> None:
    # Its output ends at once, the process lingers 1.5 s more (an interpreter's teardown on
    # a loaded machine): within the close budget, so not killed (it was, 1 s after the
    # output ended, and the clean close was reported as `did not exit after close`).
    async with serving(tmp_path, base_env) as sup:
        session = await sup.open("t", opts(exit_delay=1.5))
        await sup.close("t")
        assert session.end_error is None
        assert session.exit_code == 0


async def test_close_escalates_to_a_kill_for_a_frozen_driver(
    tmp_path: Path, base_env: dict[str, str]
) -> None:
    # SIGTERM asks the harness to end the session like Close; a blocked event loop cannot,
    # so the kill (the driver's whole tree) follows the terminate budget.
    async with serving(tmp_path, base_env, close_timeout=0.3) as sup:
        session = await sup.open("t", opts())
        await session.send(Send(turn_id="f", text="/freeze"))
        await wait_frozen(session, "f")
        await sup.close("t")
        err = session.end_error
        assert isinstance(err, DriverTimeout)
        assert err.message == "driver 'scripted' did not exit after close; was killed by SIGKILL"
        assert err.exit_code == -signal.SIGKILL


async def wait_frozen(session: DriverSession, turn_id: str) -> None:
    async for batch in session.events:
        assert not isinstance(batch, SessionEnded), batch
        if any(isinstance(e, ChunkEvent) and e.chunk == TextDelta(text="frozen") for e in batch):
            return
