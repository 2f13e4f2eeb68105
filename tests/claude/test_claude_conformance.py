"""The driver conformance suite (hostd.testing.conformance) against the Claude Code driver:
real supervisor, real driver, real CLI, fake Messages API.

Skipped checks: `garbage_on_stdout` (nothing makes this driver write non-frames: the harness
moves fd 1 aside) and `slow_start` (no slow-start option). The crash check kills the driver
with SIGKILL after its first chunk.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from hostd.shell.drivers.registry import DriverRegistry
from hostd.testing.conformance import ConformanceProfile
from hostd.testing.plugin import ConformanceCheck
from hostd_claude_code.spec import SPEC
from tests.claude.driver_peer import offline_env
from tests.fakes.anthropic_api import FakeAnthropicAPI, Rule, hang, text, user_says

pytestmark = pytest.mark.claude

RULES = [
    Rule(user_says("Say hello."), text("Hello!")),
    # Streams one chunk, then waits until the client goes away (interrupt or crash).
    Rule(user_says("Count slowly."), hang("1\n2\n", text_after="")),
]


@pytest.fixture(scope="module")
def hostd_conformance_profile() -> Iterator[ConformanceProfile]:
    with FakeAnthropicAPI(RULES) as api:
        yield ConformanceProfile(
            driver="claude-code",
            registry=DriverRegistry.from_specs(SPEC),
            base_env=offline_env(api.base_url),
            turn_text="Say hello.",
            long_turn_text="Count slowly.",
            handshake_timeout=15.0,
            # The real CLI's start plus a turn took over 30 s on a starved CPU (crash_mid_turn);
            # it bounds a hang, not speed.
            turn_timeout=60.0,
        )


def reap_orphans_in(root: Path, timeout: float = 10.0) -> list[int]:
    """Kill processes whose cwd is inside `root` and wait for them to exit.

    The crash check SIGKILLs the driver; its CLI (our grandchild, now orphaned) lives on
    until it notices its closed stdin. Only processes working in this test's own temp dir
    are touched.
    """
    found: list[int] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cwd = Path(os.readlink(f"/proc/{entry}/cwd"))
        except OSError:
            continue
        if cwd == root or root in cwd.parents:
            found.append(int(entry))
    for pid in found:
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            continue  # already gone
        try:
            os.kill(pid, signal.SIGKILL)
            select.select([fd], [], [], timeout)  # readable once the process has exited
        except OSError:
            pass
        finally:
            os.close(fd)
    return found


@pytest.fixture
def short_dir() -> Iterator[Path]:
    # Short, so the CLI's socket dir stays inside the topic folder (see config.MAX_TMPDIR_LEN).
    path = Path(tempfile.mkdtemp(prefix="hcf", dir="/tmp"))
    try:
        yield path
    finally:
        reap_orphans_in(path)
        shutil.rmtree(path, ignore_errors=True)


def test_claude_code_conformance(hostd_conformance: ConformanceCheck, short_dir: Path) -> None:
    hostd_conformance.run(short_dir)
