"""Who gets a connection slot: the daemon's cap on connections, and a small quota of its own
for connections that have not said hello yet (sshd's MaxStartups, with "drop the oldest"
instead of a random early drop).

Sans-IO: it only decides. The socket server (`hostd.shell.server`) admits each accepted
connection here, tells it when the connection said hello, releases it when it ends, and
closes whatever this hands back as evicted.

Rules this module guards:

- At most `max_connections` connections hold a slot; at most `max_startups` of them have
  not said hello.
- A new connection is never refused because of connections that have not said hello: when
  the quota (or the cap) is full, the oldest of those is evicted and the newcomer takes its
  slot. A client that connects and says hello at once therefore always gets in; only
  connections that said hello can make the daemon refuse one (`Refuse`).
- An evicted connection leaves the books at once (the newcomer has its slot); `release` of
  it afterwards is a no-op. So is `welcome` of a connection that was evicted or released.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = ["Admit", "ConnectionSlots", "Refuse", "default_max_startups"]

K = TypeVar("K", bound=Hashable)


def default_max_startups(max_connections: int) -> int:
    """Enough for a burst of windows opening at once (each says hello within a scheduler
    pass or two), small enough that silent connections hold few descriptors."""
    return max(1, min(64, max_connections // 4))


@dataclass(frozen=True)
class Admit(Generic[K]):
    """The connection has a slot. `evicted`: the connection that had to make room (close
    it, saying why: `reason`), if any."""

    evicted: K | None = None
    reason: str = ""


@dataclass(frozen=True)
class Refuse:
    """Every slot is held by a connection that said hello: refuse the newcomer."""

    reason: str


class ConnectionSlots(Generic[K]):
    """The books of connection slots (see the module docstring). `K` is whatever the server
    identifies a connection by."""

    def __init__(self, max_connections: int, max_startups: int | None = None) -> None:
        if max_connections < 1:
            raise ValueError("max_connections must be at least 1")
        startups = default_max_startups(max_connections) if max_startups is None else max_startups
        if not 1 <= startups <= max_connections:
            raise ValueError("max_startups must be between 1 and max_connections")
        self.max_connections = max_connections
        self.max_startups = startups
        self._welcomed: set[K] = set()
        #: Connections yet to say hello, oldest first (a dict keeps insertion order).
        self._waiting: dict[K, None] = {}

    @property
    def total(self) -> int:
        return len(self._welcomed) + len(self._waiting)

    @property
    def waiting(self) -> int:
        """Connections holding a slot that have not said hello."""
        return len(self._waiting)

    def admit(self, conn: K) -> Admit[K] | Refuse:
        """A connection was accepted: give it a slot, evicting the oldest connection that has
        not said hello when the quota or the cap is full."""
        if len(self._waiting) >= self.max_startups:
            q = self.max_startups
            return self._evict_for(
                conn,
                f"closed before its hello: {q} newer connections are waiting to say hello "
                f"(at most {q} may wait); connect again and send hello at once",
            )
        if self.total >= self.max_connections:
            if not self._waiting:
                return Refuse(
                    f"hostd already serves {self.total} connections, its maximum; close some "
                    "windows or clients and try again"
                )
            return self._evict_for(
                conn,
                f"closed before its hello: hostd serves its maximum of {self.max_connections} "
                "connections and a newer one came in; connect again and send hello at once",
            )
        self._waiting[conn] = None
        return Admit()

    def welcome(self, conn: K) -> None:
        """`conn` said hello: it leaves the quota (and can no longer be evicted)."""
        if conn in self._waiting:
            del self._waiting[conn]
            self._welcomed.add(conn)

    def release(self, conn: K) -> None:
        """`conn` ended: its slot is free."""
        self._waiting.pop(conn, None)
        self._welcomed.discard(conn)

    def _evict_for(self, conn: K, reason: str) -> Admit[K]:
        oldest = next(iter(self._waiting))
        del self._waiting[oldest]
        self._waiting[conn] = None
        return Admit(oldest, reason)
