"""Paced reads of a driver's pipe (`hostd.shell.drivers.pipe_reader`): a stream written flat
out is taken in one read per pace whatever the scheduling, a write at a slower pace is read
at once, and the bytes come out exact and in order. On trio's mock clock (frozen unless a test
moves it), with a real pipe."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import trio
import trio.testing

from hostd.shell.drivers.pipe_reader import PipeReader, ReadPacer

PACE = 0.001


# --- the pacer (sans-IO) --------------------------------------------------------------------


BIG = 100


def test_a_read_that_waited_after_a_quiet_spell_is_not_paced() -> None:
    pacer = ReadPacer(PACE, BIG)
    assert pacer.read(10.0, 1, waited=True) == 10.0  # the first read
    assert pacer.read(10.5, 1, waited=True) == 10.5  # the next write came long after


def test_a_read_that_found_data_waiting_is_paced() -> None:
    pacer = ReadPacer(PACE, BIG)
    assert pacer.read(10.0, 1, waited=False) == 10.0 + PACE


def test_a_read_soon_after_the_previous_is_paced_even_when_it_waited() -> None:
    pacer = ReadPacer(PACE, BIG)
    pacer.read(10.0, 1, waited=True)
    assert pacer.read(10.0 + PACE / 4, 1, waited=True) == 10.0 + PACE / 4 + PACE


def test_a_big_read_is_not_paced() -> None:
    """A driver that writes many frames per write already gives big batches; pausing it
    would only stall it on a full pipe."""
    pacer = ReadPacer(PACE, BIG)
    assert pacer.read(10.0, BIG, waited=False) == 10.0
    assert pacer.read(10.0, BIG * 5, waited=True) == 10.0
    assert pacer.read(10.0, BIG - 1, waited=False) == 10.0 + PACE


# --- the reader, on a real pipe -------------------------------------------------------------


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    r, w = os.pipe()
    os.set_blocking(r, False)
    yield r, w
    for fd in (r, w):
        try:
            os.close(fd)
        except OSError:
            pass


class Receiver:
    """`PipeReader.receive` in a task of its own, so a test can see whether it returned."""

    def __init__(self, reader: PipeReader) -> None:
        self.reader = reader
        self.got: bytes | None = None

    async def run(self) -> None:
        self.got = await self.reader.receive()


async def test_a_stream_written_flat_out_is_read_once_per_pace_exact_and_in_order(
    mock_clock: trio.testing.MockClock, pipe: tuple[int, int]
) -> None:
    r, w = pipe
    reader = PipeReader(r, size=1 << 16, pace=PACE)
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            first = Receiver(reader)
            nursery.start_soon(first.run)
            await trio.testing.wait_all_tasks_blocked()
            t0 = trio.current_time()
            os.write(w, b"A")
            await trio.testing.wait_all_tasks_blocked()
            # A write after a quiet spell is read at once: the frozen clock did not move.
            assert first.got == b"A" and trio.current_time() == t0

            second = Receiver(reader)
            nursery.start_soon(second.run)
            await trio.testing.wait_all_tasks_blocked()
            os.write(w, b"B")
            await trio.testing.wait_all_tasks_blocked()
            # Hot (right after the previous read), yet read at once: pacing never holds
            # back the read that made the stream hot, only the reads after it.
            assert second.got == b"B" and trio.current_time() == t0

            third = Receiver(reader)
            nursery.start_soon(third.run)
            for part in (b"C", b"D", b"E"):
                os.write(w, part)
                await trio.testing.wait_all_tasks_blocked()
                assert third.got is None  # paced: waiting for the pace to pass
            mock_clock.jump(PACE)
            await trio.testing.wait_all_tasks_blocked()
            assert third.got == b"CDE"  # everything written meanwhile, in one read


async def test_a_write_at_a_slower_pace_is_read_at_once(
    mock_clock: trio.testing.MockClock, pipe: tuple[int, int]
) -> None:
    r, w = pipe
    reader = PipeReader(r, size=1 << 16, pace=PACE)
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            for i in range(5):
                rx = Receiver(reader)
                nursery.start_soon(rx.run)
                await trio.testing.wait_all_tasks_blocked()
                t = trio.current_time()
                os.write(w, b"%d" % i)
                await trio.testing.wait_all_tasks_blocked()
                assert rx.got == b"%d" % i and trio.current_time() == t
                mock_clock.jump(2 * PACE)  # the next write comes later than the pace


async def test_after_a_read_that_waited_data_already_there_is_read_without_delay(
    mock_clock: trio.testing.MockClock, pipe: tuple[int, int]
) -> None:
    """The next receive after a quiet read waits for the pipe first; bytes written before
    it was called are seen by the loop at once, exact, and a closed descriptor ends it."""
    r, w = pipe
    reader = PipeReader(r, size=1 << 16, pace=PACE)
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            rx = Receiver(reader)
            nursery.start_soon(rx.run)
            await trio.testing.wait_all_tasks_blocked()
            os.write(w, b"first")
            await trio.testing.wait_all_tasks_blocked()
            assert rx.got == b"first"
            mock_clock.jump(2 * PACE)  # quiet: the next receive waits for the pipe first
            os.write(w, b"second")
            os.write(w, b"third")
            t = trio.current_time()
            assert await reader.receive() == b"secondthird" and trio.current_time() == t
            mock_clock.jump(2 * PACE)
            os.close(w)
            assert await reader.receive() == b""


async def test_a_descriptor_closed_after_a_quiet_read_reads_as_the_end(
    mock_clock: trio.testing.MockClock, pipe: tuple[int, int]
) -> None:
    r, w = pipe
    reader = PipeReader(r, size=16, pace=PACE)
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            rx = Receiver(reader)
            nursery.start_soon(rx.run)
            await trio.testing.wait_all_tasks_blocked()
            os.write(w, b"x")
            await trio.testing.wait_all_tasks_blocked()
            assert rx.got == b"x"
        mock_clock.jump(2 * PACE)
        os.close(r)
        assert await reader.receive() == b""


async def test_a_read_that_fills_the_buffer_is_not_paced_and_the_end_reads_empty(
    autojump_clock: trio.testing.MockClock, pipe: tuple[int, int]
) -> None:
    r, w = pipe
    reader = PipeReader(r, size=4, pace=PACE)
    os.write(w, b"0123456789")
    os.close(w)
    got: list[bytes] = []
    with trio.fail_after(5):
        while data := await reader.receive():
            got.append(data)
    # The buffer-filling reads (big: the pacer's threshold is at most the buffer) went on
    # without the clock moving; the last (short) one found
    # its data waiting, so the end-of-file read came one pace later.
    assert got == [b"0123", b"4567", b"89"]
    assert trio.current_time() == pytest.approx(PACE)


async def test_a_closed_descriptor_reads_as_the_end(pipe: tuple[int, int]) -> None:
    r, _ = pipe
    reader = PipeReader(r, size=16, pace=PACE)
    os.close(r)
    with trio.fail_after(5):
        assert await reader.receive() == b""


async def test_reads_that_find_data_waiting_let_other_tasks_run(
    autojump_clock: trio.testing.MockClock, pipe: tuple[int, int]
) -> None:
    """A driver that writes faster than we read cannot hold the loop: every read that did
    not wait is followed by a yield before the next read, even an unpaced full one."""
    r, w = pipe
    reader = PipeReader(r, size=1, pace=PACE)
    os.write(w, b"x" * 50)
    os.close(w)
    ticks = 0
    done = False

    async def other() -> None:
        nonlocal ticks
        while not done:
            ticks += 1
            await trio.lowlevel.checkpoint()

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(other)
            reads = 0
            while await reader.receive():
                reads += 1
            done = True
    # Each read after the first was preceded by a pass of the loop, and `other` runs once in
    # every pass (a reader that never yielded would leave it at 0 until the end).
    assert reads == 50 and ticks >= reads - 1
