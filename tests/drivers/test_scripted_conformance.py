"""The conformance suite run against the scripted driver, through the pytest plugin
(`hostd.testing.plugin`: the `hostd_conformance` fixture), as a driver author runs it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hostd.shell.drivers.registry import DriverRegistry
from hostd.testing.conformance import ConformanceProfile
from hostd.testing.plugin import ConformanceCheck
from hostd_scripted.spec import SPEC

PROFILE = ConformanceProfile(
    driver="scripted",
    registry=DriverRegistry.from_specs(SPEC),
    base_env={"PATH": os.environ.get("PATH", os.defpath), "LANG": "C.UTF-8"},
    init_options={"chunk_rate": 0, "tool_pause": 0},
    turn_text="hello",
    long_turn_text="/chunks 2 rate=0\n/wait",
    crash_text="/chunks 2 rate=0\n/crash 3",
    garbage_text="/chunks 1 rate=0\n/garbage",
    slow_start_options={"start_delay": 0.6},
    slow_start_seconds=0.6,
    handshake_timeout=10.0,
    turn_timeout=10.0,
)

#: The same driver made to crash by the suite itself (SIGKILL after the first chunk), the
#: path a driver without a crash trigger takes.
KILLED = ConformanceProfile(
    driver="scripted",
    registry=DriverRegistry.from_specs(SPEC),
    base_env=PROFILE.base_env,
    init_options=PROFILE.init_options,
    turn_text="hello",
    long_turn_text="/chunks 2 rate=0\n/wait",
    handshake_timeout=10.0,
    turn_timeout=10.0,
)


@pytest.fixture
def hostd_conformance_profile() -> ConformanceProfile:
    return PROFILE


def test_scripted_conformance(hostd_conformance: ConformanceCheck) -> None:
    hostd_conformance.run()


async def test_scripted_crash_by_kill(tmp_path: Path) -> None:
    from hostd.testing.conformance import check_crash_mid_turn

    await check_crash_mid_turn(KILLED, tmp_path)


async def test_the_handshake_check_tells_a_slow_clean_close_from_a_hung_one(
    tmp_path: Path,
) -> None:
    """A driver whose clean close takes longer than the supervisor's 2 s default (a loaded
    machine) still passes the handshake check: its bound only limits a hang. What the check
    asserts is unchanged: exit code 0 and no error."""
    from dataclasses import replace

    from hostd.testing.conformance import check_handshake

    slow = replace(PROFILE, init_options={**PROFILE.init_options, "close_delay": 2.5})
    await check_handshake(slow, tmp_path)
