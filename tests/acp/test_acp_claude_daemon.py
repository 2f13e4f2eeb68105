"""The ACP driver with the REAL claude-agent-acp (npm, installed by scripts/setup) behind the
real daemon and the client library, pointed at the fake Anthropic Messages API: text, a tool
with permission, stop mid-tool then two sends, a queued message, and resume in a new driver
process (a restarted daemon). Every window's transcript equals the stored history.

Run against both packages: the current `@agentclientprotocol/claude-agent-acp` (what a
user installs today) and the project's last release under its old name,
`@zed-industries/claude-agent-acp` 0.23.1, whose defects (a cancelled session one prompt
late, an agent that outlives its stdin) the driver absorbs.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from hostd.client import Client, Subscription, open_client
from hostd.shell.daemon import DaemonConfig, serve_daemon
from hostd.shell.drivers.registry import DriverRegistry
from hostd.shell.drivers.supervisor import Supervisor
from hostd.shell.paths import Paths
from hostd_acp.spec import make_spec
from hostd_protocol.client_messages import ApprovalRequested, MessageRow
from hostd_protocol.common import ApprovalOption, ToolCall, ToolResult
from tests.acp.support import (
    CLAUDE_AGENT_ACP,
    OLD_CLAUDE_AGENT_ACP,
    base_env,
    claude_settings,
    write_agents_file,
)
from tests.fakes.anthropic_api import (
    FakeAnthropicAPI,
    RecordedRequest,
    Rule,
    text,
    tool_use,
    user_says,
)
from tests.polling import eventually
from tests.turns import text_of, until_turn_ended

pytestmark = [
    pytest.mark.e2e,
    # Under CI (scripts/setup ran) a missing agent is a failure, not a skip.
    pytest.mark.skipif(
        not CLAUDE_AGENT_ACP.exists() and os.environ.get("CI") != "true",
        reason="claude-agent-acp not installed: run scripts/setup",
    ),
]

TIMEOUT = 120


def _after_tool(prompt: str) -> Any:
    def pred(req: RecordedRequest) -> bool:
        return req.last_user_has_tool_result and (req.last_user_text or "").strip() == prompt

    return pred


def _remembers(word: str) -> Any:
    def pred(req: RecordedRequest) -> bool:
        return (req.last_user_text or "").strip() == "what came first?" and word in [
            t.strip() for t in req.user_texts
        ]

    return pred


RULES = [
    Rule(user_says("hello"), text("Hi there!")),
    Rule(user_says("run it"), tool_use("Bash", {"command": "touch made.txt"})),
    Rule(_after_tool("run it"), text("Ran it.")),
    Rule(user_says("slow tool"), tool_use("Bash", {"command": "touch started.txt; sleep 60"})),
    Rule(_after_tool("slow tool"), text("Slept.")),
    Rule(user_says("one"), text("Answer one.")),
    Rule(user_says("two"), text("Answer two.")),
    Rule(user_says("three"), text("Answer three.")),
    Rule(_remembers("hello"), text("You said hello first.")),
    Rule(user_says("what came first?"), text("I do not know.")),
]


def claude_env(home: Path, base_url: str) -> dict[str, str]:
    return base_env(
        home,
        ANTHROPIC_BASE_URL=base_url,
        ANTHROPIC_API_KEY="test-key",
        CLAUDE_CODE_MAX_RETRIES="2",
        CLAUDE_CONFIG_DIR=str(home / ".claude"),
        TMPDIR=str(home / "tmp"),
    )


def claude_agents_file(home: Path, agent: Path = CLAUDE_AGENT_ACP, settings: bool = True) -> None:
    write_agents_file(home, {"claude": (str(agent), [])})
    (home / "tmp").mkdir(parents=True, exist_ok=True)
    if settings:
        claude_settings(home / ".claude")


#: Per package: its command and the permission options it offers for a Bash call.
PEERS = {
    "current": (CLAUDE_AGENT_ACP, [("allow_once", "Yes"), ("reject_once", "No")]),
    "zed-0.23.1": (
        OLD_CLAUDE_AGENT_ACP,
        [("allow_always", "Always Allow"), ("allow_once", "Allow"), ("reject_once", "Reject")],
    ),
}


@pytest.fixture(params=list(PEERS))
def peer(request: pytest.FixtureRequest) -> tuple[Path, list[tuple[str, str]]]:
    command, options = PEERS[request.param]
    if not command.exists() and os.environ.get("CI") != "true":
        pytest.skip(f"{command} not installed: run scripts/setup")
    return command, options


@pytest.fixture
def home() -> Iterator[Path]:
    # Short: the socket path must stay under the AF_UNIX limit, and the CLI's temp sockets too.
    path = Path(tempfile.mkdtemp(prefix="hac", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


async def wait_for_file(path: Path) -> None:
    # The Bash tool runs in the agent's CLI (another process): its first visible effect is
    # this file, and there is nothing to wait on but the file itself.
    assert await eventually(path.exists, 60), f"{path} was never written"


def comparable(rows: list[MessageRow]) -> list[tuple[Any, ...]]:
    return [(r.id, r.role, r.status, r.parts, r.error) for r in rows if r.role != "marker"]


async def check_windows_match_history(client: Client, topic_id: str, sub: Subscription) -> None:
    stored = (await client.history(topic_id, limit=500)).rows
    assert sub.transcript is not None
    assert comparable(sub.transcript.rows()) == comparable(stored)


async def test_claude_agent_acp_through_the_daemon(
    home: Path, peer: tuple[Path, list[tuple[str, str]]]
) -> None:
    command, options = peer
    paths = Paths.under(home)
    workdir = home / "work"
    workdir.mkdir(parents=True, exist_ok=True)
    # No permission mode in the CLI's settings: the topic's `mode` option picks Claude
    # Code's `default` mode (the current package would start in `auto`, asking nothing).
    claude_agents_file(home, command, settings=False)
    registry = DriverRegistry.from_specs(make_spec())
    with FakeAnthropicAPI(RULES) as api:
        env = claude_env(home, api.base_url)

        def daemon(task_status: Any = trio.TASK_STATUS_IGNORED) -> Any:
            return serve_daemon(
                paths,
                config=DaemonConfig(default_driver="acp"),
                registry=registry,
                supervisor_factory=lambda r: Supervisor(r, base_env=env),
                task_status=task_status,
            )

        with trio.fail_after(TIMEOUT):
            async with trio.open_nursery() as nursery:
                await nursery.start(daemon)
                async with open_client(paths) as client, open_client(paths) as other:
                    topic = await client.create_topic(
                        title="acp",
                        driver="acp",
                        working_dir=str(workdir),
                        options={"agent": "claude", "mode": "default"},
                    )
                    # Two windows: `sub` acts, `watcher` only watches.
                    async with client.attach(topic.id) as sub, other.attach(topic.id) as watcher:
                        # 1. text
                        await client.send(topic.id, "hello", intent="start")
                        hello = await until_turn_ended(sub)

                        # 2. a tool with permission, allowed from a window (agent's allow-once)
                        offered: list[ApprovalOption] = []

                        async def allow(item: Any) -> None:
                            if isinstance(item, ApprovalRequested):
                                offered.extend(item.approval.options)
                                await client.answer_approval(topic.id, item.approval.id, allow=True)

                        await client.send(topic.id, "run it", intent="start")
                        tool = await until_turn_ended(sub, allow)

                        # 3. stop mid-tool
                        stopping: list[bool] = []

                        async def allow_then_stop(item: Any) -> None:
                            if isinstance(item, ApprovalRequested):
                                await client.answer_approval(topic.id, item.approval.id, allow=True)
                                await wait_for_file(workdir / "started.txt")
                                stopping.append(True)
                                await client.stop(topic.id)

                        await client.send(topic.id, "slow tool", intent="start")
                        stopped = await until_turn_ended(sub, allow_then_stop)

                        # 4. two sends after the stop; the second one queued behind the first
                        await client.send(topic.id, "one", intent="start")
                        await client.send(topic.id, "two", intent="queue")
                        one = await until_turn_ended(sub)
                        two = await until_turn_ended(sub)
                        for _ in range(5):  # hello, run it, slow tool, one, two
                            await until_turn_ended(watcher)
                        await check_windows_match_history(client, topic.id, sub)
                        await check_windows_match_history(client, topic.id, watcher)
                        rows_before = sub.transcript.rows() if sub.transcript else []
                    await client.shutdown()

            # 5. a new daemon, so a new driver process: the ACP session resumes.
            async with trio.open_nursery() as nursery:
                await nursery.start(daemon)
                async with open_client(paths) as client:
                    async with client.attach(topic.id) as sub:
                        await client.send(topic.id, "what came first?", intent="start")
                        resumed = await until_turn_ended(sub)
                        await check_windows_match_history(client, topic.id, sub)
                        rows = sub.transcript.rows() if sub.transcript else []
                    await client.shutdown()

    for end in (hello, tool, one, two, resumed):
        assert end.status == "success", end
    assert stopped.status == "stopped", stopped
    assert stopping == [True]
    assert (workdir / "made.txt").exists()

    messages = [r for r in rows if r.role != "marker"]
    said = [(r.role, r.status, text_of(r)) for r in messages]
    assert said[0:2] == [("user", "success", "hello"), ("assistant", "success", "Hi there!")]
    assert said[2] == ("user", "success", "run it")
    assert [(o.kind, o.label) for o in offered] == options
    run_it = messages[3]
    calls = [p for p in run_it.parts if isinstance(p, ToolCall)]
    results = [p for p in run_it.parts if isinstance(p, ToolResult)]
    assert [c.name for c in calls] == ["Bash"]
    assert calls[0].input.get("command") == "touch made.txt"
    assert len(results) == 1 and not results[0].is_error
    assert text_of(run_it).endswith("Ran it.")
    assert said[4] == ("user", "success", "slow tool")
    slow = messages[5]
    assert slow.status == "stopped"
    assert [p.name for p in slow.parts if isinstance(p, ToolCall)] == ["Bash"]
    # Each answer under its own message, in order (the adapter's one-late defect absorbed).
    assert said[6:] == [
        ("user", "success", "one"),
        ("assistant", "success", "Answer one."),
        ("user", "success", "two"),
        ("assistant", "success", "Answer two."),
        ("user", "success", "what came first?"),
        ("assistant", "success", "You said hello first."),
    ]
    assert comparable(rows_before) == comparable(rows[: len(rows_before)])
