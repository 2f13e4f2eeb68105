"""The daemon-wide budget for incomplete frames (moved out of `connection`, unchanged)."""

from __future__ import annotations

__all__ = ["DEFAULT_MAX_PARTIAL_BYTES", "PartialFrames"]

#: Bytes of incomplete frames all connections together may hold (`PartialFrames`).
DEFAULT_MAX_PARTIAL_BYTES = 64 * 1024 * 1024


class PartialFrames:
    """The daemon-wide budget for incomplete frames: each connection may buffer one frame of
    up to the frame limit, but 30 connections each holding 8 MiB must not take 240 MiB. A
    connection that pushes the total over the budget with more than `small` bytes of its
    own is closed (`too_many_connections`); small frames always pass."""

    def __init__(self, limit: int = DEFAULT_MAX_PARTIAL_BYTES, small: int = 64 * 1024) -> None:
        self.limit = limit
        self.small = small
        self.total = 0
        self._held: dict[object, int] = {}

    def hold(self, owner: object, size: int) -> bool:
        """`owner` now holds `size` bytes of an incomplete frame; False: over the budget."""
        self.total += size - self._held.get(owner, 0)
        if size:
            self._held[owner] = size
        else:
            self._held.pop(owner, None)
        return size <= self.small or self.total <= self.limit
