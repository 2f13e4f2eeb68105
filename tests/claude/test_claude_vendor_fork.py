"""Vendor fork and rewind with the Claude Code driver behind the real daemon, on the fake
Messages API (`hostd.core.vendor_session`, `hostd_claude_code.fork`).

How a test tells the two paths apart, from the requests the CLI sends: through the vendor
copy (the CLI's own `fork_session`, `resume_session_at`) the earlier turns arrive as the
conversation they were: separate user and assistant messages. Through the host path (a fresh
session fed the host's history) they arrive as text inside the first user message, between
`<conversation>` tags, and no assistant message precedes it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio

from hostd.client import Client, open_client
from hostd.shell.drivers.sandbox import probe
from hostd.shell.paths import Paths
from tests.claude.driver_peer import offline_env
from tests.claude.in_daemon import start_daemon, text_of, until_turn_ended
from tests.claude.word_turns import request_for, word_rules
from tests.fakes.anthropic_api import FakeAnthropicAPI, RecordedRequest

pytestmark = [pytest.mark.claude, pytest.mark.e2e]

SUPPORT = probe()
WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "kappa", "omega"]


RULES = word_rules(WORDS)


def assistant_texts(req: RecordedRequest) -> list[str]:
    """The texts of the assistant messages the model was sent (earlier turns)."""
    out = []
    for message in req.body["messages"]:
        if message.get("role") != "assistant":
            continue
        content = message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        out += [b.get("text", "") for b in blocks if b.get("type") == "text"]
    return out


def as_vendor_copy(req: RecordedRequest, *answers: str) -> None:
    """The earlier turns came as the conversation itself (the CLI's copy of a session)."""
    assert assistant_texts(req) == list(answers)
    assert "<conversation>" not in json.dumps(req.body["messages"])


def as_host_history(req: RecordedRequest, *answers: str) -> None:
    """The earlier turns came as text in one prompt (a fresh session fed the history)."""
    assert assistant_texts(req) == []
    whole = json.dumps(req.body["messages"])
    assert "<conversation>" in whole and all(a in whole for a in answers)


async def ask(client: Client, topic_id: str, word: str) -> None:
    async with client.attach(topic_id) as sub:
        await client.send(topic_id, word, intent="start")
        ended = await until_turn_ended(sub)
    assert ended.status == "success", ended


async def texts(client: Client, topic_id: str) -> list[str]:
    return [text_of(r) for r in (await client.history(topic_id)).rows]


async def test_fork_and_rewind_use_the_clis_own_session_copy(home: Path) -> None:
    paths = Paths.under(home)
    with FakeAnthropicAPI(RULES) as api:
        env = offline_env(api.base_url)
        with trio.fail_after(180):
            async with trio.open_nursery() as nursery:
                await start_daemon(nursery, paths, env)
                async with open_client(paths) as client:
                    # Own working dirs: the CLI's transcripts sit under different project
                    # folders, and each topic has its own config dir (its state dir).
                    topic = await client.create_topic(title="claude", driver="claude-code")
                    await ask(client, topic.id, "alpha")
                    await ask(client, topic.id, "beta")
                    rows = (await client.history(topic.id)).rows
                    assert rows[3].meta["checkpoint"].count("@") == 1

                    # A fork at the last answer: the CLI copies the original's session.
                    fork = await client.fork_topic(topic.id, rows[3].id)
                    await ask(client, fork.id, "gamma")
                    as_vendor_copy(request_for(api, "gamma"), "Alpha answer.", "Beta answer.")

                    # Both go on independently, each in its own vendor session.
                    await ask(client, topic.id, "delta")
                    await ask(client, fork.id, "epsilon")
                    delta, epsilon = request_for(api, "delta"), request_for(api, "epsilon")
                    as_vendor_copy(delta, "Alpha answer.", "Beta answer.")
                    as_vendor_copy(epsilon, "Alpha answer.", "Beta answer.", "Gamma answer.")

                    # A rewind to the first answer: the CLI resumes at that turn's checkpoint;
                    # nothing rewound is in the next request.
                    cut = await client.rewind(topic.id, rows[1].id)
                    assert len(cut) == 4  # beta, its answer, delta, its answer
                    await ask(client, topic.id, "zeta")
                    zeta = request_for(api, "zeta")
                    as_vendor_copy(zeta, "Alpha answer.")
                    for gone in ("beta", "Beta answer.", "delta", "Delta answer."):
                        assert gone not in json.dumps(zeta.body["messages"])

                    # A fork at a user message has no checkpoint and is not the last row:
                    # the host path, fed the copied history (alpha, its answer, zeta).
                    rows = (await client.history(topic.id)).rows
                    host_fork = await client.fork_topic(topic.id, rows[2].id)
                    await ask(client, host_fork.id, "kappa")
                    as_host_history(request_for(api, "kappa"), "Alpha answer.")
                    # ...after which the fork's own session is resumed like any other.
                    await ask(client, host_fork.id, "omega")
                    assert assistant_texts(request_for(api, "omega"))[-1] == "Kappa answer."

                    original = await texts(client, topic.id)
                    forked = await texts(client, fork.id)
                    await client.shutdown()

    assert original == ["alpha", "Alpha answer.", "zeta", "Zeta answer."]
    assert forked == [
        "alpha", "Alpha answer.", "beta", "Beta answer.",
        "gamma", "Gamma answer.", "epsilon", "Epsilon answer.",
    ]


@pytest.mark.skipif(not SUPPORT.available, reason=SUPPORT.reason)
async def test_a_confined_fork_reads_its_source_session(home: Path) -> None:
    """Under a confined sandbox a driver sees only its own topic's folders, and the fork's
    source state dir read-only: enough to copy the session, nothing to write into."""
    paths = Paths.under(home)
    policy = {"mode": "confined", "network": "shared"}
    with FakeAnthropicAPI(RULES) as api:
        env = offline_env(api.base_url)
        with trio.fail_after(180):
            async with trio.open_nursery() as nursery:
                await start_daemon(nursery, paths, env, sandboxed=True)
                async with open_client(paths) as client:
                    topic = await client.create_topic(
                        driver="claude-code", options={"sandbox": policy}
                    )
                    await ask(client, topic.id, "alpha")
                    rows = (await client.history(topic.id)).rows
                    fork = await client.fork_topic(topic.id, rows[-1].id)
                    await ask(client, fork.id, "beta")
                    await client.shutdown()
    as_vendor_copy(request_for(api, "beta"), "Alpha answer.")
