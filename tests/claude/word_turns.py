"""Word-keyed Claude Code turns on the fake Messages API, shared by the topic-operation tests.

The fake answers "<Word> answer." to a user message ending in that word (not to a tool
result), and a test finds the one request a word was sent in to check what the model saw.
`start_daemon` runs the real daemon with the Claude Code driver (and any other specs) on the
offline environment that points the CLI at the fake.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping

import trio

from hostd.shell.daemon import DaemonConfig, serve_daemon
from hostd.shell.drivers.registry import DriverRegistry
from hostd.shell.drivers.supervisor import Supervisor
from hostd.shell.paths import Paths
from hostd_claude_code.spec import SPEC
from hostd_protocol.driver_spec import DriverSpec
from tests.fakes.anthropic_api import FakeAnthropicAPI, RecordedRequest, Rule, text

__all__ = ["conversation_for", "request_for", "says", "start_daemon", "word_rules"]


def says(word: str) -> Callable[[RecordedRequest], bool]:
    def pred(req: RecordedRequest) -> bool:
        last = (req.last_user_text or "").strip()
        return not req.last_user_has_tool_result and last.endswith(word)

    return pred


def word_rules(words: list[str]) -> list[Rule]:
    return [Rule(says(w), text(f"{w.capitalize()} answer."), times=None) for w in words]


def request_for(api: FakeAnthropicAPI, word: str) -> RecordedRequest:
    """The one request `word` was sent in."""
    reqs = [r for r in api.message_requests if says(word)(r)]
    assert len(reqs) == 1, [r.last_user_text for r in api.message_requests]
    return reqs[0]


def conversation_for(api: FakeAnthropicAPI, word: str) -> str:
    """The whole conversation the model was sent with `word` (JSON, for substring checks)."""
    return json.dumps(request_for(api, word).messages)


async def start_daemon(
    nursery: trio.Nursery, paths: Paths, env: Mapping[str, str], *more: DriverSpec
) -> None:
    """The real daemon (Claude Code by default, plus `more` drivers), started in `nursery`."""
    await nursery.start(
        lambda task_status: serve_daemon(
            paths,
            config=DaemonConfig(default_driver="claude-code"),
            registry=DriverRegistry.from_specs(SPEC, *more),
            supervisor_factory=lambda r: Supervisor(r, base_env=env),
            task_status=task_status,
        )
    )
