"""One browser WebSocket <-> one daemon connection, frame for frame.

Rules this module guards:

- Each WebSocket TEXT message is exactly one JSON frame body, both ways: the bridge adds the
  4-byte length prefix towards the daemon and strips it towards the browser. It never parses
  or rewrites a message; the daemon stays the only judge of what a message means.
- The daemon picks the connection's encoding from the first byte of the first frame, so a
  message that does not start with `{` (or a binary message) would switch it to msgpack: the
  bridge refuses such messages and closes the WebSocket (1003) instead of forwarding them.
  A message over the daemon's maximum frame size closes it with 1009.
- Either side ending ends both: when the daemon closes (or cannot be reached) the WebSocket
  is closed with code 4001 or 4002 and a one-line reason, and the page reconnects with
  `attach since`; when the browser goes, the daemon connection is closed.
"""

from __future__ import annotations

from dataclasses import dataclass

import trio
from starlette.websockets import WebSocket, WebSocketDisconnect

from hostd.client.sync_wire import (
    ConnectRetry,
    DaemonNotRunning,
    connect_unix,
    not_running,
    start_daemon,
    unreachable,
)
from hostd.shell.paths import Paths
from hostd_protocol.errors import HostdError
from hostd_protocol.framing import DEFAULT_MAX_FRAME_SIZE, FrameDecoder, encode_frame

#: WebSocket close codes the page tells apart (4000-4999 are free for applications).
CLOSE_DAEMON_GONE = 4001
CLOSE_DAEMON_UNREACHABLE = 4002
CLOSE_UNSUPPORTED = 1003
CLOSE_TOO_BIG = 1009

#: A WebSocket close reason is at most 123 bytes of UTF-8.
MAX_REASON = 120


def short_reason(text: str) -> str:
    data = text.encode()
    if len(data) <= MAX_REASON:
        return text
    return data[: MAX_REASON - 3].decode(errors="ignore") + "..."


@dataclass(frozen=True)
class BridgeConfig:
    paths: Paths
    autostart: bool = False
    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE


async def open_daemon_stream(paths: Paths, *, autostart: bool) -> trio.SocketStream:
    """Connect to the daemon's socket (the same retry policy as the clients), starting the
    daemon first when `autostart` and nothing serves the socket."""
    retry = ConnectRetry(paths.socket_path, trio.current_time())
    started = False
    while True:
        try:
            sock = connect_unix(paths.socket_path)
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            delay = retry.next_delay(exc, trio.current_time())
            if delay is not None:
                await trio.sleep(delay)
                continue
            if not autostart or started:
                raise not_running(paths, unreachable(exc)) from None
            await trio.to_thread.run_sync(start_daemon, paths)
            started = True
            retry = ConnectRetry(paths.socket_path, trio.current_time())
            continue
        except OSError as exc:
            delay = retry.next_delay(exc, trio.current_time())
            if delay is None:
                raise retry.give_up(exc, paths) from None
            await trio.sleep(delay)
            continue
        return trio.SocketStream(trio.socket.from_stdlib_socket(sock))


class _Closed(Exception):
    """One side ended; carries how to close the WebSocket."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


async def bridge_websocket(websocket: WebSocket, config: BridgeConfig) -> None:
    """Serve one accepted-to-be WebSocket until either side ends."""
    await websocket.accept()
    try:
        stream = await open_daemon_stream(config.paths, autostart=config.autostart)
    except (DaemonNotRunning, HostdError, OSError) as exc:
        message = exc.message if isinstance(exc, HostdError) else str(exc)
        await websocket.close(CLOSE_DAEMON_UNREACHABLE, short_reason(message))
        return
    closed: _Closed | None = None
    async with stream:
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_browser_to_daemon, websocket, stream, config.max_frame_size)
                nursery.start_soon(_daemon_to_browser, websocket, stream, config.max_frame_size)
        except* _Closed as group:
            first = group.exceptions[0]
            assert isinstance(first, _Closed)
            closed = first
    if closed is not None and closed.code != 1000:
        try:
            await websocket.close(closed.code, short_reason(closed.reason))
        except (RuntimeError, WebSocketDisconnect):
            pass  # the browser is already gone: nothing to tell it


async def _browser_to_daemon(websocket: WebSocket, stream: trio.SocketStream, max_size: int) -> None:
    while True:
        message = await websocket.receive()
        if message["type"] == "websocket.disconnect":
            raise _Closed(1000, "browser closed")
        text = message.get("text")
        if text is None:
            raise _Closed(CLOSE_UNSUPPORTED, "binary messages are not accepted: send JSON text")
        body = text.encode()
        if not body.startswith(b"{"):
            raise _Closed(CLOSE_UNSUPPORTED, "each message must be one JSON object")
        if len(body) > max_size:
            raise _Closed(CLOSE_TOO_BIG, f"message over the maximum of {max_size} bytes")
        try:
            await stream.send_all(encode_frame(body, max_size))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            raise _Closed(CLOSE_DAEMON_GONE, "the daemon closed the connection") from None


async def _daemon_to_browser(websocket: WebSocket, stream: trio.SocketStream, max_size: int) -> None:
    decoder = FrameDecoder(max_size)
    while True:
        try:
            data = await stream.receive_some(65536)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            data = b""
        if not data:
            raise _Closed(CLOSE_DAEMON_GONE, "the daemon closed the connection")
        try:
            bodies = decoder.feed(data)
        except HostdError as exc:
            raise _Closed(CLOSE_DAEMON_GONE, f"bad frame from the daemon: {exc.message}") from None
        for body in bodies:
            try:
                await websocket.send_text(body.decode())
            except (WebSocketDisconnect, RuntimeError):
                raise _Closed(1000, "browser closed") from None
