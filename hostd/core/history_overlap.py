"""History for drivers that need it: stored history + client-sent messages, overlap removed.

Pure. Used by pipeline step 7 when the driver's capabilities say `needs_history`.

A client may send its own transcript along with a message (`SendMessage.history`). The
stored history window and that transcript are two windows onto the same conversation; the
driver must see their union once, in order. Yao's rule ("longest suffix of history equal to a
prefix of the input") is the core, and this module fixes its known traps:

1. *Identity first.* Two messages that both carry an id are the same message iff the ids are
   equal, whatever their text; only when an id is missing are role and normalized text
   compared. So a deliberate repeat ("yes", later "yes" again) with ids is never merged.
2. *Transcript longer than the window.* The overlap may start anywhere in the transcript, not
   only at its start: when the whole stored window lies inside the transcript, the transcript
   is the answer (nothing duplicated, nothing reordered). A stale transcript (one that ends
   before the store does) is aligned the same way.
3. *Shapes.* Stored rows become `HistoryMessage`s through `history_message`, the one place
   a row turns into history (text parts joined; an answer that ran tools also carries its
   text and tool parts in order, so a stateless driver can rebuild its tool calls; thinking
   and markers left out); text is compared whitespace-normalized.
4. *System message at the input's start.* It never takes part in matching (the store has no
   system rows, so it would break every overlap); it is kept, first, in the driver's history.
5. *The new input is never matched.* The user's new text is the turn's input, apart from the
   transcript, so it can never be "overlapped away" (Yao swallowed a repeated short message).
   A transcript-only send (OpenAI style, no text) takes its trailing user message as the new
   input unless that message's id is already stored.
6. *Only the new input is stored.* Client-sent context is passed to the driver, never stored,
   so an assistant turn sent by a client can never become a user row.
7. *Window in whole turns.* `history_window` counts messages but never starts with an
   assistant answer cut off from its question. It is also bounded in bytes (oldest messages
   leave first); a tool call and its result live in one message, so they leave together.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import msgspec

from hostd.core.rows import attachments_of
from hostd_protocol.client_messages import MessageRow
from hostd_protocol.common import (
    Attachment,
    Chunk,
    HistoryMessage,
    TextDelta,
    ToolCall,
    ToolResult,
)
from hostd_protocol.limits import MAX_DRIVER_HISTORY_BYTES

#: Row statuses whose content belongs to the conversation (queued/draft rows were never sent,
#: pending rows are the turn being answered).
_HISTORY_STATUSES = frozenset({"success", "error", "stopped"})


@dataclass(frozen=True)
class MergedHistory:
    """The result of merging stored history with what a client sent."""

    #: History for the driver, oldest first, without the new input.
    messages: list[HistoryMessage]
    #: The genuinely new user input of this turn (the only thing to store), or None.
    new_input: HistoryMessage | None
    #: How many client-sent messages were already in the stored window.
    overlap: int = 0
    #: Client-sent messages the store did not have (passed to the driver, never stored).
    client_only: list[HistoryMessage] = field(default_factory=list)


def normalize(text: str) -> str:
    """Text as compared: whitespace runs collapsed, ends stripped (clients re-wrap text)."""
    return " ".join(text.split())


def same_message(a: HistoryMessage, b: HistoryMessage) -> bool:
    """Identity when both carry an id; otherwise role and normalized text."""
    if a.id and b.id:
        return bool(a.id == b.id)
    return bool(a.role == b.role and normalize(a.text) == normalize(b.text))


def row_text(row: MessageRow) -> str:
    """The visible text of a row: its text parts, joined."""
    return "".join(p.text for p in row.parts if isinstance(p, TextDelta))


def history_message(
    role: str, parts: Iterable[Chunk], row_id: str, attachments: Sequence[Attachment] = ()
) -> HistoryMessage | None:
    """One user or assistant row as history, or None when it holds nothing a model can read.

    An answer with tool parts keeps its text and tool parts in order (`HistoryMessage.parts`);
    a user row keeps its images (`attachments`); a row with neither text nor tools (an empty
    or thinking-only answer) is no history.
    """
    assert role in ("user", "assistant"), role
    kept: list[Chunk] = [p for p in parts if isinstance(p, TextDelta | ToolCall | ToolResult)]
    text = "".join(p.text for p in kept if isinstance(p, TextDelta))
    has_tools = any(isinstance(p, ToolCall | ToolResult) for p in kept)
    if not text and not has_tools:
        return None
    return HistoryMessage(
        role="user" if role == "user" else "assistant",
        text=text,
        id=row_id,
        parts=kept if has_tools else [],
        attachments=list(attachments) if role == "user" else [],
    )


def rows_to_history(rows: Sequence[MessageRow]) -> list[HistoryMessage]:
    """Stored rows as history messages: user/assistant rows that were part of the conversation
    and hold text or tool calls; markers, queued/draft/pending rows and empty answers are
    left out."""
    out: list[HistoryMessage] = []
    for row in rows:
        if row.role == "marker" or row.status not in _HISTORY_STATUSES:
            continue
        message = history_message(row.role, row.parts, row.id, attachments_of(row.meta))
        if message is not None:
            out.append(message)
    return out


_size_encoder = msgspec.msgpack.Encoder()


def message_bytes(message: HistoryMessage) -> int:
    """What one history message weighs in a driver's `send` frame (encoded)."""
    return len(_size_encoder.encode(message))


def history_window(
    messages: Sequence[HistoryMessage], size: int, max_bytes: int = MAX_DRIVER_HISTORY_BYTES
) -> list[HistoryMessage]:
    """The newest `size` messages that fit in `max_bytes`, trimmed so the window starts at
    a user message.

    A window cut in the middle of a turn would hand the model an answer without its question.
    Messages leave whole, oldest first, so a tool call never leaves without its result.
    """
    if size <= 0:
        return []
    window = list(messages[-size:])
    total = sum(message_bytes(m) for m in window)
    while window and total > max_bytes:
        total -= message_bytes(window.pop(0))
    while window and window[0].role == "assistant":
        window.pop(0)
    return window


def _alignment(stored: Sequence[HistoryMessage], sent: Sequence[HistoryMessage]) -> tuple[int, int]:
    """(offset, overlap): `sent[j]` is `stored[j + offset]` for the overlapping j.

    Both are contiguous pieces of one conversation, so for a given offset the overlap is the
    whole intersection of the two and every position in it must match. Picks the longest
    such overlap; ties go to the later placement of `sent`, which keeps more of the client's
    messages (a duplicate is visible, a loss is not). (0, 0) when nothing overlaps.
    """
    n, m = len(stored), len(sent)
    best_offset, best_len = 0, 0
    # offset ranges so that at least one position overlaps: -(m-1) .. n-1
    for offset in range(-(m - 1), n):
        lo = max(0, -offset)  # first j in sent that lands inside stored
        hi = min(m, n - offset)  # one past the last
        length = hi - lo
        if length <= 0 or length < best_len:
            continue
        if all(same_message(sent[j], stored[j + offset]) for j in range(lo, hi)):
            best_offset, best_len = offset, length
    return best_offset, best_len


def merge_history(
    stored: Sequence[HistoryMessage],
    sent: Sequence[HistoryMessage] = (),
    text: str = "",
    *,
    text_id: str = "",
) -> MergedHistory:
    """Merge the stored window with a client transcript and the new input.

    Args:
        stored: the stored history window, oldest first (see `history_window`).
        sent: messages the client sent along, oldest first (may start with a system message).
        text: the user's new text; when empty, the transcript's trailing user message is the
            new input (unless its id is already stored).
        text_id: the new input's id (the user row id or the client's message id).
    """
    sent = list(sent)
    if text_id:
        # The new input may already be a stored row (the runtime stores the user row before
        # the turn starts) or the transcript's last entry: it goes to the driver once, as input.
        stored = [s for s in stored if s.id != text_id]
        if text and sent and sent[-1].id == text_id:
            sent.pop()
    system: list[HistoryMessage] = []
    if sent and sent[0].role == "system":
        system = [sent.pop(0)]

    new_input: HistoryMessage | None = None
    if text:
        new_input = HistoryMessage(role="user", text=text, id=text_id)
    elif sent and sent[-1].role == "user":
        last = sent[-1]
        if not (last.id and any(s.id == last.id for s in stored)):
            new_input = sent.pop()

    offset, overlap = _alignment(stored, sent)
    if overlap == 0:
        # Disjoint windows: the client's messages are context after what the store has.
        before, after = [], sent
    else:
        lo = max(0, -offset)
        before = sent[:lo]  # client messages older than the stored window
        after = sent[lo + overlap :]  # client messages newer than the stored window
    merged = before + list(stored) + after
    client_only = before + after
    # Belt and braces for identity: a client message whose id is stored appears once.
    stored_ids = {s.id for s in stored if s.id}
    seen: set[str] = set()
    deduped: list[HistoryMessage] = []
    for msg in merged:
        if msg.id:
            if msg.id in seen:
                continue
            seen.add(msg.id)
        deduped.append(msg)
    client_only = [c for c in client_only if not (c.id and c.id in stored_ids)]
    return MergedHistory(
        messages=system + deduped,
        new_input=new_input,
        overlap=overlap,
        client_only=client_only,
    )
