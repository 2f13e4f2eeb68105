"""A test harness around `TopicRuntime`: deterministic ids and clock, effect log, one window.

Every effect list the runtime returns is checked on the way (seq strictly +1, no gap) and
applied to a `Transcript` window, so every test also checks that a window rebuilds the same
rows as the runtime's own snapshot.
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

from hostd.core.effects import Effect, Emit, SaveRow, StartTurn, ToDriver
from hostd.core.topic_runtime import TopicRuntime
from hostd.core.transcript import Transcript
from hostd_protocol.client_messages import (
    ApprovalInfo,
    MessageRow,
    SendResult,
    Snapshot,
    TopicEvent,
    TopicInfo,
)
from hostd_protocol.common import Capabilities, Chunk, SendIntent, TextDelta
from hostd_protocol.driver_messages import ChunkEvent, DriverEvent, HostCommand, Redirect, TurnEnd

E = TypeVar("E")

INJECT = Capabilities(inject_steering=True, approvals=True, compaction=True)
NO_INJECT = Capabilities(approvals=True)


def normalized(snap: Snapshot) -> Snapshot:
    """A snapshot without what windows cannot know (`updated_at` of rows)."""
    rows = [msgspec.structs.replace(r, updated_at=0.0) for r in snap.rows]
    return msgspec.structs.replace(snap, rows=rows)


class Harness:
    def __init__(
        self,
        caps: Capabilities | None = INJECT,
        *,
        rows: list[MessageRow] | None = None,
        approvals: list[ApprovalInfo] | None = None,
        last_seq: int = 0,
        approval_timeout: float = 60.0,
        topic: TopicInfo | None = None,
        ids_from: int = 0,
    ) -> None:
        # A restarted runtime must not make ids its predecessor made: pass a higher ids_from.
        self._ids = ids_from
        self.now = 100.0
        self.rt = TopicRuntime(
            topic or TopicInfo(id="T", driver="scripted", model="m1"),
            rows or [],
            approvals or [],
            last_seq,
            new_id=self.new_id,
            wall=lambda: 1000.0,
            capabilities=caps,
            approval_timeout=approval_timeout,
        )
        self.effects: list[Effect] = []
        self.last: list[Effect] = []
        self.window = Transcript(self.rt.snapshot())

    def new_id(self, prefix: str) -> str:
        self._ids += 1
        return f"{prefix}{self._ids}"

    # --- feeding ----------------------------------------------------------------------------

    def take(self, effects: list[Effect]) -> list[Effect]:
        for eff in effects:
            if isinstance(eff, Emit):
                assert eff.event.seq == self.window.seq + 1, eff
                self.window.apply(eff.event)
        self.effects.extend(effects)
        self.last = effects
        assert self.window.seq == self.rt.seq
        return effects

    def send(self, text: str, intent: SendIntent = "auto", **kw: Any) -> SendResult:
        result, effects = self.rt.send(text, intent, self.now, **kw)
        self.take(effects)
        return result

    def call(self, method: str, *args: Any, **kw: Any) -> list[Effect]:
        return self.take(getattr(self.rt, method)(*args, self.now, **kw))

    def ev(self, event: DriverEvent) -> list[Effect]:
        return self.take(self.rt.driver_event(event, self.now))

    def chunk(self, text: str, turn_id: str | None = None) -> list[Effect]:
        return self.ev(ChunkEvent(turn_id=turn_id or self.turn, chunk=TextDelta(text=text)))

    def chunks(self, *chunks: Chunk) -> None:
        for c in chunks:
            self.ev(ChunkEvent(turn_id=self.turn, chunk=c))

    def end(self, status: Any = "success", **kw: Any) -> list[Effect]:
        return self.ev(TurnEnd(turn_id=self.turn, status=status, **kw))

    # --- reading ----------------------------------------------------------------------------

    @property
    def turn(self) -> str:
        turn = self.rt.active_turn_id
        assert turn is not None, "no turn is running"
        return turn

    def events(self, kind: type[E], effects: list[Effect] | None = None) -> list[E]:
        src = self.effects if effects is None else effects
        return [e.event for e in src if isinstance(e, Emit) and isinstance(e.event, kind)]

    def all_events(self) -> list[TopicEvent]:
        return [e.event for e in self.effects if isinstance(e, Emit)]

    def of(self, kind: type[E], effects: list[Effect] | None = None) -> list[E]:
        src = self.effects if effects is None else effects
        return [e for e in src if isinstance(e, kind)]

    def commands(self, kind: type[E], effects: list[Effect] | None = None) -> list[E]:
        src = self.effects if effects is None else effects
        cmds: list[HostCommand] = [e.command for e in src if isinstance(e, ToDriver)]
        return [c for c in cmds if isinstance(c, kind)]

    def starts(self, effects: list[Effect] | None = None) -> list[StartTurn]:
        return self.of(StartTurn, effects)

    def saved(self, row_id: str) -> MessageRow:
        """The last SaveRow of `row_id`."""
        return [e.row for e in self.effects if isinstance(e, SaveRow) and e.row.id == row_id][-1]

    def history(self) -> list[tuple[str, str, str]]:
        """(role, status, text) per row, by position; the window must agree."""
        snap = self.rt.snapshot(10_000)
        assert normalized(self.window.snapshot()) == normalized(snap)
        out = []
        for r in snap.rows:
            text = "".join(p.text for p in r.parts if isinstance(p, TextDelta))
            out.append((r.role, r.status, text))
        return out

    def row(self, row_id: str) -> MessageRow:
        row = self.rt.row(row_id)
        assert row is not None
        return row


def steer_id(h: Harness) -> str:
    """The steer id of the last `Redirect` the runtime sent."""
    return h.commands(Redirect)[-1].steer_id
