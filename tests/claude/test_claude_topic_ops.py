"""Rewind and fork with the Claude Code driver behind the real daemon, on the fake Messages API.

A rewind replaces the vendor session: the next request holds the history that is left (fed by
the host into the fresh session's first prompt), never the rewound messages. A fork starts
its own session from the copied history; after that both topics go on independently.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from hostd.client import Client, Subscription, open_client
from hostd.shell.paths import Paths
from tests.claude.driver_peer import offline_env
from tests.claude.in_daemon import start_daemon, text_of, until_turn_ended
from tests.claude.word_turns import conversation_for, word_rules
from tests.dirs import made_dir
from tests.fakes.anthropic_api import FakeAnthropicAPI

pytestmark = [pytest.mark.claude, pytest.mark.e2e]

WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta"]


RULES = word_rules(WORDS)


async def ask(client: Client, sub: Subscription, topic_id: str, word: str) -> None:
    await client.send(topic_id, word, intent="start")
    ended = await until_turn_ended(sub)
    assert ended.status == "success", ended


async def test_rewind_and_fork_with_claude_code(home: Path) -> None:
    paths = Paths.under(home)
    with FakeAnthropicAPI(RULES) as api:
        env = offline_env(api.base_url)
        # Six turns, several cold CLI starts: 121 s on a starved CPU (4-5x slower than an
        # idle one) met the old 120 s; the bound only ends a hang.
        with trio.fail_after(300):
            async with trio.open_nursery() as nursery:
                await start_daemon(nursery, paths, env)
                async with open_client(paths) as client:
                    topic = await client.create_topic(
                        title="claude", driver="claude-code", working_dir=made_dir(home / "work")
                    )
                    async with client.attach(topic.id) as sub:
                        await ask(client, sub, topic.id, "alpha")
                        await ask(client, sub, topic.id, "beta")
                        # The second turn resumed the vendor session: it holds alpha.
                        assert "Alpha answer." in conversation_for(api, "beta")
                        rows = (await client.history(topic.id)).rows
                        first_answer = rows[1].id
                        assert text_of(rows[1]) == "Alpha answer."

                        fork = await client.fork_topic(topic.id, first_answer)
                        assert await client.rewind(topic.id, first_answer) == [
                            rows[2].id,
                            rows[3].id,
                        ]
                        await ask(client, sub, topic.id, "gamma")
                        async with client.attach(fork.id) as fsub:
                            await ask(client, fsub, fork.id, "delta")
                            await ask(client, sub, topic.id, "epsilon")
                            await ask(client, fsub, fork.id, "zeta")
                        original = [text_of(r) for r in (await client.history(topic.id)).rows]
                        forked = [text_of(r) for r in (await client.history(fork.id)).rows]
                    await client.shutdown()

    # After the rewind: a fresh session, fed what is left (alpha), never the rewound beta.
    gamma = conversation_for(api, "gamma")
    assert "alpha" in gamma and "Alpha answer." in gamma
    assert "beta" not in gamma and "Beta answer." not in gamma
    # The fork: its own session, fed its copied history, nothing of the original after it.
    delta = conversation_for(api, "delta")
    assert "Alpha answer." in delta
    assert "beta" not in delta and "gamma" not in delta
    # Both go on independently: each resumed session holds its own turns only.
    epsilon = conversation_for(api, "epsilon")
    assert "Gamma answer." in epsilon and "delta" not in epsilon and "beta" not in epsilon
    zeta = conversation_for(api, "zeta")
    assert "Delta answer." in zeta and "gamma" not in zeta and "epsilon" not in zeta
    assert original == [
        "alpha", "Alpha answer.", "gamma", "Gamma answer.", "epsilon", "Epsilon answer."
    ]
    assert forked == ["alpha", "Alpha answer.", "delta", "Delta answer.", "zeta", "Zeta answer."]
