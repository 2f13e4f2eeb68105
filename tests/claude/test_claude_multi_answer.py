"""Several models answering one message: the Claude Code driver (on the fake Messages API)
and the scripted driver answer together behind the real daemon, one of them failing.

The topic runs Claude Code (lane 0). `@flaky` (scripted, a script that fails) and `@steady`
(scripted, a script that answers and then prints the history it was sent) are assistants,
named with `also`. Checked: one lane failing stops nothing and the turn ends once; choosing
another answer is what the next turn's history holds (the request the fake API receives, and
the history the scripted driver was sent), never the answers not chosen.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from hostd.client import open_client
from hostd.shell.paths import Paths
from hostd_protocol.client_messages import MessageRow, TopicEvent, TurnEnded
from hostd_protocol.common import AnswerTarget
from hostd_scripted.spec import SPEC as SCRIPTED
from tests.claude.driver_peer import offline_env
from tests.claude.in_daemon import start_daemon, text_of
from tests.claude.word_turns import conversation_for, word_rules
from tests.dirs import made_dir
from tests.fakes.anthropic_api import FakeAnthropicAPI

pytestmark = [pytest.mark.claude, pytest.mark.e2e]

WORDS = ["alpha", "beta", "gamma"]
FLAKY = AnswerTarget(assistant="flaky")
STEADY = AnswerTarget(assistant="steady")


RULES = word_rules(WORDS)


def lanes(rows: list[MessageRow], turn_id: str) -> list[tuple[int, str, str, bool]]:
    return [
        (r.lane, r.status, text_of(r), r.alternative)
        for r in rows
        if r.turn_id == turn_id and r.role == "assistant"
    ]


async def test_claude_and_scripted_answer_together(home: Path) -> None:
    paths = Paths.under(home)
    folder = paths.config_dir / "assistants"
    folder.mkdir(parents=True)
    # A scenario that starts with "/" is a script (the scripted driver's README).
    (folder / "flaky.toml").write_text(
        'driver = "scripted"\n[options]\nscenario = "/text Half an\\n/error flaky failed"\n'
    )
    (folder / "steady.toml").write_text(
        'driver = "scripted"\n[options]\nscenario = "/text Steady answer.\\n/history"\n'
    )
    with FakeAnthropicAPI(RULES) as api:
        env = offline_env(api.base_url)
        with trio.fail_after(120):
            async with trio.open_nursery() as nursery:
                await start_daemon(nursery, paths, env, SCRIPTED)
                async with open_client(paths) as client:
                    topic = await client.create_topic(
                        title="two models", driver="claude-code", working_dir=made_dir(home / "work")
                    )
                    async with client.attach(topic.id) as sub:
                        seen: list[TopicEvent] = []

                        async def turn(word: str, *also: AnswerTarget) -> tuple[str, TurnEnded]:
                            sent = await client.send(topic.id, word, "start", also=list(also))
                            async for ev in sub:
                                seen.append(ev)
                                if isinstance(ev, TurnEnded) and ev.turn_id == sent.turn_id:
                                    return sent.turn_id, ev
                            raise AssertionError("the subscription ended")

                        # 1. Claude answers, the flaky scripted lane fails: the turn ends
                        #    once, successfully, with Claude's answer chosen.
                        t1, ended = await turn("alpha", FLAKY)
                        assert ended.status == "success"
                        rows = (await client.history(topic.id)).rows
                        assert lanes(rows, t1) == [
                            (0, "success", "Alpha answer.", False),
                            (1, "error", "Half an", True),
                        ]
                        flaky = next(r for r in rows if r.turn_id == t1 and r.lane == 1)
                        assert "flaky failed" in flaky.error

                        # 2. Both answer; the user chooses the scripted one.
                        t2, ended = await turn("beta", STEADY)
                        assert ended.status == "success"
                        rows = (await client.history(topic.id)).rows
                        steady = next(r for r in rows if r.turn_id == t2 and r.lane == 1)
                        # The scripted lane was sent the history: alpha and Claude's answer,
                        # not the flaky answer that was not chosen.
                        assert text_of(steady) == (
                            "Steady answer.user: alpha\nassistant: Alpha answer."
                        )
                        await client.choose_answer(topic.id, steady.id)
                        rows = (await client.history(topic.id)).rows
                        assert [a[3] for a in lanes(rows, t2)] == [True, False]

                        # 3. Claude's next turn holds the chosen answer only.
                        t3, ended = await turn("gamma")
                        assert ended.status == "success"
                        rows = (await client.history(topic.id)).rows
                        turn_ends = [e.turn_id for e in seen if isinstance(e, TurnEnded)]
                    await client.shutdown()

    assert turn_ends == [t1, t2, t3]  # exactly one end per turn
    gamma = conversation_for(api, "gamma")
    assert "alpha" in gamma and "Alpha answer." in gamma
    assert "beta" in gamma and "Steady answer." in gamma
    assert "Beta answer." not in gamma  # Claude's own answer to beta was not chosen
    assert "Half an" not in gamma and "flaky failed" not in gamma
    assert [text_of(r) for r in rows if not r.alternative] == [
        "alpha",
        "Alpha answer.",
        "beta",
        text_of(steady),
        "gamma",
        "Gamma answer.",
    ]
