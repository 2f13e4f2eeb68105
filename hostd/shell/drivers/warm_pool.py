"""Sans-IO bookkeeping for the supervisor: warm spares and idle timers.

No trio, no processes: time comes in as `now` (monotonic seconds) and what to close comes
back as values, so every rule here is tested with plain numbers. The trio shell
(`hostd.shell.drivers.supervisor`) owns the processes and asks these classes what to do.

Rules this module guards:

- A warm spare is taken by exact key only; a spare is never handed out twice (take removes).
- At most `max_warm` spares live; adding one more evicts the oldest (returned to the caller,
  who closes it). `max_warm == 0` disables the pool: an added spare is evicted at once.
- Every spare has its own deadline (`ttl` after it was added); `expire(now)` returns the ones
  past it. A spare exactly at its deadline is expired (deadlines are "at or after").
- An idle timer runs only while a topic is neither in a turn nor pinned busy; any activity
  stops it and the next idle moment restarts it from zero (a full TTL after the last turn).
- `due(now)` hands each expired topic out once: its timer is cleared, not re-armed.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")

__all__ = ["IdleTimers", "WarmPool", "WarmSlot"]


@dataclass
class WarmSlot(Generic[T]):
    """One warm spare: what it is for, when it was added, when it expires."""

    key: str
    item: T
    added_at: float
    deadline: float
    #: The topic whose idle close made this spare ("" for an on-demand prewarm). A miss by
    #: that topic makes the spare useless (its options changed), so it is dropped at once.
    for_topic: str = ""
    order: int = field(default=0, compare=False)


class WarmPool(Generic[T]):
    """Warm spares by key, bounded in number, each with its own TTL."""

    def __init__(self, max_warm: int, ttl: float) -> None:
        if max_warm < 0:
            raise ValueError("max_warm must be >= 0")
        self.max_warm = max_warm
        self.ttl = ttl
        self._slots: list[WarmSlot[T]] = []  # oldest first
        self._order = itertools.count()

    def __len__(self) -> int:
        return len(self._slots)

    def __iter__(self) -> Iterator[WarmSlot[T]]:
        return iter(list(self._slots))

    def add(self, key: str, item: T, now: float, *, for_topic: str = "") -> list[T]:
        """Park a spare; returns the spares evicted to stay within `max_warm` (oldest first)."""
        slot = WarmSlot(key, item, now, now + self.ttl, for_topic, next(self._order))
        self._slots.append(slot)
        evicted: list[T] = []
        while len(self._slots) > self.max_warm:
            evicted.append(self._slots.pop(0).item)
        return evicted

    def take(self, key: str, now: float) -> T | None:
        """Remove and return the newest live spare for `key` (newest: longest left to live)."""
        for i in range(len(self._slots) - 1, -1, -1):
            slot = self._slots[i]
            if slot.key == key and slot.deadline > now:
                del self._slots[i]
                return slot.item
        return None

    def take_for_topic(self, topic_id: str) -> list[T]:
        """Remove and return every spare made by `topic_id`'s idle close."""
        if not topic_id:
            return []
        keep: list[WarmSlot[T]] = []
        gone: list[WarmSlot[T]] = []
        for slot in self._slots:
            (gone if slot.for_topic == topic_id else keep).append(slot)
        self._slots = keep
        return [s.item for s in gone]

    def remove(self, item: T) -> bool:
        """Forget `item` (e.g. its process died); True if it was parked."""
        for i, slot in enumerate(self._slots):
            if slot.item is item:
                del self._slots[i]
                return True
        return False

    def expire(self, now: float) -> list[T]:
        """Remove and return every spare whose deadline is at or before `now`."""
        gone = [s.item for s in self._slots if s.deadline <= now]
        if gone:
            self._slots = [s for s in self._slots if s.deadline > now]
        return gone

    def drain(self) -> list[T]:
        """Remove and return everything (shutdown)."""
        items = [s.item for s in self._slots]
        self._slots = []
        return items

    def next_deadline(self) -> float | None:
        return min((s.deadline for s in self._slots), default=None)


@dataclass
class _Activity:
    in_turn: bool = False
    pinned: bool = False
    deadline: float | None = None


class IdleTimers:
    """Per-topic idle TTL: armed when the topic goes quiet, cleared by any activity."""

    def __init__(self, ttl: float) -> None:
        self.ttl = ttl
        self._topics: dict[str, _Activity] = {}

    def __contains__(self, topic_id: str) -> bool:
        return topic_id in self._topics

    def track(self, topic_id: str, now: float) -> None:
        """A session was opened for the topic: it starts idle, so the TTL runs at once.

        An opened session nobody sends to must not live forever.
        """
        self._topics[topic_id] = _Activity(deadline=self._deadline(now))

    def forget(self, topic_id: str) -> None:
        self._topics.pop(topic_id, None)

    def turn_started(self, topic_id: str) -> None:
        act = self._topics.get(topic_id)
        if act is not None:
            act.in_turn = True
            act.deadline = None

    def turn_ended(self, topic_id: str, now: float) -> None:
        act = self._topics.get(topic_id)
        if act is not None:
            act.in_turn = False
            self._rearm(act, now)

    def pin(self, topic_id: str) -> None:
        """Keep the topic's session open until `unpin` (`Supervisor.mark_busy`)."""
        act = self._topics.get(topic_id)
        if act is not None:
            act.pinned = True
            act.deadline = None

    def unpin(self, topic_id: str, now: float) -> None:
        """`Supervisor.mark_idle`: the TTL starts now unless a turn is still running."""
        act = self._topics.get(topic_id)
        if act is not None:
            act.pinned = False
            self._rearm(act, now)

    def deadline(self, topic_id: str) -> float | None:
        act = self._topics.get(topic_id)
        return act.deadline if act is not None else None

    def due(self, now: float) -> list[str]:
        """Topics whose TTL ran out; each is returned once (its timer is cleared)."""
        out = []
        for topic_id, act in self._topics.items():
            if act.deadline is not None and act.deadline <= now:
                act.deadline = None
                out.append(topic_id)
        return out

    def next_deadline(self) -> float | None:
        return min(
            (a.deadline for a in self._topics.values() if a.deadline is not None), default=None
        )

    def _rearm(self, act: _Activity, now: float) -> None:
        if not act.in_turn and not act.pinned:
            act.deadline = self._deadline(now)

    def _deadline(self, now: float) -> float | None:
        return None if math.isinf(self.ttl) else now + self.ttl
