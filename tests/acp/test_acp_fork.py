"""Vendor fork with the ACP driver and the REAL claude-agent-acp (it lists `fork` in its
session capabilities) behind the real daemon, on the fake Messages API: a fork at the last
row is the agent's `session/fork` of the original's session, so the model gets the earlier
turn as the conversation it was (a user message, then the assistant's), not as history text
in one prompt. A rewind has no ACP counterpart: the new session is fed the kept history.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import trio

from hostd.client import Client, open_client
from hostd.shell.daemon import DaemonConfig, serve_daemon
from hostd.shell.drivers.registry import DriverRegistry
from hostd.shell.drivers.supervisor import Supervisor
from hostd.shell.paths import Paths
from hostd_acp.spec import make_spec
from tests.acp.support import CLAUDE_AGENT_ACP
from tests.acp.test_acp_claude_daemon import (
    claude_agents_file,
    claude_env,
    home,
    text_of,
    until_turn_ended,
)
from tests.dirs import made_dir
from tests.fakes.anthropic_api import FakeAnthropicAPI, RecordedRequest, Rule, text

__all__ = ["home"]  # the fixture

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        not CLAUDE_AGENT_ACP.exists() and os.environ.get("CI") != "true",
        reason="claude-agent-acp not installed: run scripts/setup",
    ),
]

WORDS = ["hello", "second", "third", "fourth", "fifth"]


def says(word: str) -> Any:
    """The prompt ends with `word` (a host-fed prompt has the history before it)."""

    def pred(req: RecordedRequest) -> bool:
        last = (req.last_user_text or "").strip()
        return not req.last_user_has_tool_result and last.endswith(word)

    return pred


RULES = [Rule(says(w), text(f"{w.capitalize()} answer."), times=None) for w in WORDS]


def request_ending(api: FakeAnthropicAPI, word: str) -> RecordedRequest:
    reqs = [
        r
        for r in api.message_requests
        if r.has_tools and (r.last_user_text or "").strip().endswith(word)
    ]
    assert len(reqs) == 1, [r.last_user_text for r in api.message_requests]
    return reqs[0]


def assistant_texts(req: RecordedRequest) -> list[str]:
    out = []
    for message in req.body["messages"]:
        if message.get("role") == "assistant":
            content = message.get("content")
            blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
            out += [b.get("text", "") for b in blocks if b.get("type") == "text"]
    return out


async def ask(client: Client, topic_id: str, word: str) -> str:
    async with client.attach(topic_id) as sub:
        await client.send(topic_id, word, intent="start")
        ended = await until_turn_ended(sub)
    assert ended.status == "success", ended
    return text_of((await client.history(topic_id)).rows[-1])


async def test_fork_is_the_agents_session_fork(home: Path) -> None:
    paths = Paths.under(home)
    claude_agents_file(home)
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

        with trio.fail_after(150):
            async with trio.open_nursery() as nursery:
                await nursery.start(daemon)
                async with open_client(paths) as client:
                    # A working dir of its own, which the fork keeps: the agent's CLI (the
                    # one claude-agent-acp 0.23.1 bundles) finds a session to fork only
                    # under the working dir it was made in. (Forks of topics in hostd's
                    # per-topic default workspaces are refused by it, and take the host
                    # path: the driver logs why.)
                    topic = await client.create_topic(
                        title="acp",
                        driver="acp",
                        working_dir=made_dir(home / "work"),
                        options={"agent": "claude"},
                    )
                    assert await ask(client, topic.id, "hello") == "Hello answer."
                    rows = (await client.history(topic.id)).rows
                    fork = await client.fork_topic(topic.id, rows[-1].id)
                    assert await ask(client, fork.id, "second") == "Second answer."
                    # Both go on independently.
                    assert await ask(client, topic.id, "third") == "Third answer."
                    assert await ask(client, fork.id, "fourth") == "Fourth answer."
                    # A rewind of the original to its first answer: the host path.
                    await client.rewind(topic.id, rows[-1].id)
                    assert await ask(client, topic.id, "fifth") == "Fifth answer."
                    await client.shutdown()

    second = request_ending(api, "second")
    assert assistant_texts(second) == ["Hello answer."]  # the agent's own copy
    assert "<conversation>" not in json.dumps(second.body["messages"])
    assert assistant_texts(request_ending(api, "third")) == ["Hello answer."]
    assert assistant_texts(request_ending(api, "fourth")) == ["Hello answer.", "Second answer."]
    fifth = request_ending(api, "fifth")
    whole = json.dumps(fifth.body["messages"])
    assert assistant_texts(fifth) == [] and "<conversation>" in whole
    assert "Hello answer." in whole and "third" not in whole
