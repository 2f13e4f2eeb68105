"""A small WebSocket client for the gateway tests: wsproto (sans-IO) over a trio TCP stream.

Not trio-websocket: it leaves its socket to the garbage collector when the server closes
first, which is exactly what these tests provoke (and `filterwarnings = error` reports).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import trio
from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Event,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)


@dataclass
class Closed(Exception):
    code: int
    reason: str


@dataclass
class Rejected(Exception):
    status: int
    body: bytes


class WebSocketClient:
    def __init__(self, stream: trio.SocketStream, ws: WSConnection) -> None:
        self.stream = stream
        self.ws = ws
        self._pending: list[Event] = []

    async def next_event(self) -> Event:
        while not self._pending:
            data = await self.stream.receive_some(65536)
            self.ws.receive_data(data or None)
            self._pending.extend(self.ws.events())
            if not data and not self._pending:
                raise Closed(1006, "connection lost")
        return self._pending.pop(0)

    async def send(self, message: str | bytes) -> None:
        event = TextMessage(data=message) if isinstance(message, str) else BytesMessage(data=message)
        await self.stream.send_all(self.ws.send(event))

    async def receive(self) -> str:
        """The next text message; raises `Closed` when the server closes."""
        text = ""
        while True:
            event = await self.next_event()
            if isinstance(event, TextMessage):
                text += event.data
                if event.message_finished:
                    return text
            elif isinstance(event, CloseConnection):
                try:
                    await self.stream.send_all(self.ws.send(event.response()))
                except trio.BrokenResourceError:
                    pass
                raise Closed(event.code, event.reason or "")


@asynccontextmanager
async def connect(port: int, target: str, headers: list[tuple[str, str]] | None = None) -> AsyncIterator[WebSocketClient]:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        ws = WSConnection(ConnectionType.CLIENT)
        await stream.send_all(ws.send(Request(
            host=f"127.0.0.1:{port}", target=target,
            extra_headers=[(k.encode(), v.encode()) for k, v in headers or []],
        )))
        client = WebSocketClient(stream, ws)
        status, body = 0, b""
        while True:
            event = await client.next_event()
            if isinstance(event, AcceptConnection):
                break
            if isinstance(event, RejectConnection):
                status = event.status_code
                if not event.has_body:
                    raise Rejected(status, b"")
            elif isinstance(event, RejectData):
                body += event.data
                if event.body_finished:
                    raise Rejected(status, body)
        yield client
