"""What the Claude Code driver writes to the CLI: a turn's prompt, and steers as hook context."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from hostd_protocol.driver_messages import Redirect, Send

__all__ = ["format_steers", "prompt_of", "query_of"]


def format_steers(steers: list[Redirect]) -> str:
    """The additionalContext that carries steers to the model."""
    texts = [s.text for s in steers]
    if len(texts) == 1:
        return (
            "The user sent a new message while you were working. Take it into account "
            f"from now on:\n{texts[0]}"
        )
    joined = "\n".join(f"{i}. {t}" for i, t in enumerate(texts, 1))
    return (
        "The user sent new messages while you were working. Take them into account "
        f"from now on:\n{joined}"
    )


def prompt_of(send: Send) -> str:
    """What the CLI is sent for a turn. The host sends `history` only to a fresh session
    (after a rewind or fork, or a lost resume token): the CLI has no transcript of it, so the
    earlier conversation goes first, in tags the model reads as context. A slash command
    (`/compact`) must stay the whole prompt, so it never carries history."""
    if not send.history or send.text.lstrip().startswith("/"):
        return send.text
    turns = "\n".join(f"<{m.role}>\n{m.text}\n</{m.role}>" for m in send.history)
    return (
        "This conversation continues an earlier one; here it is, oldest first:\n"
        f"<conversation>\n{turns}\n</conversation>\n\n{send.text}"
    )


def query_of(send: Send) -> str | AsyncIterator[dict[str, Any]]:
    """What `client.query()` is given: the prompt text, or, with images (protocol 1.5), one
    user message whose content is the images (Messages API image blocks) and then the text."""
    text = prompt_of(send)
    if not send.attachments:
        return text
    content: list[dict[str, Any]] = [
        {"type": "image", "source": {"type": "base64", "media_type": a.media_type, "data": a.data}}
        for a in send.attachments
    ]
    content.append({"type": "text", "text": text})

    async def one_message() -> AsyncIterator[dict[str, Any]]:
        yield {"type": "user", "message": {"role": "user", "content": content}, "parent_tool_use_id": None}

    return one_message()
