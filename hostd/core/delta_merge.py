"""Consecutive text (or thinking) deltas of one turn merged into one chunk event (sans-IO).

Drivers stream an answer as many small deltas (an SDK's tokens, a bench's 64-character
chunks); one pipe read often holds hundreds. Every stage after the pipe (bounds, redaction,
the runtime, the encoder, every window's queue, the store) costs per event, so the session
merges a read's deltas right after decoding them, and the topic's pump merges again across
the batches it takes at once. The text is exactly the concatenation, so a row reads the
same; a merged delta stays within `MAX_CHUNK_CHARS` (a single delta over it is left alone
for `payload_bounds` to split).
"""

from __future__ import annotations

from hostd_protocol.common import TextDelta, ThinkingDelta
from hostd_protocol.driver_messages import ChunkEvent, DriverEvent
from hostd_protocol.limits import MAX_CHUNK_CHARS

__all__ = ["coalesce_deltas"]


def coalesce_deltas(events: list[DriverEvent]) -> list[DriverEvent]:
    """Consecutive text (or thinking) deltas of one turn merged into one chunk.

    The text is exactly the concatenation, so a row reads the same; what changes is that
    the runtime, the encoder, every window's queue and the store see one event per pipe read
    instead of one per chunk (the lever that keeps the daemon off the critical path). A merged
    delta stays within `MAX_CHUNK_CHARS` (the limit `payload_bounds` split the driver's at).
    """
    if len(events) < 2:
        return events
    # The loop runs once per chunk a driver sent (hundreds per pipe read): exact-type checks
    # and locals instead of isinstance with a union and attribute lookups.
    out: list[DriverEvent] = []
    head: ChunkEvent | None = None
    head_turn = ""
    head_kind: type | None = None
    texts: list[str] = []
    size = 0
    limit = MAX_CHUNK_CHARS

    def close() -> None:
        if head is None:
            return
        if len(texts) == 1:
            out.append(head)
        else:
            joined = "".join(texts)
            merged = TextDelta(text=joined) if head_kind is TextDelta else ThinkingDelta(text=joined)
            out.append(ChunkEvent(turn_id=head_turn, chunk=merged))

    for ev in events:
        if type(ev) is ChunkEvent:
            chunk = ev.chunk
            kind = type(chunk)
            if kind is TextDelta or kind is ThinkingDelta:
                text: str = chunk.text  # type: ignore[union-attr]
                n = len(text)
                if kind is head_kind and ev.turn_id == head_turn and size + n <= limit:
                    texts.append(text)
                    size += n
                    continue
                close()
                head, head_turn, head_kind, texts, size = ev, ev.turn_id, kind, [text], n
                continue
        close()
        head, head_turn, head_kind = None, "", None
        out.append(ev)
    close()
    return out
