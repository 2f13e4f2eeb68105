"""The driver conformance suite (hostd.testing.conformance) against the Claude Code driver:
real supervisor, real driver, real CLI, fake Messages API.

Skipped checks: `garbage_on_stdout` (nothing makes this driver write non-frames: the harness
moves fd 1 aside) and `slow_start` (no slow-start option). The crash check kills the driver
with SIGKILL after its first chunk.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from hostd.driver_registry import DriverRegistry
from hostd.testing.conformance import CHECKS, Check, ConformanceProfile
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
def profile() -> Iterator[ConformanceProfile]:
    with FakeAnthropicAPI(RULES) as api:
        yield ConformanceProfile(
            driver="claude-code",
            registry=DriverRegistry.from_specs(SPEC),
            base_env=offline_env(api.base_url),
            turn_text="Say hello.",
            long_turn_text="Count slowly.",
            handshake_timeout=15.0,
            turn_timeout=30.0,
        )


@pytest.fixture
def short_dir() -> Iterator[Path]:
    # Short, so the CLI's socket dir stays inside the topic folder (see config.MAX_TMPDIR_LEN).
    path = Path(tempfile.mkdtemp(prefix="hcf", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
async def test_claude_code_conformance(
    check: Check, profile: ConformanceProfile, short_dir: Path
) -> None:
    await check(profile, short_dir)
