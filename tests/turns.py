"""Following a turn through a client subscription, the one way the daemon-level tests of
every driver do it (the Claude Code, OpenAI and ACP daemon tests and the e2e topic tests
each had their own copy)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from hostd.client import Subscription
from hostd_protocol.client_messages import MessageRow, TopicEvent, TurnEnded
from hostd_protocol.common import TextDelta

__all__ = ["text_of", "until_turn_ended"]


async def until_turn_ended(
    sub: Subscription, on_event: Callable[[TopicEvent], Awaitable[None]] | None = None
) -> TurnEnded:
    """Follow `sub` (calling `on_event` on each event) until a turn ends."""
    async for item in sub:
        if on_event is not None:
            await on_event(item)
        if isinstance(item, TurnEnded):
            return item
    raise AssertionError("subscription ended before the turn did")


def text_of(row: MessageRow) -> str:
    """A stored row's text."""
    return "".join(p.text for p in row.parts if isinstance(p, TextDelta))
