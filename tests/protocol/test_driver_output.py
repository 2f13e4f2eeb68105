"""The driver harness's output (`hostd_protocol.driver_output.FrameOutput`), over a real pipe
(a driver's stdout) and over trio test streams: emit order across tasks, one write per
scheduler pass, backpressure without loss, frames never split, a host that is gone."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import pytest
import trio
import trio.testing

from hostd_protocol.common import TextDelta, ToolCall, ToolResult, Usage
from hostd_protocol.driver_messages import (
    ChunkEvent,
    DriverEvent,
    Log,
    SteerBoundary,
    TurnEnd,
    UsageEvent,
)
from hostd_protocol.driver_output import FLUSH_AT, FrameOutput
from hostd_protocol.errors import FrameTooLarge
from hostd_protocol.framing import Codec, MessageReader

CODEC: Codec[DriverEvent] = Codec(DriverEvent)


def chunk(text: str, turn: str = "t1") -> ChunkEvent:
    return ChunkEvent(turn_id=turn, chunk=TextDelta(text=text))


@contextmanager
def pipe() -> Iterator[tuple[trio.lowlevel.FdStream, int]]:
    """(the driver's stdout as harnesses get it, the host's read end: non-blocking fd)."""
    r, w = os.pipe()
    os.set_blocking(r, False)
    stream = trio.lowlevel.FdStream(w)
    try:
        yield stream, r
    finally:
        os.close(r)


@asynccontextmanager
async def serving(
    stream: trio.abc.SendStream, codec: Codec[Any] = CODEC
) -> AsyncIterator[FrameOutput]:
    out = FrameOutput(stream, codec)
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            await nursery.start(out.serve)
            try:
                yield out
            finally:
                with trio.CancelScope(shield=True):
                    await out.aclose()


class Host:
    """The host's side of the pipe: reads and decodes what is there (never blocks)."""

    def __init__(self, fd: int, read_size: int = 65536) -> None:
        self.fd = fd
        self.read_size = read_size
        self.reader: MessageReader[DriverEvent] = MessageReader(CODEC)
        self.events: list[Any] = []

    def read_available(self) -> int:
        """Read until the pipe is empty; returns the bytes read."""
        total = 0
        while True:
            try:
                data = os.read(self.fd, self.read_size)
            except BlockingIOError:
                return total
            total += len(data)
            self.events.extend(self.reader.feed(data))

    async def read_until(self, n: int) -> list[Any]:
        """Read (waiting for the pipe) until `n` events arrived."""
        while len(self.events) < n:
            await trio.lowlevel.wait_readable(self.fd)
            self.read_available()
        return self.events


async def test_events_of_one_pass_leave_in_one_write_and_decode_identically() -> None:
    events: list[DriverEvent] = [
        chunk("a"),
        ChunkEvent(turn_id="t1", chunk=ToolCall(call_id="c1", name="Read", input={"p": [1, 2]})),
        ChunkEvent(turn_id="t1", chunk=ToolResult(call_id="c1", output="x" * 3000)),
        SteerBoundary(turn_id="t1", steer_ids=["s1", "s2"]),
        UsageEvent(turn_id="t1", usage=Usage(input_tokens=3, output_tokens=5)),
        Log(level="info", message="é ü 漢字"),
        TurnEnd(turn_id="t1", status="success"),
    ]
    with pipe() as (stream, rfd):
        host = Host(rfd)
        async with serving(stream) as out:
            before = out.statistics()
            for ev in events:  # no checkpoint in between: one scheduler pass
                await out.send(ev)
            assert out.statistics().writes == before.writes  # nothing written mid-pass
            await trio.lowlevel.checkpoint()  # the pass ends here
            after = out.statistics()
            assert after.writes == before.writes + 1
            assert after.pending == 0
            host.read_available()
            assert host.events == events


async def test_order_across_tasks_is_the_order_of_send() -> None:
    sent: list[DriverEvent] = []
    with pipe() as (stream, rfd):
        host = Host(rfd, read_size=1000)
        async with serving(stream) as out:

            async def producer(name: str, n: int) -> None:
                for i in range(n):
                    ev = chunk(f"{name}{i}" + "y" * (i * 37 % 500))
                    sent.append(ev)
                    await out.send(ev)
                    if i % 3 == 0:
                        await trio.lowlevel.checkpoint()

            async with trio.open_nursery() as nursery:
                for name in "abcd":
                    nursery.start_soon(producer, name, 300)
                nursery.start_soon(host.read_until, 1200)
        assert host.events == sent


async def test_a_host_that_stops_reading_stops_the_emitter_and_loses_nothing() -> None:
    frame_text = "z" * 1000
    total = 1000  # about 1 MB: far more than the pipe and the buffer hold
    done: list[int] = []
    with pipe() as (stream, rfd):
        host = Host(rfd)
        async with serving(stream) as out:

            async def producer() -> None:
                for i in range(total):
                    await out.send(chunk(f"{i}:{frame_text}"))
                    done.append(i)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(producer)
                await trio.testing.wait_all_tasks_blocked()
                # The host has read nothing: the producer waits, its buffer is bounded.
                assert 0 < len(done) < total
                stats = out.statistics()
                assert 0 < stats.pending <= FLUSH_AT + 1100
                assert stats.bytes_written > 0  # the pipe itself is full
                await host.read_until(total)
        assert done == list(range(total))
        assert [e.chunk.text for e in host.events] == [f"{i}:{frame_text}" for i in range(total)]


async def test_a_frame_larger_than_the_pipe_is_never_split_by_other_frames() -> None:
    big = "B" * (300 * 1024)
    with pipe() as (stream, rfd):
        host = Host(rfd, read_size=4096)  # a slow host: small reads
        async with serving(stream) as out:
            sent: list[DriverEvent] = []

            async def small(n: int) -> None:
                for i in range(n):
                    ev = chunk(f"s{i}")
                    sent.append(ev)
                    await out.send(ev)
                    await trio.lowlevel.checkpoint()

            async def large() -> None:
                for i in range(3):
                    ev = chunk(f"{i}{big}")
                    sent.append(ev)
                    await out.send(ev)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(small, 200)
                nursery.start_soon(large)
                nursery.start_soon(host.read_until, 203)
        assert host.events == sent


async def test_a_host_that_is_gone_does_not_fail_the_emitter() -> None:
    r, w = os.pipe()
    async with serving(trio.lowlevel.FdStream(w)) as out:
        await out.send(chunk("before"))
        await trio.lowlevel.checkpoint()
        os.close(r)  # the host is gone: writes fail with EPIPE from now on
        for i in range(2000):  # more than the pipe could ever hold
            await out.send(chunk(f"after {i} " + "x" * 100))
        await out.send(TurnEnd(turn_id="t1", status="success"))
        await trio.lowlevel.checkpoint()
        stats = out.statistics()
        assert stats.broken
        assert stats.pending == 0
        assert stats.frames == 2002


async def test_send_after_aclose_raises_closed() -> None:
    with pipe() as (stream, rfd):
        async with serving(stream) as out:
            await out.send(chunk("last"))
        host = Host(rfd)
        host.read_available()
        assert host.events == [chunk("last")]
        with pytest.raises(trio.ClosedResourceError, match=r"^the driver's output is closed$"):
            await out.send(chunk("late"))


async def test_an_oversized_event_is_refused_alone() -> None:
    small_codec: Codec[DriverEvent] = Codec(DriverEvent, max_frame_size=200)
    with pipe() as (stream, rfd):
        host = Host(rfd)
        async with serving(stream, small_codec) as out:
            await out.send(chunk("ok 1"))
            with pytest.raises(FrameTooLarge):
                await out.send(chunk("x" * 500))
            await out.send(chunk("ok 2"))
            await trio.lowlevel.checkpoint()
            host.read_available()
        assert host.events == [chunk("ok 1"), chunk("ok 2")]


async def test_a_stream_without_a_file_descriptor_is_written_by_the_writer_task() -> None:
    # A lockstep stream: `send_all` returns only once the receiver took the bytes, so a
    # receiver that does not read is a host that stops reading.
    send_stream, recv_stream = trio.testing.lockstep_stream_one_way_pair()
    reader: MessageReader[DriverEvent] = MessageReader(CODEC)
    got: list[Any] = []
    sent = [chunk(f"{i}:" + "q" * 1000) for i in range(100)]
    done: list[int] = []
    async with serving(send_stream) as out:

        async def producer() -> None:
            for i, ev in enumerate(sent):
                await out.send(ev)
                done.append(i)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(producer)
            await trio.testing.wait_all_tasks_blocked()
            assert 0 < len(done) < len(sent)  # waiting for the reader
            while len(got) < len(sent):
                got.extend(reader.feed(await recv_stream.receive_some()))
    assert got == sent
    assert done == list(range(len(sent)))
