"""Fixtures for in-process daemon tests: a real Unix socket and a real SQLite file in a short
temporary HOSTD_HOME, with the runtime and supervisor replaced by `tests.shell.fakes`."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trio

from hostd.shell.daemon import Daemon, DaemonConfig, default_runtime_factory, serve_daemon
from hostd.shell.drivers.registry import DriverRegistry
from hostd.shell.paths import Paths
from hostd_protocol.driver_spec import DriverSpec
from tests.shell.fakes import FakeRuntime, FakeSupervisor

REGISTRY = DriverRegistry.from_specs(DriverSpec(name="fake", module="nonexistent_fake_driver"))


@pytest.fixture
def home() -> Iterator[Path]:
    # Short, so the socket path stays under the ~104-byte limit of AF_UNIX.
    path = Path(tempfile.mkdtemp(prefix="hd", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def paths(home: Path) -> Paths:
    return Paths.under(home)


@dataclass
class Running:
    paths: Paths
    daemon: Daemon
    supervisor: FakeSupervisor
    done: trio.Event

    async def stop(self) -> None:
        self.daemon.request_shutdown()
        with trio.fail_after(10):
            await self.done.wait()


async def start_daemon(
    nursery: trio.Nursery,
    paths: Paths,
    *,
    supervisor: FakeSupervisor | None = None,
    config: DaemonConfig | None = None,
    runtime_factory: Any = default_runtime_factory,
    **kwargs: Any,
) -> Running:
    sup = supervisor or FakeSupervisor()
    done = trio.Event()

    async def run(task_status: trio.TaskStatus[Daemon] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            await serve_daemon(
                paths,
                config=config or DaemonConfig(default_driver="fake"),
                registry=REGISTRY,
                supervisor_factory=lambda _r: sup,  # type: ignore[arg-type,return-value]
                runtime_factory=runtime_factory,
                task_status=task_status,
                **kwargs,
            )
        finally:
            done.set()

    with trio.fail_after(10):
        daemon = await nursery.start(run)
    return Running(paths, daemon, sup, done)


def fake_runtime(info: Any, rows: Any, approvals: Any, last_seq: int) -> FakeRuntime:
    import time

    from hostd.shell.topic_host import new_id

    return FakeRuntime(info, rows, approvals, last_seq, new_id=new_id, wall=time.time)


@pytest.fixture
async def running(nursery: trio.Nursery, paths: Paths) -> AsyncIterator[Running]:
    r = await start_daemon(nursery, paths)
    yield r
    await r.stop()
