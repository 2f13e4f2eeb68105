"""Run the OpenAI driver in this process over in-memory pipes, through the real harness.

The frames, the harness, the HTTP client, the fake server's sockets and the MCP server
subprocesses are all real; only the driver's stdin/stdout are memory streams, so a test does
not pay a Python start-up per driver. The conformance and daemon tests run it as a subprocess.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio
import trio.testing

from hostd_openai.driver import OpenAIDriver
from hostd_protocol.common import (
    PROTOCOL_VERSION,
    Attachment,
    HistoryMessage,
    TextDelta,
    ToolCall,
    ToolResult,
)
from hostd_protocol.driver_harness import serve_driver
from hostd_protocol.driver_messages import (
    ApprovalRequest,
    ApprovalResponse,
    ChunkEvent,
    DriverEvent,
    HostCommand,
    Init,
    Ready,
    Send,
    TurnEnd,
)
from hostd_protocol.framing import Codec, MessageReader

REPO = Path(__file__).resolve().parents[2]


def tools_server(state: Path, **extra: Any) -> dict[str, Any]:
    """MCP config of tests/fakes/mcp_test_server.py (a real stdio server)."""
    return {
        "command": sys.executable,
        "args": ["-m", "tests.fakes.mcp_test_server", "--state", str(state)],
        "cwd": str(REPO),
        **extra,
    }


def time_server(**extra: Any) -> dict[str, Any]:
    """MCP config of `mcp-server-time` from PyPI."""
    return {
        "command": sys.executable,
        "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"],
        **extra,
    }


class Peer:
    """The host's end of an in-process driver."""

    def __init__(self, to_driver: trio.abc.SendStream, from_driver: trio.abc.ReceiveStream):
        self.to_driver = to_driver
        self.from_driver = from_driver
        self.codec: Codec[HostCommand] = Codec(HostCommand)
        self.reader: MessageReader[DriverEvent] = MessageReader(Codec(DriverEvent))
        self.pending: list[Any] = []
        self.log: list[Any] = []
        #: The driver object itself (this process), for tests that wait on its MCP servers.
        self.driver: OpenAIDriver | None = None

    async def send(self, cmd: HostCommand) -> None:
        await self.to_driver.send_all(self.codec.encode_frame(cmd))

    async def recv(self) -> Any:
        while not self.pending:
            data = await self.from_driver.receive_some(65536)
            if not data:
                raise AssertionError("the driver closed its output")
            self.pending.extend(self.reader.feed(data))
        event = self.pending.pop(0)
        self.log.append(event)
        return event

    async def until(self, stop: Callable[[Any], bool]) -> list[Any]:
        got = []
        while True:
            got.append(await self.recv())
            if stop(got[-1]):
                return got

    async def turn(
        self,
        turn_id: str,
        text: str,
        *,
        history: list[HistoryMessage] | None = None,
        on_event: Callable[[Any], Any] | None = None,
        traceparent: str = "",
        attachments: list[Attachment] | None = None,
    ) -> list[Any]:
        await self.send(
            Send(
                turn_id=turn_id, text=text, history=history or [], traceparent=traceparent,
                attachments=attachments or [],
            )
        )
        got: list[Any] = []
        while True:
            event = await self.recv()
            got.append(event)
            if on_event is not None:
                result = on_event(event)
                if hasattr(result, "__await__"):
                    await result
            if isinstance(event, TurnEnd) and event.turn_id == turn_id:
                return got

    async def answer(self, request: ApprovalRequest, allow: bool, reason: str = "") -> None:
        await self.send(
            ApprovalResponse(approval_id=request.approval_id, allow=allow, reason=reason)
        )


@asynccontextmanager
async def driver(
    base_url: str,
    *,
    model: str = "fake-model",
    system_prompt: str = "",
    report_model_calls: bool = False,
    **options: Any,
) -> AsyncIterator[tuple[Peer, Ready]]:
    """A handshaken in-process driver; closed (and its MCP servers ended) on exit.
    `report_model_calls`: as a tracing host asks."""
    to_driver, driver_stdin = trio.testing.memory_stream_one_way_pair()
    driver_stdout, from_driver = trio.testing.memory_stream_one_way_pair()
    peer = Peer(to_driver, from_driver)
    # Tests want their MCP servers in the first turn, however loaded the machine: the wait
    # ends once each server made its first attempt (the 2 s default is a latency bound).
    options = {"base_url": base_url, "api_key_env": "", "mcp_startup_wait": 30, **options}
    async with trio.open_nursery() as outer:

        async def serve(task_status: trio.TaskStatus[OpenAIDriver]) -> None:
            async with trio.open_nursery() as nursery:
                the_driver = OpenAIDriver(nursery)
                task_status.started(the_driver)
                await serve_driver(the_driver, driver_stdin, driver_stdout)
                nursery.cancel_scope.cancel()
            await driver_stdout.aclose()

        peer.driver = await outer.start(serve)
        await peer.send(
            Init(
                protocol_version=PROTOCOL_VERSION,
                model=model,
                system_prompt=system_prompt,
                options=options,
                report_model_calls=report_model_calls,
            )
        )
        ready = await peer.recv()
        try:
            yield peer, ready
        finally:
            with trio.CancelScope(shield=True), trio.fail_after(15):
                await to_driver.aclose()  # EOF: the harness ends the session
                # Drain until the driver is done so its writer never blocks on us.
                try:
                    while await from_driver.receive_some(65536):
                        pass
                except trio.ClosedResourceError:
                    pass


def text_of(events: list[Any]) -> str:
    return "".join(
        e.chunk.text for e in events if isinstance(e, ChunkEvent) and isinstance(e.chunk, TextDelta)
    )


def chunks(events: list[Any], kind: type) -> list[Any]:
    return [e.chunk for e in events if isinstance(e, ChunkEvent) and isinstance(e.chunk, kind)]


def tool_calls(events: list[Any]) -> list[ToolCall]:
    return chunks(events, ToolCall)


def tool_results(events: list[Any]) -> list[ToolResult]:
    return chunks(events, ToolResult)


def end_of(events: list[Any]) -> TurnEnd:
    assert isinstance(events[-1], TurnEnd), events[-1]
    return events[-1]
