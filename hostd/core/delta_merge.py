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
    out: list[DriverEvent] = []
    head: ChunkEvent | None = None
    texts: list[str] = []
    size = 0

    def close() -> None:
        if head is None:
            return
        if len(texts) == 1:
            out.append(head)
        else:
            joined = "".join(texts)
            merged = (
                TextDelta(text=joined)
                if isinstance(head.chunk, TextDelta)
                else ThinkingDelta(text=joined)
            )
            out.append(ChunkEvent(turn_id=head.turn_id, chunk=merged))

    for ev in events:
        if isinstance(ev, ChunkEvent) and isinstance(ev.chunk, TextDelta | ThinkingDelta):
            if (
                head is not None
                and ev.turn_id == head.turn_id
                and type(ev.chunk) is type(head.chunk)
                and size + len(ev.chunk.text) <= MAX_CHUNK_CHARS
            ):
                texts.append(ev.chunk.text)
                size += len(ev.chunk.text)
                continue
            close()
            head, texts, size = ev, [ev.chunk.text], len(ev.chunk.text)
            continue
        close()
        head = None
        out.append(ev)
    close()
    return out
