"""The OpenAI driver as a user runs it, for `tests.openai.bench`: through the real daemon
(subprocess, socket, SQLite) and a real client (`hostd.client`), timed at the client.

One daemon serves every round (a user's daemon is long-lived); each round makes new topics:
- cold: a new topic, no driver process for it yet: send -> first text chunk at the window
  (driver spawn, imports, MCP server connect, the model request);
- prewarmed: a new topic, `prewarm`, the daemon reports a warm spare, send -> first chunk;
- in-session: more sends on that topic (the daemon sends the history, the driver rebuilds it);
- tool step: on the fake server's clock, as for the other loops (tools are allowed without
  asking, so no approval is on the path);
- RSS: the warm topic's driver process (the daemon's own RSS is noted apart: one daemon
  serves every topic).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio

from hostd.client import Client, Subscription, open_client
from hostd.shell.paths import Paths
from hostd.testing.processes import child_pids
from hostd_dev.bench.cpu_stats import rss_mib
from hostd_protocol.client_messages import RowAppended, TurnEnded
from hostd_protocol.common import TextDelta
from tests.dirs import made_dir
from tests.e2e import daemon_proc
from tests.fakes.openai_api import FakeOpenAI
from tests.openai.peer import tools_server
from tests.polling import eventually


def openai_drivers(daemon_pid: int) -> set[int]:
    """The daemon's child processes that run the OpenAI driver."""
    found = set()
    for pid in child_pids(daemon_pid):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"hostd_openai" in cmdline:
            found.add(pid)
    return found


class DaemonLoop:
    """A running daemon and one client connection to it."""

    def __init__(self, daemon: daemon_proc.DaemonProcess, client: Client) -> None:
        self.daemon = daemon
        self.client = client

    def daemon_rss(self) -> float:
        return rss_mib(self.daemon.pid)

    async def new_topic(self, api: FakeOpenAI, state: Path) -> str:
        topic = await self.client.create_topic(
            title="bench",
            driver="openai",
            model="fake-model",
            working_dir=made_dir(state / "work"),
            options={
                "base_url": api.base_url,
                "api_key_env": "",
                "mcp_servers": {"t": tools_server(state)},
                # Turn 1 waits for the server's first connection however loaded the machine
                # (as the other loops connect theirs before their first request).
                "mcp_startup_wait": 60,
                "allowed_tools": ["*"],
            },
        )
        topic_id: str = topic.id
        return topic_id

    async def turn(self, topic_id: str, sub: Subscription, text: str) -> float:
        """Send `text`; seconds from the send to the first text chunk at this window."""
        first = 0.0
        async with trio.open_nursery() as nursery:
            t0 = time.perf_counter()
            nursery.start_soon(self.client.send, topic_id, text)
            async for ev in sub:
                if not first and isinstance(ev, RowAppended) and isinstance(ev.chunk, TextDelta):
                    first = time.perf_counter() - t0
                if isinstance(ev, TurnEnded):
                    if ev.status != "success" or not first:
                        raise RuntimeError(f"bench turn ended {ev.status}: {ev.error}")
                    return first
        raise RuntimeError("the subscription ended before the turn did")

    async def wait_warm(self, timeout: float = 60.0) -> None:
        with trio.fail_after(timeout):
            # The daemon has no "spare is warm" event for clients: poll its status.
            async def warm() -> bool:
                return (await self.client.status()).warm_drivers >= 1

            if not await eventually(warm, within=timeout, every=0.005):
                raise RuntimeError(f"no warm driver after {timeout} s")


@asynccontextmanager
async def running_daemon(home: Path) -> AsyncIterator[DaemonLoop]:
    d = await daemon_proc.start(home)
    try:
        async with open_client(Paths.under(home), client_name="bench-openai") as client:
            yield DaemonLoop(d, client)
    finally:
        with trio.CancelScope(shield=True):
            await d.terminate()


@asynccontextmanager
async def attached(loop: DaemonLoop, topic_id: str) -> AsyncIterator[Subscription]:
    async with loop.client.attach(topic_id, max_rows=1) as sub:
        await sub.__anext__()  # the snapshot
        yield sub


async def daemon_round(
    loop: DaemonLoop,
    api: FakeOpenAI,
    root: Path,
    out: Any,
    *,
    hello: str,
    tool: str,
    in_session_turns: int,
    tool_turns: int,
) -> None:
    """One round into `out` (a `LoopFigures`); `tool_step` is tests.openai.bench's."""
    from tests.openai.bench import tool_step

    cold = await loop.new_topic(api, root / "d-cold")
    async with attached(loop, cold) as sub:
        out.cold.append(await loop.turn(cold, sub, hello))
    await loop.client.delete_topic(cold)
    before = openai_drivers(loop.daemon.pid)
    warm = await loop.new_topic(api, root / "d-warm")
    await loop.client.prewarm(warm)
    await loop.wait_warm()
    async with attached(loop, warm) as sub:
        out.prewarmed.append(await loop.turn(warm, sub, hello))
        out.in_session.append(
            statistics.median([await loop.turn(warm, sub, hello) for _ in range(in_session_turns)])
        )
        await loop.turn(warm, sub, tool)  # a fresh MCP server's first call: not timed
        steps = []
        for _ in range(tool_turns):
            n0 = len(api.requests)
            await loop.turn(warm, sub, tool)
            steps.append(tool_step(api.requests[n0:]))
        out.tool_step.append(statistics.median(steps))
        mine = openai_drivers(loop.daemon.pid) - before
        out.rss.append(sum(rss_mib(pid) for pid in mine) if len(mine) == 1 else 0.0)
    await loop.client.delete_topic(warm)
