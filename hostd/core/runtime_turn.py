"""The running turn of a topic: its open answer row, its steers in flight, its flags.

Rules it guards (steering bookkeeping; the topic runtime turns them into rows and events):

- A steer is in flight from its `Redirect` until it leaves through exactly one `take_*`:
  rolled at a boundary, handed back (undelivered, or stop before the model saw it), or
  settled at turn end. A steer never leaves twice, so its row is placed or handed back once.
- Steers leave in acceptance order (the order they were redirected, which drivers keep).
- A boundary rolls the steers it names plus every steer the model saw before them; a boundary
  naming none rolls every injected steer.
- A compaction anchor is stored once per turn, however often the driver repeats it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import TypeAlias

from hostd_protocol.common import AnswerTarget, CompactionAnchor, TurnStatus, Usage

__all__ = ["Lane", "Steer", "Turn"]


@dataclass(slots=True)
class Lane:
    """One answer of a multi-answer turn (`hostd.core.runtime_lanes`): its row and outcome."""

    index: int
    row_id: str
    target: AnswerTarget
    #: None while the lane runs; its final status once it ended.
    status: TurnStatus | None = None
    error: str = ""
    error_code: str = ""
    #: The lane's latest (cumulative) usage figure.
    usage: Usage | None = None
    #: A user stopped this answer alone (`TopicRuntime.stop` with its row id).
    stopping: bool = False


@dataclass(slots=True)
class Steer:
    """A steer handed to the driver (`Redirect`), not yet placed into history or handed back."""

    steer_id: str
    row_id: str
    #: The driver reported `SteerInjected`: the model has seen it.
    injected: bool = False


#: Picks steers by (index in flight, steer).
_Pick: TypeAlias = Callable[[int, Steer], bool]


@dataclass(slots=True)
class Turn:
    id: str
    #: The open assistant row: every chunk of the turn goes here (A1, then A2 after a roll).
    row_id: str
    #: The user texts this turn answers (its message, then placed steers), for `resume_text`.
    texts: list[str]
    #: Any chunk at all in the whole turn (an empty turn is marked, not a plain success).
    output: bool = False
    #: A user (stop or send-now) asked to interrupt it.
    stopping: bool = False
    compacting: bool = False
    steers: list[Steer] = field(default_factory=list)
    #: Anchors stored as markers in this turn, so a repeated completion stores nothing.
    anchors: list[CompactionAnchor] = field(default_factory=list)
    #: A rewind asked with stop: (row id, include) applied when the turn has ended.
    rewind_to: tuple[str, bool] | None = None
    #: A multi-answer turn's lanes, lane 0 (the topic's own, `row_id`) first; empty for an
    #: ordinary turn.
    lanes: list[Lane] = field(default_factory=list)
    #: The answer row a window chose while the turn ran (`choose_answer`).
    chosen: str | None = None

    def steer_rows(self) -> set[str]:
        return {s.row_id for s in self.steers}

    def mark_injected(self, steer_id: str) -> None:
        for steer in self.steers:
            if steer.steer_id == steer_id:
                steer.injected = True

    def take_rolling(self, named: Collection[str]) -> list[Steer]:
        """The steers a boundary answers (see the module rules), removed from flight."""
        if named:
            last = max((i for i, s in enumerate(self.steers) if s.steer_id in named), default=-1)
            return self._take(lambda i, s: i <= last and (s.steer_id in named or s.injected))
        return self._take(lambda i, s: s.injected)

    def take_named(self, named: Collection[str]) -> list[Steer]:
        """The steers the driver reports undelivered, removed from flight."""
        return self._take(lambda i, s: s.steer_id in named)

    def take_unseen(self) -> list[Steer]:
        """The steers the model has not seen (a stop hands them back), removed from flight."""
        return self._take(lambda i, s: not s.injected)

    def take_all(self) -> list[Steer]:
        """Every steer still in flight (the turn is ending)."""
        return self._take(lambda i, s: True)

    def finish_compaction(self, anchor: CompactionAnchor | None) -> bool:
        """Leave `compacting`; True when `anchor` should be stored as a new marker."""
        was_compacting, self.compacting = self.compacting, False
        if anchor is None or (not was_compacting and anchor in self.anchors):
            return False
        self.anchors.append(anchor)
        return True

    def _take(self, pick: _Pick) -> list[Steer]:
        taken: list[Steer] = []
        kept: list[Steer] = []
        for i, steer in enumerate(self.steers):
            (taken if pick(i, steer) else kept).append(steer)
        self.steers = kept
        return taken
