"""Rebuild a topic's transcript from a `Snapshot` plus the topic events that follow it.

Pure and synchronous (no trio, no sockets): the daemon's topic runtime, the client library and
the CLI all use it, so a window's reconstructed rows are built by the very same merge rules as
the host's own rows.

Rules it guards:

- Events apply in `seq` order with no gap: an event at or below the current `seq` was already
  included (e.g. replay overlap with the snapshot) and is skipped; a gap, or a `Resync`, raises
  `EventGap` (reattach with `since=`, or take a new snapshot).
- Row parts merge the same way everywhere (`PartsBuilder`): consecutive `TextDelta`s merge into
  one part, consecutive `ThinkingDelta`s into one part, tool calls and results stay separate
  parts; empty text deltas are dropped.
- Rows are ordered by `position`. `RowUpdated` fields that are None are unchanged.

What a window cannot know: `updated_at` of rows changed by `RowUpdated`/`RowAppended` (the
events do not carry it), so compare transcripts without it.

Usage::

    t = Transcript(attach_result.snapshot)
    for event in live_events:
        t.apply(event)          # raises EventGap when events were missed
    rows = t.rows()
"""

from __future__ import annotations

import msgspec

from hostd.core.row_pieces import omitted_of, with_head
from hostd.core.rows import LiveRow, PartsBuilder
from hostd_protocol.client_messages import (
    ApprovalInfo,
    ApprovalRequested,
    ApprovalResolved,
    CommandsChanged,
    MessageRow,
    NoticeEvent,
    ReplayEnd,
    Resync,
    RowAppended,
    RowOpened,
    RowRemoved,
    RowsRemoved,
    RowUpdated,
    Snapshot,
    StateChanged,
    TopicChanged,
    TopicDeleted,
    TopicEvent,
    TopicInfo,
    TurnEnded,
    TurnStarted,
    UsageUpdated,
)
from hostd_protocol.common import Chunk, CommandInfo, TopicState, Usage
from hostd_protocol.errors import EventGap
from hostd_protocol.limits import TRUNCATED_META

__all__ = ["LiveRow", "PartsBuilder", "Transcript"]  # row types: hostd.core.rows

class Transcript:
    """A window's copy of one topic, kept current by applying topic events.

    Attributes:
        topic: The topic record (state and seq are kept current by `snapshot()`).
        seq: The seq of the last applied event (or of the snapshot).
        state: The topic state (`StateChanged`).
        active_turn_id: The running turn, "" when none.
        usage: The last `UsageUpdated` per turn id.
        notices: The `NoticeEvent`s seen, oldest first (the last `max_notices`).
        commands: The commands the topic's agent offers (`CommandsChanged`).
    """

    def __init__(self, snapshot: Snapshot, *, max_notices: int = 100) -> None:
        self.topic: TopicInfo = snapshot.topic
        self.seq = snapshot.seq
        self.state: TopicState = snapshot.topic.state
        self.active_turn_id = snapshot.active_turn_id
        self.truncated = snapshot.truncated
        self.deleted = False
        self.usage: dict[str, Usage] = {}
        self.notices: list[NoticeEvent] = []
        self._max_notices = max_notices
        self.commands: list[CommandInfo] = list(snapshot.commands)
        self._rows: dict[str, LiveRow] = {r.id: LiveRow(r) for r in snapshot.rows}
        self._approvals: dict[str, ApprovalInfo] = {a.id: a for a in snapshot.approvals}

    def apply(self, event: TopicEvent) -> bool:
        """Apply one event.

        Returns:
            True if it changed the transcript's seq; False if it was already included (its seq
            is at or below ours) or carries no seq of its own (`ReplayEnd`).

        Raises:
            EventGap: the event's seq skips one or more events, or the host sent `Resync`.
        """
        if isinstance(event, ReplayEnd):
            return False
        if isinstance(event, Resync):
            raise EventGap(
                f"topic {event.topic_id}: the host can no longer replay events after seq "
                f"{self.seq} ({event.reason or 'replay buffer exceeded'}); take a fresh snapshot"
            )
        if event.seq <= self.seq:
            return False
        if event.seq != self.seq + 1:
            raise EventGap(
                f"topic {event.topic_id}: missed events {self.seq + 1}..{event.seq - 1}; "
                f"reattach with since={self.seq}"
            )
        self.seq = event.seq
        self._apply(event)
        return True

    def _apply(self, event: TopicEvent) -> None:
        if isinstance(event, RowAppended):
            row = self._rows.get(event.row_id)
            if row is not None:
                row.append(event.chunk)
        elif isinstance(event, RowOpened):
            self._rows[event.row.id] = LiveRow(event.row)
        elif isinstance(event, RowUpdated):
            self._update_row(event)
        elif isinstance(event, RowRemoved):
            self._rows.pop(event.row_id, None)
        elif isinstance(event, RowsRemoved):
            for row_id in event.row_ids:
                self._rows.pop(row_id, None)
        elif isinstance(event, TurnStarted):
            self.active_turn_id = event.turn_id
        elif isinstance(event, TurnEnded):
            if self.active_turn_id == event.turn_id:
                self.active_turn_id = ""
        elif isinstance(event, StateChanged):
            self.state = event.state
        elif isinstance(event, ApprovalRequested):
            self._approvals[event.approval.id] = event.approval
        elif isinstance(event, ApprovalResolved):
            self._approvals.pop(event.approval_id, None)
        elif isinstance(event, UsageUpdated):
            self.usage[event.turn_id] = event.usage
        elif isinstance(event, NoticeEvent):
            self.notices.append(event)
            del self.notices[: -self._max_notices]
        elif isinstance(event, CommandsChanged):
            self.commands = list(event.commands)
        elif isinstance(event, TopicChanged):
            self.topic = event.topic
        elif isinstance(event, TopicDeleted):
            self.deleted = True
            self.state = "closed"
        # Rolled: the row events before it already did the work.

    def _update_row(self, event: RowUpdated) -> None:
        row = self._rows.get(event.row_id)
        if row is None:
            return  # older than this window's (truncated) snapshot
        changes: dict[str, object] = {}
        for name in (
            "status", "position", "turn_id", "error", "error_code", "empty", "alternative",
            "usage", "meta",
        ):
            value = getattr(event, name)
            if value is not None:
                changes[name] = value
        if changes:
            row.update(**changes)
        if event.parts is not None:
            row.set_parts(event.parts)

    def restore_head(self, row_id: str, head: list[Chunk]) -> bool:
        """Put `head`, what the cut row `row_id` left out (`row_pieces.omitted_of`), in front
        of the parts this transcript holds for it, and drop its cut marker. False (nothing
        changed) when the row is gone or not cut."""
        row = self._rows.get(row_id)
        omitted = None if row is None else omitted_of(row.base)
        if row is None or omitted is None:
            return False
        row.set_parts(with_head(head, row.parts.build(), omitted))
        row.update(meta={k: v for k, v in row.base.meta.items() if k != TRUNCATED_META})
        return True

    # --- reading --------------------------------------------------------------------------

    def rows(self) -> list[MessageRow]:
        """All rows this transcript holds, ordered by position."""
        return [r.freeze() for r in sorted(self._rows.values(), key=_position)]

    def row(self, row_id: str) -> MessageRow | None:
        live = self._rows.get(row_id)
        return None if live is None else live.freeze()

    def approvals(self) -> list[ApprovalInfo]:
        """Open approvals, in the order they were requested (the host's order)."""
        return list(self._approvals.values())

    def snapshot(self, max_rows: int | None = None) -> Snapshot:
        """The transcript as a `Snapshot` (same shape the host sends on attach)."""
        rows = self.rows()
        truncated = self.truncated
        if max_rows is not None and len(rows) > max_rows:
            rows = rows[len(rows) - max_rows :]
            truncated = True
        topic = msgspec.structs.replace(self.topic, state=self.state, seq=self.seq)
        return Snapshot(
            topic=topic,
            seq=self.seq,
            rows=rows,
            approvals=self.approvals(),
            active_turn_id=self.active_turn_id,
            truncated=truncated,
            commands=self.commands,
        )


def _position(row: LiveRow) -> int:
    return row.position
