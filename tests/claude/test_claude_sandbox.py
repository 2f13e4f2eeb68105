"""The Claude Code driver under a confined sandbox policy, through the real daemon, against
the fake Messages API (issue 23).

The fake API listens on the host's 127.0.0.1, which a sandbox with its own network namespace
reaches only through the loopback bridge: the confined policies here are `network =
"loopback"` with the fake's port, and `network = "shared"`. The CLI's Bash tool then tries to
read a canary file in the user's home (a folder outside /tmp, given to the daemon as HOME):
under `confined` the home is an empty tmpfs; unconfined, the same turn reads the canary.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from hostd.client import open_client
from hostd.shell.drivers.sandbox import probe
from hostd.shell.paths import Paths
from tests.claude.driver_peer import offline_env
from tests.claude.in_daemon import start_daemon, tool_outputs, turn_allowing_tools
from tests.dirs import made_dir
from tests.fakes.anthropic_api import FakeAnthropicAPI, Rule, has_tool_result, text, tool_use

pytestmark = [pytest.mark.claude, pytest.mark.e2e]

SUPPORT = probe()
TIMEOUT = 90


@pytest.fixture
def user_home() -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="hdcs", dir="/var/tmp"))
    (root / "home").mkdir()
    (root / "home" / "canary.txt").write_text("canary-secret")
    try:
        yield root / "home"
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize(
    "policy",
    [
        pytest.param(
            {"mode": "confined", "network": "loopback"},
            marks=pytest.mark.skipif(not SUPPORT.available, reason=SUPPORT.reason),
            id="confined-loopback",
        ),
        pytest.param(
            {"mode": "confined", "network": "shared"},
            marks=pytest.mark.skipif(not SUPPORT.available, reason=SUPPORT.reason),
            id="confined-shared",
        ),
        pytest.param("none", id="none"),
    ],
)
async def test_claude_tool_cannot_read_the_users_home_when_confined(
    home: Path, user_home: Path, policy: Any
) -> None:
    paths = Paths.under(home)
    canary = user_home / "canary.txt"
    rules = [
        Rule(has_tool_result, text("Done.")),
        Rule(lambda req: True, tool_use("Bash", {"command": f"cat {canary}"})),
    ]
    with FakeAnthropicAPI(rules) as api:
        if isinstance(policy, dict) and policy["network"] == "loopback":
            policy = {**policy, "ports": [int(api.base_url.rsplit(":", 1)[1].strip("/"))]}
        env = offline_env(api.base_url, HOME=str(user_home))
        with trio.fail_after(TIMEOUT):
            async with trio.open_nursery() as nursery:
                await start_daemon(nursery, paths, env, sandboxed=True)
                async with open_client(paths) as client:
                    topic = await client.create_topic(
                        driver="claude-code", working_dir=made_dir(home / "work"),
                        options={"sandbox": policy},
                    )
                    ended, rows = await turn_allowing_tools(client, topic.id, "read the canary")
                    await client.shutdown()
    assert ended.status == "success", ended
    outputs = tool_outputs(rows)
    assert outputs, rows
    if policy == "none":
        assert "canary-secret" in outputs[0]
    else:
        assert "canary-secret" not in outputs[0]
        assert "No such file or directory" in outputs[0]
    assert rows[-1].role == "assistant"
