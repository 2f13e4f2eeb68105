"""The daemon's half of the loopback bridge: Unix sockets that relay to the host's loopback.

For a session whose sandbox policy is `network = "loopback"` with `ports = [...]`, the
supervisor runs one `LoopbackBridge` for the session's lifetime: a private folder (0700, in
the daemon's runtime dir) with one listening Unix socket per declared port, `<port>.sock`,
each relaying its connections to `127.0.0.1:<port>` on the host. The folder is bound into the
sandbox, where `hostd.shell.drivers.loopback_inside` listens on the sandbox's own
`127.0.0.1:<port>` and relays to those sockets. Only the declared ports of the host's
loopback are reachable; no other address, no other port.

With a credential proxy (`hostd.shell.drivers.credential_proxy`) the same folder also holds
`credential.sock`, the session's proxy to its vendor API; then a bridge runs with no
declared ports too (network `none`: the vendor API through the daemon is all there is).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Sequence
from typing import TYPE_CHECKING

import trio

from hostd.core.sandbox_policy import CREDENTIAL_SOCKET

if TYPE_CHECKING:
    from hostd.shell.drivers.credential_proxy import CredentialProxy

log = logging.getLogger(__name__)

BUFFER = 65536


async def _relay(a: trio.abc.Stream, b: trio.abc.Stream) -> None:
    async def one(src: trio.abc.Stream, dst: trio.abc.Stream) -> None:
        try:
            while data := await src.receive_some(BUFFER):
                await dst.send_all(data)
            if isinstance(dst, trio.SocketStream):
                await dst.send_eof()
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass

    async with a, b, trio.open_nursery() as nursery:
        nursery.start_soon(one, a, b)
        nursery.start_soon(one, b, a)


class LoopbackBridge:
    """Unix sockets in a private folder, each relaying to one port of the host's loopback."""

    def __init__(
        self,
        ports: Sequence[int],
        parent: str | None = None,
        proxy: CredentialProxy | None = None,
    ) -> None:
        self.ports = tuple(ports)
        self.proxy = proxy
        self.folder = tempfile.mkdtemp(prefix="loopback-", dir=parent)
        os.chmod(self.folder, 0o700)

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen until cancelled; the folder is removed at the end."""
        listeners: list[trio.SocketListener] = []
        try:
            for port in self.ports:
                sock = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_STREAM)
                await sock.bind(os.path.join(self.folder, f"{port}.sock"))
                sock.listen(64)
                listeners.append(trio.SocketListener(sock))
            async with trio.open_nursery() as nursery:
                for port, listener in zip(self.ports, listeners, strict=True):
                    nursery.start_soon(self._accept, listener, port)
                if self.proxy is not None:
                    path = os.path.join(self.folder, f"{CREDENTIAL_SOCKET}.sock")
                    await nursery.start(lambda task_status: self.proxy.serve(  # type: ignore[union-attr]
                        path, task_status=task_status))
                task_status.started()
        finally:
            for listener in listeners:
                with trio.CancelScope(shield=True):
                    await listener.aclose()
            shutil.rmtree(self.folder, ignore_errors=True)

    async def _accept(self, listener: trio.SocketListener, port: int) -> None:
        async with trio.open_nursery() as nursery:
            while True:
                stream = await listener.accept()
                nursery.start_soon(self._connect, stream, port)

    async def _connect(self, stream: trio.SocketStream, port: int) -> None:
        try:
            upstream = await trio.open_tcp_stream("127.0.0.1", port)
        except OSError as exc:
            log.debug("loopback bridge: 127.0.0.1:%d refused: %s", port, exc)
            await stream.aclose()
            return
        await _relay(stream, upstream)


__all__ = ["LoopbackBridge"]
