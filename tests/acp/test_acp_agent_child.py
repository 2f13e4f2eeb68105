"""The ACP agent subprocess outlives the driver's idle worker threads (`hostd_protocol.child_process`).

PDEATHSIG fires when the thread that forked the agent ends. Spawned from a trio worker
thread, every agent was SIGKILLed once trio's thread cache retired that worker (10 s idle):
a turn longer than that failed with "killed by signal 9" (seen with claude-agent-acp 0.101.0
running a slow tool). Here the cache's idle timeout is made tiny and the worker that ran
the last job is waited out; the agent must still answer.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import msgspec
import pytest
import trio
from trio._core import _thread_cache  # the idle timeout of trio's worker threads

from hostd_acp.agent_process import AgentProcess
from hostd_acp.jsonrpc import Dropped
from tests.acp.support import AGENT
from tests.polling import thread_retired

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="PDEATHSIG is Linux-only"
)


async def _ignore(method: str, params: msgspec.Raw) -> None:
    return None


async def _refuse(method: str, params: msgspec.Raw) -> None:
    raise AssertionError(f"unexpected request {method}")


async def _dropped(drop: Dropped) -> None:
    raise AssertionError(f"unexpected drop {drop}")


async def test_the_agent_survives_when_trio_retires_an_idle_worker_thread(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(_thread_cache, "IDLE_TIMEOUT", 0.05)
    agent = AgentProcess(
        "test",
        [sys.executable, str(AGENT)],
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        cwd=str(tmp_path),
        on_notification=_ignore,
        on_request=_refuse,
        on_drop=_dropped,
        max_line=1 << 20,
    )
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            await agent.start(nursery)
            try:
                # The worker that last ran a job (trio reuses the most recent idle one: the
                # one that forked the agent when spawning went through a worker thread).
                worker = await trio.to_thread.run_sync(threading.get_ident)
                await thread_retired(worker)
                raw = await agent.request("initialize", {"protocolVersion": 1})
                assert msgspec.json.decode(raw)["protocolVersion"] == 1
                assert agent.alive
            finally:
                await agent.aclose()
