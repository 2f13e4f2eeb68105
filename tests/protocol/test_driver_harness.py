"""The driver harness: handshake, one TurnEnd per turn, steering, approvals, bad input."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import msgspec
import pytest
import trio
import trio.testing

from hostd_protocol.common import PROTOCOL_VERSION, Capabilities, TextDelta, TurnStatus
from hostd_protocol.driver_harness import DriverBase, TurnContext, TurnFailed, serve_driver
from hostd_protocol.driver_messages import (
    ApprovalRequest,
    ApprovalResponse,
    ApprovalWithdrawn,
    ChunkEvent,
    Close,
    DriverEvent,
    DriverFatal,
    HostCommand,
    Init,
    Interrupt,
    Log,
    ModelCallEnd,
    ModelCallStart,
    Ready,
    Redirect,
    Send,
    SteerBoundary,
    SteerInjected,
    SteerUndelivered,
    TurnEnd,
)
from hostd_protocol.framing import Codec, MessageReader


class EchoDriver(DriverBase):
    """Test driver whose behaviour is picked by the turn text."""

    name = "echo"
    version = "1"

    def __init__(self) -> None:
        self.gate = trio.Event()
        self.closed = False

    async def init(self, init: Init) -> Capabilities:
        if init.options.get("refuse"):
            raise TurnFailed("no credentials configured", driver="echo")
        return Capabilities(inject_steering=True, approvals=True)

    async def run_turn(self, turn: TurnContext) -> TurnStatus | None:
        text = turn.send.text
        if text == "boom":
            raise RuntimeError("kaput")
        if text == "fail":
            raise TurnFailed("vendor said no", driver="echo")
        if text == "wait":
            await turn.chunk(TextDelta(text="partial"))
            await trio.sleep_forever()
        if text == "steer":
            await turn.chunk(TextDelta(text="a1"))
            await self.gate.wait()
            steers = await turn.take_steers()
            await turn.message_start()
            await turn.chunk(TextDelta(text="a2:" + ",".join(s.text for s in steers)))
            return None
        if text == "model":
            call = await turn.model_call_start("m-1", "acme")
            await turn.chunk(TextDelta(text=turn.traceparent or "no trace"))
            await turn.model_call_end(call, finish_reason="stop")
            return None
        if text == "approve-briefly":  # the vendor takes its question back after a while
            with trio.move_on_after(1) as scope:
                await turn.request_approval(
                    "Bash",
                    {},
                    why_withdrawn=lambda: f"vendor gone, timed out: {scope.cancel_called}",
                )
            await turn.chunk(TextDelta(text="moved on"))
            return None
        if text == "approve":
            answer = await turn.request_approval("Bash", {"command": "ls"})
            await turn.chunk(TextDelta(text=f"allow={answer.allow}"))
            return None
        await turn.chunk(TextDelta(text=text))
        return None

    async def close(self) -> None:
        self.closed = True


class Peer:
    """The host's side of a harness under test."""

    def __init__(self, to_driver: trio.abc.SendStream, from_driver: trio.abc.ReceiveStream):
        self.out: Codec[HostCommand] = Codec(HostCommand)
        self.reader: MessageReader[DriverEvent] = MessageReader(Codec(DriverEvent))
        self.to_driver = to_driver
        self.from_driver = from_driver
        self.pending: list[Any] = []

    async def send(self, cmd: HostCommand) -> None:
        await self.to_driver.send_all(self.out.encode_frame(cmd))

    async def recv(self) -> Any:
        while not self.pending:
            data = await self.from_driver.receive_some()
            assert data, "driver closed its output"
            self.pending.extend(self.reader.feed(data))
        return self.pending.pop(0)

    async def until(self, kind: type[Any]) -> list[Any]:
        got = []
        while True:
            ev = await self.recv()
            got.append(ev)
            if isinstance(ev, kind):
                return got


@asynccontextmanager
async def running(driver: DriverBase) -> AsyncIterator[tuple[Peer, list[int]]]:
    host_to_drv_send, host_to_drv_recv = trio.testing.memory_stream_one_way_pair()
    drv_to_host_send, drv_to_host_recv = trio.testing.memory_stream_one_way_pair()
    codes: list[int] = []

    async def run() -> None:
        codes.append(await serve_driver(driver, host_to_drv_recv, drv_to_host_send))

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run)
            yield Peer(host_to_drv_send, drv_to_host_recv), codes
            await host_to_drv_send.aclose()


INIT = Init(protocol_version=PROTOCOL_VERSION, model="m")


async def test_handshake_and_turn() -> None:
    driver = EchoDriver()
    async with running(driver) as (peer, codes):
        await peer.send(INIT)
        ready = await peer.recv()
        assert ready == Ready(
            protocol_version=PROTOCOL_VERSION,
            driver="echo",
            version="1",
            capabilities=Capabilities(inject_steering=True, approvals=True),
            model="m",
        )
        await peer.send(Send(turn_id="t1", text="hi"))
        assert await peer.until(TurnEnd) == [
            ChunkEvent(turn_id="t1", chunk=TextDelta(text="hi")),
            TurnEnd(turn_id="t1", status="success"),
        ]
        await peer.send(Close())
    assert codes == [0]
    assert driver.closed


async def test_first_command_must_be_init() -> None:
    async with running(EchoDriver()) as (peer, codes):
        await peer.send(Send(turn_id="t1", text="hi"))
        fatal = await peer.recv()
        assert isinstance(fatal, DriverFatal)
        assert fatal.code == "handshake_error"
        assert fatal.message == "expected init as the first command, got Send"
    assert codes == [2]


async def test_version_mismatch_is_fatal_and_clear() -> None:
    async with running(EchoDriver()) as (peer, codes):
        await peer.send(Init(protocol_version=(99, 0)))
        fatal = await peer.recv()
        assert fatal.code == "version_mismatch"
        assert "install matching versions" in fatal.message
    assert codes == [2]


async def test_refused_init() -> None:
    async with running(EchoDriver()) as (peer, codes):
        await peer.send(Init(protocol_version=PROTOCOL_VERSION, options={"refuse": True}))
        fatal = await peer.recv()
        assert fatal == DriverFatal(code="driver_turn_error", message="no credentials configured")
    assert codes == [2]


async def test_garbage_from_host_is_fatal() -> None:
    async with running(EchoDriver()) as (peer, codes):
        await peer.to_driver.send_all(b"\xff\xff\xff\xff")
        fatal = await peer.recv()
        assert fatal.code == "frame_too_large"
    assert codes == [2]


@pytest.mark.parametrize(
    ("text", "code", "message"),
    [
        ("boom", "driver_error", "driver bug: RuntimeError: kaput"),
        ("fail", "driver_turn_error", "vendor said no"),
    ],
)
async def test_exceptions_end_the_turn_once(text: str, code: str, message: str) -> None:
    async with running(EchoDriver()) as (peer, _):
        await peer.send(INIT)
        await peer.recv()
        await peer.send(Send(turn_id="t1", text=text))
        end = (await peer.until(TurnEnd))[-1]
        assert end == TurnEnd(turn_id="t1", status="error", error=message, error_code=code)
        # The session is still usable.
        await peer.send(Send(turn_id="t2", text="again"))
        assert (await peer.until(TurnEnd))[-1].status == "success"


async def test_interrupt_stops_with_partial_kept_by_host() -> None:
    async with running(EchoDriver()) as (peer, _):
        await peer.send(INIT)
        await peer.recv()
        await peer.send(Send(turn_id="t1", text="wait"))
        assert await peer.recv() == ChunkEvent(turn_id="t1", chunk=TextDelta(text="partial"))
        await peer.send(Interrupt(turn_id="t1"))
        assert await peer.recv() == TurnEnd(turn_id="t1", status="stopped")


async def test_second_send_while_busy_is_refused_for_that_turn_only() -> None:
    async with running(EchoDriver()) as (peer, _):
        await peer.send(INIT)
        await peer.recv()
        await peer.send(Send(turn_id="t1", text="wait"))
        await peer.recv()
        await peer.send(Send(turn_id="t2", text="hi"))
        end = await peer.recv()
        assert (end.turn_id, end.status, end.error_code) == ("t2", "error", "topic_busy")
        await peer.send(Interrupt(turn_id="t1"))
        assert (await peer.recv()).turn_id == "t1"


async def test_steer_injected_then_boundary() -> None:
    driver = EchoDriver()
    async with running(driver) as (peer, _):
        await peer.send(INIT)
        await peer.recv()
        await peer.send(Send(turn_id="t1", text="steer"))
        await peer.recv()  # a1
        await peer.send(Redirect(turn_id="t1", steer_id="s1", text="also this"))
        await trio.testing.wait_all_tasks_blocked()
        driver.gate.set()
        assert await peer.until(TurnEnd) == [
            SteerInjected(turn_id="t1", steer_id="s1"),
            SteerBoundary(turn_id="t1", steer_ids=["s1"]),
            ChunkEvent(turn_id="t1", chunk=TextDelta(text="a2:also this")),
            TurnEnd(turn_id="t1", status="success"),
        ]


async def test_steer_pending_at_turn_end_is_undelivered() -> None:
    driver = EchoDriver()
    async with running(driver) as (peer, _):
        await peer.send(INIT)
        await peer.recv()
        await peer.send(Send(turn_id="t1", text="wait"))
        await peer.recv()
        await peer.send(Redirect(turn_id="t1", steer_id="s1", text="late"))
        await peer.send(Interrupt(turn_id="t1"))
        assert await peer.until(TurnEnd) == [
            SteerUndelivered(turn_id="t1", steer_ids=["s1"]),
            TurnEnd(turn_id="t1", status="stopped"),
        ]
        # A steer for a turn that is no longer running comes straight back.
        await peer.send(Redirect(turn_id="t1", steer_id="s2", text="later"))
        assert await peer.recv() == SteerUndelivered(turn_id="t1", steer_ids=["s2"])


@pytest.mark.parametrize("allow", [True, False])
async def test_approval_round_trip(allow: bool) -> None:
    async with running(EchoDriver()) as (peer, _):
        await peer.send(INIT)
        await peer.recv()
        await peer.send(Send(turn_id="t1", text="approve"))
        req = await peer.recv()
        assert isinstance(req, ApprovalRequest)
        assert (req.tool, req.input) == ("Bash", {"command": "ls"})
        await peer.send(ApprovalResponse(approval_id=req.approval_id, allow=allow))
        events = await peer.until(TurnEnd)
        assert events[0] == ChunkEvent(turn_id="t1", chunk=TextDelta(text=f"allow={allow}"))


@pytest.mark.parametrize("host", [PROTOCOL_VERSION, (1, 6)])
async def test_an_approval_nobody_answered_is_withdrawn_from_a_host_that_knows_how(
    host: tuple[int, int], autojump_clock: trio.testing.MockClock
) -> None:
    async with running(EchoDriver()) as (peer, _):
        await peer.send(msgspec.structs.replace(INIT, protocol_version=host))
        await peer.recv()
        await peer.send(Send(turn_id="t1", text="approve-briefly"))
        req = await peer.recv()
        assert isinstance(req, ApprovalRequest)
        events = await peer.until(TurnEnd)
        withdrawn = [
            ApprovalWithdrawn(
                turn_id="t1", approval_id=req.approval_id, reason="vendor gone, timed out: True"
            )
        ]
        assert events[:-2] == (withdrawn if host >= (1, 7) else [])  # 1.6 would not know it
        assert events[-2:] == [
            ChunkEvent(turn_id="t1", chunk=TextDelta(text="moved on")),
            TurnEnd(turn_id="t1", status="success"),
        ]
        # A late answer finds nothing to answer (logged, no second result).
        await peer.send(ApprovalResponse(approval_id=req.approval_id, allow=True))
        assert isinstance(await peer.recv(), Log)


async def test_interrupt_denies_open_approval() -> None:
    async with running(EchoDriver()) as (peer, _):
        await peer.send(INIT)
        await peer.recv()
        await peer.send(Send(turn_id="t1", text="approve"))
        await peer.recv()
        await peer.send(Interrupt(turn_id="t1"))
        events = await peer.until(TurnEnd)
        assert events[-1].status == "stopped"


async def test_eof_from_host_ends_the_driver() -> None:
    driver = EchoDriver()
    async with running(driver) as (peer, codes):
        await peer.send(INIT)
        await peer.recv()
        await peer.send(Send(turn_id="t1", text="wait"))
        await peer.recv()
    assert codes == [0]
    assert driver.closed


class FloodDriver(DriverBase):
    """Emits `n` chunks as fast as the harness takes them (never yields by itself)."""

    name = "flood"
    version = "1"

    def __init__(self, n: int) -> None:
        self.n = n
        self.emitted = 0

    async def run_turn(self, turn: TurnContext) -> TurnStatus | None:
        for i in range(self.n):
            await turn.chunk(TextDelta(text=f"{i}:" + "w" * 500))
            self.emitted += 1
        return None


async def test_a_host_that_stops_reading_makes_the_driver_wait_and_loses_nothing() -> None:
    """Over a real pipe (the driver's stdout as `run_driver` has it)."""
    to_driver, driver_stdin = trio.testing.memory_stream_one_way_pair()
    rfd, wfd = os.pipe()
    os.set_blocking(rfd, False)
    driver = FloodDriver(2000)  # about 1 MB of frames: far more than the pipe holds
    reader: MessageReader[DriverEvent] = MessageReader(Codec(DriverEvent))
    got: list[Any] = []

    async def read_until(kind: type[Any]) -> None:
        while not (got and isinstance(got[-1], kind)):
            await trio.lowlevel.wait_readable(rfd)
            while True:
                try:
                    data = os.read(rfd, 65536)
                except BlockingIOError:
                    break
                got.extend(reader.feed(data))

    peer = Peer(to_driver, trio.testing.memory_stream_one_way_pair()[1])
    try:
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(serve_driver, driver, driver_stdin, trio.lowlevel.FdStream(wfd))
                await peer.send(INIT)
                await read_until(Ready)
                await peer.send(Send(turn_id="t1", text="go"))
                await trio.testing.wait_all_tasks_blocked()
                assert 0 < driver.emitted < driver.n  # waiting for the host to read
                await read_until(TurnEnd)
                await peer.send(Close())
    finally:
        os.close(rfd)
    # Deltas of one pass may arrive merged (`driver_output`): the text is what was emitted.
    chunks = [ev.chunk.text for ev in got[1:-1]]
    assert 1 < len(chunks) <= driver.n
    assert "".join(chunks) == "".join(f"{i}:" + "w" * 500 for i in range(driver.n))
    assert got[-1] == TurnEnd(turn_id="t1", status="success")


async def test_model_calls_are_reported_only_to_a_host_that_asked() -> None:
    """`model_call_start` / `model_call_end` cost a driver nothing unless the host's `Init`
    asked for them (a tracing host); the turn's trace context is `turn.traceparent`."""
    tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    async with running(EchoDriver()) as (peer, _):
        await peer.send(INIT)
        await peer.recv()
        await peer.send(Send(turn_id="t1", text="model"))
        assert await peer.until(TurnEnd) == [
            ChunkEvent(turn_id="t1", chunk=TextDelta(text="no trace")),
            TurnEnd(turn_id="t1", status="success"),
        ]
        await peer.send(Close())
    async with running(EchoDriver()) as (peer, _):
        await peer.send(Init(protocol_version=PROTOCOL_VERSION, model="m", report_model_calls=True))
        await peer.recv()
        await peer.send(Send(turn_id="t2", text="model", traceparent=tp))
        assert await peer.until(TurnEnd) == [
            ModelCallStart(turn_id="t2", call_id="m1", model="m-1", provider="acme"),
            ChunkEvent(turn_id="t2", chunk=TextDelta(text=tp)),
            ModelCallEnd(turn_id="t2", call_id="m1", finish_reason="stop"),
            TurnEnd(turn_id="t2", status="success"),
        ]
        await peer.send(Close())
