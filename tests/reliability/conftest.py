"""Fixtures of the reliability suite: a short HOSTD_HOME per test (AF_UNIX paths are short),
the seed every randomised attack uses (`HOSTD_STRESS_SEED`, printed on failure), and an
in-process daemon with the real supervisor and real scripted driver processes (for attacks
that need short timeouts)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trio

from hostd.client import Client, Subscription
from hostd.shell.daemon import Daemon, DaemonConfig, serve_daemon
from hostd.shell.drivers.registry import DriverRegistry
from hostd.shell.paths import Paths
from hostd_protocol.client_messages import (
    MessageRow,
    RowAppended,
    Snapshot,
    TopicEvent,
    TurnEnded,
)
from hostd_protocol.common import SendIntent
from hostd_scripted.spec import SPEC as SCRIPTED


@pytest.fixture
def home() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="hdr", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def paths(home: Path) -> Paths:
    return Paths.under(home)


@pytest.fixture
def seed() -> int:
    return int(os.environ.get("HOSTD_STRESS_SEED", "9"))


@dataclass
class InProcess:
    paths: Paths
    daemon: Daemon
    done: trio.Event

    async def stop(self) -> None:
        self.daemon.request_shutdown()
        with trio.fail_after(20):
            await self.done.wait()


#: The supervisor's handshake timeout in these daemons: it only ends a hang. A scripted
#: driver's spawn -> ready takes 0.2-0.4 s on an idle box but 1.5-3 s on a loaded 2-core one
#: (CI), so a short timer here turned good drivers into `driver_timeout` and left tests waiting
#: for an answer that never started. A test of the timer itself passes its own short one.
HANG_LIMIT = 60.0


async def start_in_process(
    nursery: trio.Nursery,
    paths: Paths,
    *,
    handshake_timeout: float = HANG_LIMIT,
    config: DaemonConfig | None = None,
    **sup_kw: Any,
) -> InProcess:
    """`serve_daemon` in this process (real socket, store, supervisor and scripted driver
    processes); `handshake_timeout` defaults to `HANG_LIMIT`."""
    from hostd.shell.drivers.supervisor import Supervisor

    done = trio.Event()

    async def run(task_status: trio.TaskStatus[Daemon] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            await serve_daemon(
                paths,
                config=config or DaemonConfig(default_driver="scripted"),
                registry=DriverRegistry.from_specs(SCRIPTED),
                supervisor_factory=lambda r: Supervisor(
                    r, handshake_timeout=handshake_timeout, **sup_kw
                ),
                task_status=task_status,
            )
        finally:
            done.set()

    with trio.fail_after(20):
        daemon = await nursery.start(run)
    return InProcess(paths, daemon, done)


@dataclass
class TurnOutcome:
    end: TurnEnded
    rows: list[MessageRow]
    #: Every event after the attach snapshot, in arrival order. No arrival times: how fast a
    #: failure surfaces is a bench figure (`scripts/bench failures`), not a test assert.
    events: list[TopicEvent]


async def run_turn(
    client: Client,
    topic_id: str,
    text: str,
    intent: SendIntent = "auto",
    on_event: Callable[[TopicEvent], Awaitable[None]] | None = None,
) -> TurnOutcome:
    """Send `text` and follow the topic until that message's turn ends."""
    events: list[TopicEvent] = []
    async with client.attach(topic_id, max_rows=10_000) as sub:
        result = await client.send(topic_id, text, intent)
        async for item in sub:
            if isinstance(item, Snapshot):
                continue
            events.append(item)
            if on_event is not None:
                await on_event(item)
            if isinstance(item, TurnEnded) and item.turn_id == result.turn_id:
                return TurnOutcome(item, sub.transcript.rows(), events)
    raise AssertionError("the subscription ended before the turn did")


async def first_chunk(sub: Subscription) -> RowAppended:
    """Wait for the next streamed chunk of `sub`'s topic. A turn that ends before it (a driver
    that failed to start) fails the test at once, with the turn's error, instead of leaving it
    waiting for its deadline."""
    async for item in sub:
        if isinstance(item, RowAppended):
            return item
        if isinstance(item, TurnEnded):
            raise AssertionError(f"the turn ended before its answer streamed: {item}")
    raise AssertionError("the subscription ended before the answer streamed")
