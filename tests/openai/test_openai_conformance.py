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
import trio

from hostd.shell.drivers.registry import DriverRegistry
from hostd.testing.conformance import ConformanceProfile, collect_turn, serving
from hostd.testing.plugin import ConformanceCheck
from hostd_openai.spec import SPEC
from hostd_protocol.driver_messages import Send
from hostd_protocol.errors import PermissionDenied
from tests.fakes.openai_api import FakeOpenAI, Hang, Rule, Text, anything, user_says

RULES = [
    Rule(user_says("Say hello."), Text("Hello!")),
    # Streams a chunk, then keeps the stream open until the client goes away.
    Rule(user_says("Count slowly."), Hang("1 2 ")),
]


@pytest.fixture(scope="module")
def hostd_conformance_profile() -> Iterator[ConformanceProfile]:
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


def test_openai_conformance(hostd_conformance: ConformanceCheck) -> None:
    hostd_conformance.run()


async def test_the_key_variable_named_by_the_assistant_reaches_this_driver_only(
    tmp_path: Path,
) -> None:
    """`api_key_env` names the variable; the daemon passes it (and redacts it), no other."""
    base_env = {
        "PATH": os.environ.get("PATH", os.defpath),
        "LANG": "C.UTF-8",
        "MY_LOCAL_LLM_KEY": "right-key-0123456789",
        "UNRELATED_SECRET_TOKEN": "never-passed-0123456789",
    }
    with FakeOpenAI([Rule(anything, Text("ok"))], api_key="right-key-0123456789") as api:
        profile = ConformanceProfile(
            driver="openai",
            registry=DriverRegistry.from_specs(SPEC),
            base_env=base_env,
            model="fake-model",
            init_options={"base_url": api.base_url, "api_key_env": "MY_LOCAL_LLM_KEY"},
        )
        with trio.fail_after(30):
            # The daemon allows it because an assistant file names it (the config cache).
            allowed = {"api_key_env": {"MY_LOCAL_LLM_KEY"}, "base_url": {api.base_url}}
            async with serving(
                profile, tmp_path, configured_values=lambda option: allowed.get(option, ())
            ) as sup:
                session = await sup.open("key", profile.options())
                # A message's own options pass the window rule before the Send is written
                # (hostd/shell/drivers/window_options.py): a server of its choosing is not
                # sent the key; the session stays fine.
                with pytest.raises(PermissionDenied):
                    await session.send(Send(turn_id="t0", text="hi",
                                            options={"base_url": "http://127.0.0.1:9/v1"}))
                await session.send(Send(turn_id="t1", text="hi"))
                result = await collect_turn(session, "t1")
                environ = await trio.Path(f"/proc/{session.pid}/environ").read_bytes()
    env = environ.split(b"\0")
    assert result.end is not None and result.end.status == "success", result.end
    assert b"MY_LOCAL_LLM_KEY=right-key-0123456789" in env
    assert not [v for v in env if v.startswith(b"UNRELATED_SECRET_TOKEN=")]
    assert SPEC.env_names({"api_key_env": "$(evil)"}) == list(SPEC.env)
