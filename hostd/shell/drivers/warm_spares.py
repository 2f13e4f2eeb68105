"""Idle sessions and warm spares: after `idle_ttl` without a turn a topic's session is
closed and, for the same options, its latest resume token (or the vendor session it copies),
a warm spare is started that the next `open` of those takes (`Prewarm` -> `Warmed`). The
sans-IO bookkeeping is `hostd.shell.drivers.warm_pool`; this is its trio side, mixed into
`Supervisor`.

Rules it guards (the supervisor's): a spare is matched by options key *and* resume token and
fork source (`_warm_key`), an open that races an idle close waits for the announced spare
instead of starting a second cold process, and a spare is never started in a turn-scoped
workspace.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import trio

from hostd.core.options import SessionOptions
from hostd.core.workspaces import workspace_of
from hostd.shell.drivers.registry import DriverRegistry
from hostd.shell.drivers.session import DriverSession, clone_error
from hostd.shell.drivers.spawner import SessionSpawner
from hostd.shell.drivers.warm_pool import IdleTimers, WarmPool
from hostd_protocol.common import SessionSource
from hostd_protocol.driver_messages import Prewarm
from hostd_protocol.errors import DriverCrashed, DriverError, HostdError

__all__ = ["WarmSpares"]

log = logging.getLogger(__name__)


@dataclass
class _Live:
    session: DriverSession
    opts: SessionOptions
    key: str


def _warm_key(
    opts: SessionOptions, resume_token: str | None, fork_from: SessionSource | None = None
) -> str:
    # The resume token (or the vendor session a fork copies) is part of a spare's identity:
    # a process initialised to continue one vendor session must never be handed to another
    # topic.
    source = f"{fork_from.token}|{fork_from.state_dir}" if fork_from is not None else ""
    return f"{opts.key()}|{resume_token or ''}|{source}"


def _turn_scoped(opts: SessionOptions) -> bool:
    try:
        ws = workspace_of(opts.options)
    except HostdError:
        return False
    return ws is not None and ws.scope == "turn"


class WarmSpares(SessionSpawner):
    """The idle timer loop and warm spares of `Supervisor` (a mixin: one concept, one
    module; spares are started by `SessionSpawner`)."""

    prewarm_on_idle: bool
    _registry: DriverRegistry
    _warm: WarmPool[DriverSession]
    _idle: IdleTimers
    _sessions: dict[str, _Live]
    _warming: dict[str, trio.Event]
    _nursery: trio.Nursery | None
    _wakeup: trio.Event
    _stopping: bool
    _idle_closed: int

    if TYPE_CHECKING:  # provided by Supervisor

        def _reschedule(self) -> None: ...

    async def _prewarm(
        self,
        opts: SessionOptions,
        token: str | None,
        *,
        for_topic: str,
        fork_from: SessionSource | None = None,
    ) -> DriverSession:
        spec = self._registry.get(opts.driver)
        wkey = _warm_key(opts, token, fork_from)
        marker = trio.Event()
        self._warming[wkey] = marker
        try:
            session = await self._spawn(spec, opts, token, topic_id="", fork_from=fork_from)
            await session.send(Prewarm())
            with trio.move_on_after(self._handshake_timeout):
                await _wait_first(session.warmed, session.ended)
            if not session.alive:
                end = session.end_error
                raise (
                    _fresh(end)
                    if end is not None
                    else DriverCrashed(
                        f"warm driver {opts.driver!r} ended before it was used", driver=opts.driver
                    )
                )
            if not session.warmed.is_set():
                log.warning(
                    "driver %s did not answer prewarm in time; parking it anyway", spec.name
                )
            if self._stopping:
                await session.aclose()
                return session
            evicted = self._warm.add(wkey, session, trio.current_time(), for_topic=for_topic)
            self._reschedule()
        finally:
            if self._warming.get(wkey) is marker:
                del self._warming[wkey]
            marker.set()
        await _close_all(evicted)
        return session

    async def _timer_loop(self) -> None:
        nursery = self._nursery
        assert nursery is not None
        while True:
            now = trio.current_time()
            for topic_id in self._idle.due(now):
                live = self._sessions.get(topic_id)
                if live is not None and live.session.active_turn is None:
                    nursery.start_soon(self._idle_close, topic_id, live)
            for spare in self._warm.expire(now):
                log.debug("warm driver %s pid %d expired", spare.driver, spare.pid)
                nursery.start_soon(spare.aclose)
            deadlines = [
                d for d in (self._idle.next_deadline(), self._warm.next_deadline()) if d is not None
            ]
            self._wakeup = trio.Event()
            with trio.move_on_at(min(deadlines, default=math.inf)):
                await self._wakeup.wait()

    async def _idle_close(self, topic_id: str, live: _Live) -> None:
        if self._sessions.get(topic_id) is not live:
            return
        del self._sessions[topic_id]
        self._idle.forget(topic_id)
        self._idle_closed += 1
        token = live.session.resume_token
        # A copy that never ran a turn has no token of its own yet: its spare copies again.
        source = live.session.fork_from if token is None else None
        # A turn-scoped standalone workspace is gone after its turn: a spare started in it
        # would recreate it, and the next turn works in a new folder anyway.
        prewarm = self.prewarm_on_idle and self._warm.max_warm > 0 and not _turn_scoped(live.opts)
        # Announce the spare before closing, so an open that races the close waits for it
        # instead of starting a second cold process.
        wkey = _warm_key(live.opts, token, source)
        marker = trio.Event()
        if prewarm:
            self._warming.setdefault(wkey, marker)
        log.debug("topic %s idle for %gs: closing its driver", topic_id, self._idle.ttl)
        try:
            await live.session.aclose()
        finally:
            if self._warming.get(wkey) is marker:
                del self._warming[wkey]
            marker.set()
        if prewarm and not self._stopping:
            try:
                await self._prewarm(live.opts, token, for_topic=topic_id, fork_from=source)
            except HostdError as exc:
                log.info("prewarm after idle close of topic %s failed: %s", topic_id, exc)
            except Exception:  # a bug in a background prewarm must not take the daemon down
                log.exception("prewarm after idle close of topic %s failed", topic_id)


async def _close_all(sessions: list[DriverSession]) -> None:
    if not sessions:
        return
    async with trio.open_nursery() as nursery:
        for session in sessions:
            nursery.start_soon(session.aclose)


async def _wait_first(*events: trio.Event) -> None:
    async with trio.open_nursery() as nursery:

        async def one(event: trio.Event) -> None:
            await event.wait()
            nursery.cancel_scope.cancel()

        for event in events:
            nursery.start_soon(one, event)


def _fresh(err: HostdError) -> HostdError:
    """A new instance of `err` to raise in this task (one object raised in many tasks would
    collect everyone's traceback)."""
    if isinstance(err, DriverError):
        return clone_error(err)
    return type(err)(err.message, details=dict(err.details))
