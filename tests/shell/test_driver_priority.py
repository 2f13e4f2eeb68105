"""Drivers run at a lower CPU priority (`hostd.shell.drivers.priority`): the process's nice
value and its session's autogroup, on real processes started in a session of their own."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from hostd.shell.drivers.priority import (
    DEFAULT_DRIVER_NICE,
    autogroups_enabled,
    check_nice,
    lower_priority,
    set_autogroup_nice,
)
from hostd.shell.drivers.registry import DriverRegistry
from hostd.shell.drivers.supervisor import SessionOptions, Supervisor
from hostd.testing.processes import no_new_children
from hostd_scripted.spec import SPEC

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="nice values and /proc: Linux")

#: This process's own nice value: every process the tests start inherits it, so what a test
#: expects is relative to it (a suite run under `nice` must pass too).
OURS = os.getpriority(os.PRIO_PROCESS, 0)


def lower_than_ours(by: int) -> int:
    """A nice value `by` steps below our priority; skips the test when 19 leaves no room."""
    if OURS + by > 19:
        pytest.skip(f"this test process runs at nice {OURS}: no lower priority left to give")
    return OURS + by


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A process in a session (so an autogroup) of its own, like a driver."""
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"],
        stdin=subprocess.PIPE,
        start_new_session=True,
    )
    yield proc
    proc.kill()
    proc.wait()
    assert proc.stdin is not None
    proc.stdin.close()


def autogroup_line(pid: int) -> str:
    with open(f"/proc/{pid}/autogroup", encoding="ascii") as f:
        return f.read().strip()


async def test_lower_priority_sets_the_process_and_its_session_group(
    sleeper: subprocess.Popen[bytes],
) -> None:
    nice = lower_than_ours(7)
    assert os.getpriority(os.PRIO_PROCESS, sleeper.pid) == OURS
    with trio.fail_after(10):  # retried at the kernel's pace if another change just ran
        await lower_priority(sleeper.pid, nice)
    assert os.getpriority(os.PRIO_PROCESS, sleeper.pid) == nice
    if autogroups_enabled():
        assert autogroup_line(sleeper.pid).endswith(f" nice {nice}")


async def test_nice_zero_changes_nothing(sleeper: subprocess.Popen[bytes]) -> None:
    before = autogroup_line(sleeper.pid) if autogroups_enabled() else ""
    await lower_priority(sleeper.pid, 0)
    assert os.getpriority(os.PRIO_PROCESS, sleeper.pid) == OURS
    if autogroups_enabled():
        assert autogroup_line(sleeper.pid) == before


def test_a_gone_process_is_nothing_to_do() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    proc.wait()
    assert set_autogroup_nice(proc.pid, 5) is None


@pytest.mark.parametrize("value", [-1, 20])
def test_only_values_a_process_may_lower_itself_to(value: int) -> None:
    with pytest.raises(ValueError, match=r"^a driver nice value is 0 \(off\) to 19, not "):
        check_nice(value)


async def test_a_supervisors_drivers_run_at_its_nice_value(tmp_path: Path) -> None:
    base_env = {"PATH": os.environ.get("PATH", os.defpath), "HOME": str(tmp_path)}
    options: dict[str, Any] = {"chunk_rate": 0}
    seen: list[int] = []
    lowered = lower_than_ours(DEFAULT_DRIVER_NICE)
    with no_new_children(), trio.fail_after(30):
        for nice in (lowered, 0):
            sup = Supervisor(
                DriverRegistry.from_specs(SPEC),
                base_env=base_env,
                workdir_root=str(tmp_path / "w"),
                driver_nice=nice,
            )
            async with trio.open_nursery() as nursery:
                await nursery.start(sup.serve)
                try:
                    session = await sup.open("t", SessionOptions("scripted", options=options))
                    # The priority task starts with the session and sets the process nice
                    # in its first step, before the handshake could complete.
                    seen.append(os.getpriority(os.PRIO_PROCESS, session.pid))
                finally:
                    with trio.CancelScope(shield=True):
                        await sup.aclose()
    assert seen == [lowered, OURS]  # 0: off, the driver keeps ours
