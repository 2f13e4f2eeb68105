"""Vendor fork and rewind: when a new vendor session can start as a copy of an old one.

After a fork or a rewind the topic needs a vendor session that remembers exactly its visible
history. Two ways to get one, and the host picks:

- the vendor's own fork: the driver starts its session as a copy of an earlier one
  (`Init.fork_from`), so the model sees the conversation as it really went (tool calls,
  thinking, its own compaction) and nothing is re-sent as text;
- the host path (always possible): a fresh vendor session whose first turn is fed the
  host's history (`Send.history`).

Rules this module guards:

- A turn's answer row remembers where the vendor session stood at the turn's end: the
  driver's `Checkpoint` (drivers declaring `rewind_session`) is kept in the row's
  `meta["checkpoint"]` (a `RowUpdated`, so windows and the store agree). A fork copies rows
  with their meta, so a fork's rows keep theirs.
- A fork at row R starts from R's checkpoint; without one, from the topic's resume token when
  R is the last row of the history (the vendor session holds exactly what the fork copies).
  Otherwise nothing is offered: the vendor session holds rows the fork does not.
- A rewind that keeps the rows up to R starts from R's checkpoint, or fresh. A resume token
  is never a rewind's source: it names the session with the rows that were just cut.
- Answers not chosen (a multi-answer turn's alternatives) are no history: they are skipped
  when finding "the last row", and their checkpoints are never offered (the topic's session
  wrote lane 0's answer; when another was chosen, that checkpoint is not the history).
- Offering is not deciding: the driver has the last word, because only it knows whether the
  source can still be found (a transcript deleted, another machine, a sandbox). The session
  continues the copy only when the `Ready` answering an `Init` with `fork_from` declares
  `fork_session`; otherwise it is fresh, and a fresh session's first turn is fed the history
  (`feeds_history`). A driver that does not know `fork_from` ignores it (msgspec drops
  unknown fields) and declares nothing: old drivers keep the host path.
"""

from __future__ import annotations

from typing import Any

from hostd.core.rows import LiveRow
from hostd.core.runtime_rows import UNSENT_STATUSES, RowBook
from hostd_protocol.common import Capabilities

__all__ = [
    "CHECKPOINT_KEY",
    "checkpoint_of",
    "feeds_history",
    "fork_source_token",
    "rewind_source_token",
    "with_checkpoint",
]

#: The row meta key holding a `Checkpoint` token.
CHECKPOINT_KEY = "checkpoint"


def checkpoint_of(live: LiveRow) -> str | None:
    """The vendor checkpoint kept on a row, if any: never an answer not chosen (its
    conversation is not the history)."""
    if live.base.alternative:
        return None
    token = live.base.meta.get(CHECKPOINT_KEY)
    return token if isinstance(token, str) and token else None


def with_checkpoint(live: LiveRow, token: str) -> dict[str, Any]:
    """The row's meta with `token` kept in it."""
    return {**live.base.meta, CHECKPOINT_KEY: token}


def _history(live: LiveRow) -> bool:
    """Whether the row is part of the history a vendor session must hold."""
    return live.status not in UNSENT_STATUSES and not live.base.alternative


def _last_placed(book: RowBook) -> LiveRow | None:
    for live in reversed(book.ordered()):
        if _history(live):
            return live
    return None


def fork_source_token(book: RowBook, row_id: str, resume_token: str | None) -> str | None:
    """The vendor session a fork at `row_id` may start from, or None for the host path."""
    target = book.get(row_id)
    if target is None:
        return None
    if (token := checkpoint_of(target)) is not None:
        return token
    last = _last_placed(book)
    if resume_token and last is not None and last.id == target.id:
        return resume_token
    return None


def rewind_source_token(book: RowBook, cut: int) -> str | None:
    """The vendor session a rewind cutting at position `cut` may start from: the checkpoint
    of the last row it keeps, or None (a fresh session, fed the history)."""
    kept = [live for live in book.ordered() if live.position < cut and _history(live)]
    return checkpoint_of(kept[-1]) if kept else None


def feeds_history(*, resumed: bool, offered: bool, capabilities: Capabilities) -> bool:
    """Whether a newly opened session's first turn must be fed the host's history.

    `resumed`: it was opened with the topic's resume token (the vendor remembers). `offered`:
    its `Init` named a source (`fork_from`). A driver that needs history every turn gets it
    anyway (`needs_history`), so this says no for it.
    """
    if capabilities.needs_history or resumed:
        return False
    return not (offered and capabilities.fork_session)
