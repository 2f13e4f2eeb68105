"""`/undo`, `/regenerate` and `/fork [N]` in `hostd chat` (pure: no I/O, easy to test).

- `/undo` removes the last message and its answer; `/regenerate` answers the last message
  again. Either stops a running answer to do so, so the chat asks first (`QUESTIONS`): `y`
  goes ahead, anything else keeps the answer running.
- `/fork [N]` copies the topic up to a row into a new topic, and the chat goes on there. `N`
  names the row the way the chat labels rows: `U2` (message 2 alone), `A2` / `A1a` / `A2.1`
  (that answer), or `2` (message 2 with everything answering it); no `N`: the last finished
  row. A row still being answered cannot be forked at (its text is not final).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from hostd.cli.chat_render import UNSENT, roll_labels
from hostd_protocol.client_messages import MessageRow

__all__ = ["QUESTIONS", "fork_row", "undo_row"]

#: What the chat asks before a command stops the running answer.
QUESTIONS = {
    "undo": "an answer is running: /undo stops it, then removes the last message and its "
    "answer. Stop and undo? y / n",
    "regenerate": "an answer is running: /regenerate stops it and answers the last message "
    "again. Stop and regenerate? y / n",
}

_LABEL = re.compile(r"^[UA]\d+(a|\.\d+)?$")


def _history(rows: Sequence[MessageRow]) -> list[MessageRow]:
    return [r for r in rows if r.status not in UNSENT]


def undo_row(rows: Sequence[MessageRow]) -> MessageRow | None:
    """The user row `/undo` rewinds to (it and everything after it leave the history)."""
    users = [r for r in _history(rows) if r.role == "user"]
    return users[-1] if users else None


def fork_row(rows: Sequence[MessageRow], arg: str) -> MessageRow | str:
    """The row `/fork arg` copies the topic up to (inclusive), or an error text."""
    history = _history(rows)
    if not arg:
        done = [r for r in history if r.status != "pending"]
        return done[-1] if done else "nothing to fork yet"
    labels = roll_labels(rows)
    word = arg.strip()
    wanted = word[:1].upper() + word[1:]  # `a2` is `A2`; `A1a` keeps its small `a`
    messages = sum(1 for r in history if r.role == "user")
    if word.isdigit():
        # Message N and what answers it: every row up to the next message.
        n = int(word)
        users = [r for r in history if r.role == "user"]
        if not 1 <= n <= len(users):
            return _no_row(word, messages)
        end = history.index(users[n]) if n < len(users) else len(history)
        row = history[end - 1]
    else:
        found = None
        if _LABEL.match(wanted):
            found = next((r for r in history if labels.get(r.id) == wanted), None)
        if found is None:
            return _no_row(word, messages)
        row = found
    if row.status == "pending":
        return f"{labels.get(row.id, 'that row')} is still being answered: fork at an earlier row, or wait"
    return row


def _no_row(word: str, messages: int) -> str:
    if not messages:
        return "nothing to fork yet"
    return (
        f"no row {word!r}: give a message number (1..{messages}) or a label as shown "
        "(U2, A2, A1a)"
    )
