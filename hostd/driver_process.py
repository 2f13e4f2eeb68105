"""One driver subprocess: spawn, handshake, read frames, keep a stderr tail, reap.

Skeleton committed early; bodies follow.
"""

from __future__ import annotations

from dataclasses import dataclass

import trio

from hostd_protocol.common import Capabilities
from hostd_protocol.driver_messages import DriverEvent, HostCommand
from hostd_protocol.errors import DriverError

__all__ = ["DriverSession", "EventBatch", "SessionEnded"]


@dataclass(frozen=True)
class SessionEnded:
    """The last item of `DriverSession.events`: the process is gone (and reaped)."""

    #: None for a clean close (we asked it to stop and it exited 0), else why it ended.
    error: DriverError | None = None


EventBatch = list[DriverEvent]


class DriverSession:
    """A live driver process bound to one topic (or waiting in the warm pool)."""

    topic_id: str
    driver: str
    capabilities: Capabilities
    pid: int
    #: One batch (list) per pipe read, in order, then exactly one `SessionEnded`.
    events: trio.MemoryReceiveChannel[EventBatch | SessionEnded]

    async def send(self, cmd: HostCommand) -> None:
        """Write one command. Raises `DriverCrashed` if the process is gone."""
        raise NotImplementedError

    async def interrupt(self, turn_id: str, grace: float = 3.0) -> None:
        """Send `Interrupt`; kill the process if no `TurnEnd(turn_id)` passes within `grace`."""
        raise NotImplementedError

    async def aclose(self) -> None:
        """`Close`, then terminate, then kill, each bounded; returns once reaped."""
        raise NotImplementedError
