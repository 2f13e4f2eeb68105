"""A driver's whole process tree is the daemon's: a confined driver outlives the thread that
started it, and whatever a driver started (a `setsid` child it never waits for included)
ends when its session closes, when the driver is killed, or when it gets SIGTERM
(`hostd_protocol.child_process`, the driver harness)."""

from __future__ import annotations

import os
import signal
import sys
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
from trio._core import _thread_cache  # the idle timeout of trio's worker threads

from hostd.shell.drivers.registry import DriverRegistry
from hostd.shell.drivers.sandbox import probe
from hostd.shell.drivers.supervisor import DriverSession, SessionEnded, SessionOptions, Supervisor
from hostd.testing.conformance import collect_turn
from hostd.testing.processes import marked, no_new_children
from hostd_protocol.driver_messages import Send
from hostd_protocol.errors import DriverCrashed
from hostd_scripted.spec import SPEC
from tests.polling import eventually, holds_within, thread_retired

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="/proc, PDEATHSIG and subreapers are Linux's"
)
SUPPORT = probe()
needs_bwrap = pytest.mark.skipif(not SUPPORT.available, reason=SUPPORT.reason)
REGISTRY = DriverRegistry.from_specs(SPEC)
FAST = {"chunk_rate": 0, "tool_pause": 0}


@pytest.fixture(autouse=True)
def _no_leftover_processes() -> Iterator[None]:
    with no_new_children():
        yield


@asynccontextmanager
async def serving(tmp_path: Path, **kwargs: Any) -> AsyncIterator[Supervisor]:
    env = {"PATH": os.environ.get("PATH", os.defpath), "HOME": str(tmp_path), "LANG": "C.UTF-8"}
    sup = Supervisor(REGISTRY, base_env=env, workdir_root=str(tmp_path / "w"),
                     handshake_timeout=10.0, **kwargs)
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            await nursery.start(sup.serve)
            try:
                yield sup
            finally:
                with trio.CancelScope(shield=True):
                    await sup.aclose()




def gone(marker: str, within: float = 30.0) -> bool:
    """No process with `marker` left: a kill is delivered asynchronously, so bounded."""
    if holds_within(lambda: not marked(marker), within):
        return True
    for pid in marked(marker):
        os.kill(pid, signal.SIGKILL)
    return False


async def orphan(session: DriverSession, marker: str) -> str:
    """`/orphan MARKER`, then wait until the child shows MARKER in its argv. The driver's
    Popen returns once the exec has begun; /proc/PID/cmdline can stay empty until the new
    image has set up its arguments, which is the likely reason the child was twice not
    found right after the answer on a loaded machine."""
    said = await text_of(session, "t1", f"/orphan {marker}")
    assert said.startswith("orphan "), said
    assert await eventually(lambda: marked(marker), 30), said
    return said


async def text_of(session: DriverSession, turn_id: str, text: str) -> str:
    await session.send(Send(turn_id=turn_id, text=text))
    result = await collect_turn(session, turn_id)
    assert result.end is not None and result.end.status == "success", result
    return result.text


async def wait_end(session: DriverSession) -> SessionEnded:
    async for item in session.events:
        if isinstance(item, SessionEnded):
            return item
    raise AssertionError("events closed without SessionEnded")


@needs_bwrap
async def test_a_confined_driver_outlives_the_worker_thread_that_was_idle(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Issue 31, item 1 (bounded): bwrap's --die-with-parent fired when the thread that
    forked it ended, which trio's thread cache does after an idle spell (10 s; 50 ms here).
    """
    monkeypatch.setattr(_thread_cache, "IDLE_TIMEOUT", 0.05)
    async with serving(tmp_path) as sup:
        session = await sup.open("t", SessionOptions(
            driver="scripted", options={**FAST, "sandbox": "confined"}))
        # The worker that last ran a job (the one that would have forked bwrap).
        worker = await trio.to_thread.run_sync(threading.get_ident)
        await thread_retired(worker)
        assert await text_of(session, "t1", "/text still here") == "still here"
        assert session.alive


async def test_closing_a_session_ends_a_setsid_child_its_driver_left(tmp_path: Path) -> None:
    marker = f"hostd-orphan-{uuid.uuid4().hex}"
    async with serving(tmp_path) as sup:
        session = await sup.open("t", SessionOptions(driver="scripted", options=FAST))
        await orphan(session, marker)
        await sup.close("t")
        # (Whether the driver exited within the close budget depends on the machine's
        # load: the harness ends its tree at Close, the host's kill would too.)
        assert gone(marker)


async def test_a_killed_driver_takes_its_whole_tree(tmp_path: Path) -> None:
    marker = f"hostd-orphan-{uuid.uuid4().hex}"
    async with serving(tmp_path) as sup:
        session = await sup.open("t", SessionOptions(driver="scripted", options=FAST))
        await orphan(session, marker)
        session.kill(DriverCrashed, "given up on")
        end = await wait_end(session)
        assert end.error is not None and end.error.exit_code == -signal.SIGKILL
        assert gone(marker)


async def test_sigterm_ends_the_session_like_close(tmp_path: Path) -> None:
    marker = f"hostd-orphan-{uuid.uuid4().hex}"
    async with serving(tmp_path) as sup:
        session = await sup.open("t", SessionOptions(driver="scripted", options=FAST))
        await orphan(session, marker)
        os.kill(session.pid, signal.SIGTERM)
        await wait_end(session)
        # Not killed by the signal (its default action): the harness ended the session
        # and its tree, and exited 0 (or, on a machine so loaded that the exit took longer
        # than the host waits after end of output, was killed by the host).
        assert session.exit_code in (0, -signal.SIGKILL), session.exit_code
        assert gone(marker)
