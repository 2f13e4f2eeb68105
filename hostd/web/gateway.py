"""The `hostd web` gateway: a Starlette app served by Hypercorn's trio worker on 127.0.0.1.

Why this stack: Starlette is a small, well-kept ASGI toolkit on anyio, so it runs on trio like
the rest of hostd (the bridge uses trio directly); Hypercorn is the maintained ASGI server with
a native trio worker (h11 + wsproto underneath, the same sans-IO libraries STYLE.md names).
Static files, WebSockets and HTTP come from one process and one port.

Routes: `/ws` bridges one WebSocket to one daemon connection (`hostd.web.bridge`); everything
else is the built page (`hostd/web/static`, produced by `scripts/setup` from `hostd/web/page`).
`TokenGate` (`hostd.web.security`) guards all of it.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import trio
from hypercorn.config import Config
from hypercorn.trio import serve
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles
from starlette.websockets import WebSocket

from hostd.shell.paths import Paths
from hostd.web import STATIC_DIR  # the built page (one place for the folder)
from hostd.web.bridge import BridgeConfig, bridge_websocket
from hostd.web.security import Guard, TokenGate, new_token, remove_token_file, write_token_file

LOOPBACK = "127.0.0.1"


@dataclass
class Gateway:
    """One running gateway: where it listens and the URL (with the token) to open."""

    port: int
    token: str
    token_file: Path | None = None

    @property
    def base_url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.base_url}/?token={self.token}"


def build_app(guard: Guard, bridge: BridgeConfig, static_dir: Path = STATIC_DIR) -> TokenGate:
    """The ASGI app: routes wrapped in the token gate (nothing runs before the gate)."""

    async def ws_endpoint(websocket: WebSocket) -> None:
        await bridge_websocket(websocket, bridge)

    async def not_built(request: Request) -> Response:
        return PlainTextResponse(
            "hostd web: the page is not built; run scripts/setup (needs Node.js and npm)\n",
            status_code=503,
        )

    routes: list[Route | WebSocketRoute | Mount] = [WebSocketRoute("/ws", ws_endpoint)]
    if (static_dir / "index.html").is_file():
        routes.append(Mount("/", app=StaticFiles(directory=static_dir, html=True)))
    else:
        routes.append(Route("/{path:path}", not_built))
    return TokenGate(Starlette(routes=routes), guard)


async def serve_gateway(
    paths: Paths,
    *,
    port: int = 0,
    autostart: bool = False,
    token: str | None = None,
    token_file: Path | None = None,
    static_dir: Path = STATIC_DIR,
    task_status: trio.TaskStatus[Gateway] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve until cancelled (or until SIGINT/SIGTERM when run by the command).

    `started()` is called with the `Gateway` once the port listens and the token file (mode
    0600) is written; the token file is removed on the way out while it still names this
    gateway (a `hostd web` started later on the same home wrote its own and is still running).
    """
    token = token or new_token()
    # The port is known only after binding (port 0 = a free one); the guard learns it then,
    # before anything can have connected (the URL is not out yet).
    guard = Guard(token, port)
    app = build_app(guard, BridgeConfig(paths=paths, autostart=autostart), static_dir)
    config = Config()
    config.bind = [f"{LOOPBACK}:{port}"]
    config.accesslog = None
    config.loglevel = "WARNING"
    config.graceful_timeout = 2.0
    # Hypercorn's own ping keeps idle WebSockets alive through nothing in between; not needed.
    config.websocket_ping_interval = None
    logging.getLogger("hypercorn.error").setLevel(logging.WARNING)
    async with trio.open_nursery() as nursery:
        binds: list[str] = await nursery.start(serve, app, config)
        guard.port = int(binds[0].rsplit(":", 1)[1])
        gateway = Gateway(port=guard.port, token=token, token_file=token_file)
        try:
            if token_file is not None:
                write_token_file(token_file, gateway.url)
            task_status.started(gateway)
            await trio.sleep_forever()
        finally:
            nursery.cancel_scope.cancel()
            if token_file is not None:
                remove_token_file(token_file, gateway.url)


async def run_until_signal(
    paths: Paths,
    *,
    port: int,
    autostart: bool,
    token_file: Path,
    on_ready: Callable[[Gateway], None],
    token: str | None = None,
) -> None:
    """Run the gateway until SIGINT or SIGTERM (the command's main)."""
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            gateway: Gateway = await nursery.start(
                partial(serve_gateway, paths, port=port, autostart=autostart, token=token,
                        token_file=token_file)
            )
            on_ready(gateway)
            async for _ in signals:
                nursery.cancel_scope.cancel()
                break
