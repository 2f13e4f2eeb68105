"""A stdio MCP server of the OpenAI driver ends with its topic and with the daemon (issue 31).

The server here is hostile: it never reads its input (so end of input means nothing to it),
ignores SIGTERM and runs in its own session, as the mcp SDK starts every stdio server. The
driver harness keeps it in the driver's tree (subreaper) and ends that tree when the
session closes; a daemon stop closes every session. Real daemon, real driver, real server
process; the model server is the fake on 127.0.0.1.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from hostd.client import open_client
from hostd.shell.paths import Paths
from hostd.testing.processes import marked
from hostd_protocol.client_messages import TurnEnded
from tests.dirs import made_dir
from tests.e2e import daemon_proc
from tests.fakes.openai_api import FakeOpenAI, Rule, Text, user_says
from tests.polling import eventually

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc"),
]

#: Ignores SIGTERM and end of input; `marker` in its argv so a test can find it.
STUBBORN = (
    "import signal, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "time.sleep(600)\n"
)




until = eventually  # a process's start or end is not an event we can wait on


@asynccontextmanager
async def topic_with_a_stubborn_server() -> AsyncIterator[tuple[Any, Any, str, Any]]:
    home = Path(tempfile.mkdtemp(prefix="hdm", dir="/tmp"))  # short: AF_UNIX path limit
    marker = f"hostd-mcp-{uuid.uuid4().hex}"
    try:
        with FakeOpenAI([Rule(user_says("hello"), Text("Hi."))]) as api, trio.fail_after(60):
            d = await daemon_proc.start(home)
            try:
                async with open_client(Paths.under(home)) as c:
                    t = await c.create_topic(
                        driver="openai", model="fake-model", working_dir=made_dir(home / "work"),
                        options={
                            "base_url": api.base_url, "api_key_env": "",
                            "mcp_startup_wait": 0,
                            "mcp_servers": {"s": {"command": sys.executable,
                                                  "args": ["-c", STUBBORN, marker]}},
                        },
                    )
                    async with c.attach(t.id) as sub:
                        await c.send(t.id, "hello")
                        async for ev in sub:
                            if isinstance(ev, TurnEnded):
                                assert ev.status == "success", ev
                                break
                    assert await until(lambda: marked(marker), 10), "the server never started"
                    yield c, t, marker, d
            finally:
                await d.terminate()
                for pid in marked(marker):  # a failing test leaves nothing behind
                    os.kill(pid, 9)
    finally:
        shutil.rmtree(home, ignore_errors=True)


#: Only limits the wait: the server would live 600 s, so gone at all means it was ended.
GONE_WITHIN = 30


async def test_no_mcp_server_outlives_its_topic() -> None:
    async with topic_with_a_stubborn_server() as (c, t, marker, _):
        await c.delete_topic(t.id)
        assert await until(lambda: not marked(marker), GONE_WITHIN), "the MCP server outlived its topic"


async def test_no_mcp_server_outlives_a_daemon_stop() -> None:
    async with topic_with_a_stubborn_server() as (_, _t, marker, d):
        assert await d.terminate() == 0
        assert await until(lambda: not marked(marker), GONE_WITHIN), "the MCP server outlived the daemon"
