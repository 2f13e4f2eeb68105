"""The driver conformance suite (hostd.testing.conformance) against the OpenAI driver:
real supervisor, the driver as a real subprocess, the fake OpenAI-compatible server.

Skipped checks: `garbage_on_stdout` (nothing makes this driver write non-frames: fd 1 is moved
aside) and `slow_start` (no slow-start option). The crash check kills the driver (SIGKILL)
after its first chunk.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from hostd.shell.drivers.registry import DriverRegistry
from hostd.testing.conformance import CHECKS, Check, ConformanceProfile
from hostd_openai.spec import SPEC
from tests.fakes.openai_api import FakeOpenAI, Hang, Rule, Text, user_says

RULES = [
    Rule(user_says("Say hello."), Text("Hello!")),
    # Streams a chunk, then keeps the stream open until the client goes away.
    Rule(user_says("Count slowly."), Hang("1 2 ")),
]


@pytest.fixture(scope="module")
def profile() -> Iterator[ConformanceProfile]:
    with FakeOpenAI(RULES) as api:
        yield ConformanceProfile(
            driver="openai",
            registry=DriverRegistry.from_specs(SPEC),
            base_env={"PATH": os.environ.get("PATH", os.defpath), "LANG": "C.UTF-8"},
            model="fake-model",
            init_options={"base_url": api.base_url, "api_key_env": ""},
            turn_text="Say hello.",
            long_turn_text="Count slowly.",
            handshake_timeout=15.0,
            turn_timeout=20.0,
        )


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
async def test_openai_conformance(
    check: Check, profile: ConformanceProfile, tmp_path: Path
) -> None:
    await check(profile, tmp_path)
