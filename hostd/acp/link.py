"""`hostd acp`'s connection to the daemon, kept up across daemon restarts.

An editor's ACP sessions outlive any one daemon connection: when the daemon stops or
crashes, `DaemonLink` connects again (starting the daemon, as `hostd acp` does when it
starts) and hands each new connection to `on_up`, whose tasks (one per open session,
re-attaching its topic) run in that connection's own nursery and end with it.

Rules this module guards:
- at most one connection at a time; `client()` hands out the current one, or waits (at most
  `wait_s`) for the next, then raises `ConnectionBroken` with the last reason;
- the first connection is made by `run` before it reports started: when it fails, that
  failure is the command's (one line, exit 1), exactly as before reconnecting existed;
- a lost connection is tried again at once, then after 0.25, 0.5, 1 and 2 s, then every 2 s,
  for as long as the editor keeps `hostd acp` running;
- `on_down` is called once per lost connection, `on_up` once per new one (`again` is False
  only for the first).
"""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AbstractAsyncContextManager

import trio

from hostd.client.async_client import Client
from hostd_protocol.errors import ConnectionBroken, HostdError

__all__ = ["DaemonLink"]

#: Waits between connection attempts after a loss (the last one repeats).
BACKOFF_S = (0.0, 0.25, 0.5, 1.0, 2.0)


Connect = Callable[[], AbstractAsyncContextManager[Client]]


class DaemonLink:
    """One daemon connection at a time, made again whenever it is lost."""

    def __init__(
        self,
        connect: Connect,
        *,
        on_up: Callable[[Client, trio.Nursery, bool], Awaitable[None]],
        on_down: Callable[[HostdError], Awaitable[None]],
        wait_s: float = 30.0,
    ) -> None:
        self._connect = connect
        self._on_up = on_up
        self._on_down = on_down
        self.wait_s = wait_s
        self._client: Client | None = None
        self._nursery: trio.Nursery | None = None
        self._changed = trio.Event()
        self._reason: HostdError | None = None
        #: How many connections were lost (and made again) so far.
        self.losses = 0

    @property
    def nursery(self) -> trio.Nursery | None:
        """The current connection's nursery (tasks there end with the connection)."""
        return self._nursery

    @property
    def current(self) -> Client | None:
        return self._client

    async def client(self) -> Client:
        """The connected client, waiting (bounded) while the daemon is being reached again."""
        with trio.move_on_after(self.wait_s):
            while self._client is None:
                await self._changed.wait()
            return self._client
        reason = f": {self._reason.message}" if self._reason is not None else ""
        raise ConnectionBroken(
            f"hostd acp cannot reach the daemon again{reason}; it keeps trying "
            "(check `hostd status`)"
        )

    async def replaced(self, client: Client) -> None:
        """Wait until `client` (which failed a request) is no longer the current one."""
        while self._client is client:
            await self._changed.wait()

    async def wait_down_for(self, seconds: float) -> bool:
        """Whether the link is still down `seconds` from now (False once it is back)."""
        with trio.move_on_after(seconds):
            while self._client is None:
                await self._changed.wait()
            return False
        return True

    def _set(self, client: Client | None, nursery: trio.Nursery | None) -> None:
        self._client, self._nursery = client, nursery
        self._changed.set()
        self._changed = trio.Event()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Connect, then keep connected until cancelled."""
        again = False
        attempts = _backoff()
        while True:
            try:
                async with self._connect() as client, trio.open_nursery() as nursery:
                    attempts = _backoff()
                    self._set(client, nursery)
                    await self._on_up(client, nursery, again)
                    if not again:
                        task_status.started()
                    again = True
                    reason = await client.wait_closed()
                    nursery.cancel_scope.cancel()
            except (OSError, HostdError) as exc:
                if not again:
                    raise  # the first connection's failure is the command's
                reason = exc if isinstance(exc, HostdError) else ConnectionBroken(
                    f"cannot reach the daemon: {exc.strerror or exc}"
                )
            lost = self._client is not None
            self._reason = reason
            self._set(None, None)
            if lost:
                self.losses += 1
                await self._on_down(reason)
            await trio.sleep(next(attempts))


def _backoff() -> Iterator[float]:
    return itertools.chain(BACKOFF_S, itertools.repeat(BACKOFF_S[-1]))
