"""Word-keyed Claude Code turns on the fake Messages API, shared by the topic-operation tests.

The fake answers "<Word> answer." to a user message ending in that word (not to a tool
result), and a test finds the one request a word was sent in to check what the model saw.
The daemon they run on: `tests.claude.in_daemon.start_daemon`.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from tests.fakes.anthropic_api import FakeAnthropicAPI, RecordedRequest, Rule, text

__all__ = ["conversation_for", "request_for", "says", "word_rules"]


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
