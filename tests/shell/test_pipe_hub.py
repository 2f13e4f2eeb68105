"""The pipe hub (`hostd.shell.drivers.pipe_hub`) on real pipes, and driver sessions whose quiet
stdout it reads (real scripted-driver processes through the supervisor).

No test waits by sleeping: they wait for the bytes, the batch or the session's end itself.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
import trio

from hostd.shell.drivers.pipe_hub import STAY, STOPPED, PipeHub
from hostd.testing.processes import no_new_children
from hostd_protocol.common import TextDelta
from hostd_protocol.driver_messages import ChunkEvent, Send, TurnEnd
from hostd_protocol.errors import DriverCrashed
from tests.shell.test_supervisor import opts, serving, wait_end


@pytest.fixture(autouse=True)
def _no_leftover_processes() -> Iterator[None]:
    with no_new_children():
        yield


@pytest.fixture
def base_env(tmp_path: Path) -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", os.defpath), "HOME": str(tmp_path), "LANG": "C.UTF-8"}


@pytest.fixture
def pipes() -> Iterator[list[tuple[int, int]]]:
    made = [os.pipe() for _ in range(8)]
    for r, _ in made:
        os.set_blocking(r, False)
    yield made
    for r, w in made:
        for fd in (r, w):
            try:
                os.close(fd)
            except OSError:
                pass


def reader(fd: int, got: bytearray, until: bytes) -> Any:
    """A handler: read what is there; release with the bytes read once `until` arrived."""

    def handler() -> object:
        try:
            got.extend(os.read(fd, 65536))
        except BlockingIOError:
            return STAY
        return bytes(got) if got.endswith(until) else STAY

    return handler


async def test_every_pipe_is_read_in_order_by_one_task(pipes: list[tuple[int, int]]) -> None:
    hub = PipeHub()
    results: dict[int, object] = {}
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            await nursery.start(hub.serve)

            async def park(i: int, fd: int) -> None:
                results[i] = await hub.park(fd, reader(fd, bytearray(), b"end"))

            async with trio.open_nursery() as parked:
                for i, (r, _) in enumerate(pipes):
                    parked.start_soon(park, i, r)
                await trio.testing.wait_all_tasks_blocked()
                assert hub.statistics().parked == len(pipes)
                # Interleaved writes across the pipes, many per pipe.
                for k in range(200):
                    for i, (_, w) in enumerate(pipes):
                        os.write(w, f"{i}:{k};".encode())
                    if k % 20 == 0:
                        await trio.testing.wait_all_tasks_blocked()
                for _, w in pipes:
                    os.write(w, b"end")
            nursery.cancel_scope.cancel()
    for i in range(len(pipes)):
        assert results[i] == "".join(f"{i}:{k};" for k in range(200)).encode() + b"end"
    stats = hub.statistics()
    assert stats.parked == 0
    # Several pipes per wake-up at least once: one task step served many pipes.
    assert stats.reads > stats.passes


async def test_a_handler_error_reaches_the_parked_task_and_the_hub_goes_on(
    pipes: list[tuple[int, int]],
) -> None:
    hub = PipeHub()
    (r1, w1), (r2, w2) = pipes[:2]

    def broken() -> object:
        raise RuntimeError("a bug in the handler")

    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            await nursery.start(hub.serve)
            os.write(w1, b"x")
            with pytest.raises(RuntimeError, match=r"^a bug in the handler$"):
                await hub.park(r1, broken)
            # The pipe is out of the set: it can be parked again, and the hub still reads.
            os.write(w2, b"y-end")
            assert await hub.park(r2, reader(r2, bytearray(), b"end")) == b"y-end"
            assert await hub.park(r1, reader(r1, bytearray(), b"x")) == b"x"
            nursery.cancel_scope.cancel()


async def test_a_cancelled_park_leaves_the_set_and_a_stopped_hub_releases(
    pipes: list[tuple[int, int]],
) -> None:
    hub = PipeHub()
    (r1, w1), (r2, _) = pipes[:2]
    got = bytearray()
    with trio.fail_after(20):
        assert await hub.park(r1, reader(r1, got, b"")) is STOPPED  # not serving
        async with trio.open_nursery() as nursery:
            await nursery.start(hub.serve)
            async with trio.open_nursery() as parking:
                parking.start_soon(hub.park, r1, reader(r1, got, b"never"))
                await trio.testing.wait_all_tasks_blocked()
                assert hub.statistics().parked == 1
                parking.cancel_scope.cancel()
            assert hub.statistics().parked == 0
            # Bytes written now are not read by anyone until the pipe is parked again.
            os.write(w1, b"after")
            await trio.testing.wait_all_tasks_blocked()
            assert got == b""
            assert await hub.park(r1, reader(r1, got, b"after")) == b"after"

            nursery.cancel_scope.cancel()

        # A hub that stops releases its parked tasks (they read on their own again).
        released: list[object] = []
        hub_scope = trio.CancelScope()

        async def run_hub(task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
            with hub_scope:
                await hub.serve(task_status=task_status)

        async def park_then_record() -> None:
            released.append(await hub.park(r2, reader(r2, bytearray(), b"never")))

        async with trio.open_nursery() as nursery:
            await nursery.start(run_hub)
            nursery.start_soon(park_then_record)
            await trio.testing.wait_all_tasks_blocked()
            assert hub.statistics().parked == 1
            hub_scope.cancel()
        assert released == [STOPPED]
        assert not hub.serving


def in_order(stamps: list[int]) -> bool:
    """The scripted bench's stamps are its clock at each chunk: strictly increasing."""
    return all(a < b for a, b in pairwise(stamps))


def stamps_of(events: list[Any]) -> list[int]:
    return [
        int(stamp)
        for e in events
        if isinstance(e, ChunkEvent) and isinstance(e.chunk, TextDelta)
        for stamp in re.findall(r"(\d+):", e.chunk.text)
    ]


async def test_a_paced_stream_is_read_by_the_hub_every_chunk_in_order(
    tmp_path: Path, base_env: dict[str, str]
) -> None:
    # 200 chunks/s: each read waits for the pipe, so the session parks it on the hub.
    async with serving(tmp_path, base_env) as sup:
        session = await sup.open("t", opts(bench_rate=200))
        taken: list[list[Any]] = []
        session.take_batch = taken.append
        done = trio.Event()
        session.on_turn_end = lambda _s: done.set()
        await session.send(Send(turn_id="a", text="/bench 300 size=32"))
        await done.wait()
        events = [e for batch in taken for e in batch]
        assert len(stamps_of(events)) == 300 and in_order(stamps_of(events))
        assert isinstance(events[-1], TurnEnd)
        # Without the hub every read is the session task's own (0 reads by the hub).
        assert sup.hub.statistics().reads > 100
        await sup.close("t")


async def test_a_taker_leaving_mid_stream_gets_the_rest_through_events_in_order(
    tmp_path: Path, base_env: dict[str, str]
) -> None:
    async with serving(tmp_path, base_env) as sup:
        session = await sup.open("t", opts(bench_rate=200))
        taken: list[list[Any]] = []
        enough = trio.Event()

        def take(batch: list[Any]) -> None:
            taken.append(batch)
            if len(stamps_of([e for b in taken for e in b])) >= 50:
                session.take_batch = None  # from the hub's own step
                enough.set()

        session.take_batch = take
        await session.send(Send(turn_id="a", text="/bench 200 size=32"))
        await enough.wait()
        rest: list[Any] = []
        async for item in session.events:
            rest += item
            if any(isinstance(e, TurnEnd) for e in item):
                break
        stamps = stamps_of([e for b in taken for e in b] + rest)
        assert len(stamps) == 200 and in_order(stamps)
        await sup.close("t")


async def test_a_driver_killed_while_the_hub_reads_it_ends_its_session(
    tmp_path: Path, base_env: dict[str, str]
) -> None:
    async with serving(tmp_path, base_env) as sup:
        session = await sup.open("t", opts(bench_rate=100))
        taken: list[list[Any]] = []
        started = trio.Event()

        def take(batch: list[Any]) -> None:
            taken.append(batch)
            started.set()

        session.take_batch = take
        await session.send(Send(turn_id="a", text="/bench 100000 size=32"))
        await started.wait()
        await trio.testing.wait_all_tasks_blocked()
        os.killpg(session.pid, 9)  # a crash, not a kill we asked for
        end = await wait_end(session)
        assert isinstance(end.error, DriverCrashed)
        assert sup.hub.statistics().parked == 0
        stamps = stamps_of([e for b in taken for e in b])
        assert stamps and in_order(stamps)
