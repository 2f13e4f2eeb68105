"""What a driver leaves running when it dies without ending its own tree (SIGKILLed from
outside hostd, a crash) does not outlive it: the daemon is a subreaper, so those orphans
come home to it, and it ends them when the driver's session ends (issue 31)."""

from __future__ import annotations

import os
import signal
import sys
import uuid
from pathlib import Path

import pytest
import trio

from hostd.client import open_client
from hostd.shell.paths import Paths
from tests.e2e import daemon_proc
from tests.e2e.test_sandbox_e2e import answer, orphans
from tests.polling import eventually

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc"),
]


def parent_of(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_bytes()
    return int(stat[stat.rfind(b")") + 2 :].split()[1])


async def test_the_orphans_of_a_driver_killed_from_outside_are_ended(home: Path) -> None:
    marker = f"hostd-orphan-{uuid.uuid4().hex}"
    with trio.fail_after(60):
        d = await daemon_proc.start(home)
        try:
            async with open_client(Paths.under(home)) as c:
                t = await c.create_topic(driver="scripted", options={"chunk_rate": 0})
                said = await answer(c, t.id, f"/orphan {marker}")
                orphan = int(said.split()[-1])
                driver = parent_of(orphan)
                # SIGKILL: the driver's harness cannot end its tree itself.
                os.kill(driver, signal.SIGKILL)
                await eventually(lambda: not orphans(marker), 10)
                left = orphans(marker)
                # The topic still works: its next send starts a new driver.
                assert await answer(c, t.id, "/text again") == "again"
        finally:
            assert await d.terminate() == 0
            for pid in orphans(marker):
                os.kill(pid, signal.SIGKILL)
    assert left == [], "a dead driver's orphan outlived it"


async def test_a_setsid_child_of_a_driver_dies_with_a_killed_daemon(home: Path) -> None:
    """kill -9 of the daemon: the watchdog ends every driver's whole tree (the driver is a
    subreaper, so its setsid'd child is in that tree), and the driver's parent-death signal
    has its harness end it too."""
    marker = f"hostd-orphan-{uuid.uuid4().hex}"
    with trio.fail_after(60):
        d = await daemon_proc.start(home)
        try:
            async with open_client(Paths.under(home)) as c:
                t = await c.create_topic(driver="scripted", options={"chunk_rate": 0})
                await answer(c, t.id, f"/orphan {marker}")
                assert orphans(marker)
        finally:
            await d.kill9()
        await eventually(lambda: not orphans(marker), 10)
        left = orphans(marker)
        for pid in left:
            os.kill(pid, signal.SIGKILL)
    assert left == [], "a driver's setsid child outlived the killed daemon"
