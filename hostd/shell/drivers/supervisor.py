"""The driver supervisor: one driver subprocess per active topic, warm spares, timers.

The trio shell around `hostd.shell.drivers.warm_pool` (sans-IO bookkeeping) and `hostd.shell.drivers.session`
(one process). Contract: docs/internal-contracts.md, "Supervisor".

How a session's process starts (Init, environment, sandbox, loopback bridge, redaction) is
`hostd.shell.drivers.spawner.SessionSpawner`; idle closes and warm spares are
`hostd.shell.drivers.warm_spares.WarmSpares` (built on the spawner), mixed in.

Rules this module guards:

- One driver process per topic session (crash isolation); a crash ends that session's
  `events` with `SessionEnded(error)` and nothing else; the next `open` starts a new process.
- Single-flight: concurrent `open`s of one topic share one connect, which runs in the
  supervisor's nursery (a cancelled caller does not cancel it for the others). A connect that
  finishes after `close(topic)` is stale: its process is closed and its waiters get
  `TopicClosed`.
- A session is idle when no turn is in flight (`Send` .. `TurnEnd`, tracked from the traffic)
  and it is not pinned by `mark_busy`. After `idle_ttl` idle it is closed and, for the same
  options and its latest resume token, a warm spare is started that the next `open` takes.
- Spares are matched by options key *and* resume token, bounded by `max_warm` (oldest
  evicted) and by `warm_ttl` each.
- Secrets go only into the environment of the driver they were given for; they are not in
  `repr`, keys (only a fingerprint is) or logs, and are redacted from the stderr tail.
"""

from __future__ import annotations

import logging
import os
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import trio

from hostd.core.options import SessionOptions
from hostd.shell.drivers.limits import Leaf
from hostd.shell.drivers.pipe_hub import PipeHub
from hostd.shell.drivers.priority import DEFAULT_DRIVER_NICE, check_nice
from hostd.shell.drivers.reaper import GroupReaper
from hostd.shell.drivers.registry import DriverRegistry
from hostd.shell.drivers.sandbox import Sandbox
from hostd.shell.drivers.secrets import SecretSource, driver_secrets
from hostd.shell.drivers.session import DriverSession, SessionEnded, driver_env
from hostd.shell.drivers.warm_pool import IdleTimers, WarmPool
from hostd.shell.drivers.warm_spares import WarmSpares, _close_all, _fresh, _Live, _warm_key
from hostd.shell.drivers.window_options import ConfiguredValues
from hostd_protocol import child_process
from hostd_protocol.common import SessionSource
from hostd_protocol.driver_spec import DriverSpec
from hostd_protocol.errors import (
    DriverCrashed,
    HostdError,
    TopicClosed,
)
from hostd_protocol.framing import DEFAULT_MAX_FRAME_SIZE

__all__ = [
    "DriverSession",
    "SessionEnded",
    "SessionOptions",
    "Supervisor",
    "SupervisorStatistics",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SupervisorStatistics:
    """A snapshot of the supervisor's bookkeeping (trio's `statistics()` convention)."""

    #: Live sessions bound to topics.
    sessions: int
    #: Opens in flight (one per topic, however many callers wait on it).
    connecting: int
    #: Warm spares parked in the pool.
    warm: int
    #: Driver processes started so far (cold starts and prewarms).
    spawned: int
    #: Opens served by a warm spare / by a cold start.
    warm_hits: int
    warm_misses: int
    #: Sessions that ended with an error (crash, kill, protocol error) after their handshake.
    crashed: int
    #: Sessions closed by the idle TTL.
    idle_closed: int


@dataclass
class _Flight:
    """One in-flight connect for a topic; every concurrent `open` waits on `done`."""

    key: str
    done: trio.Event = field(default_factory=trio.Event)
    session: DriverSession | None = None
    error: HostdError | None = None


_UNSAFE_PATH_CHARS = re.compile(r"[^A-Za-z0-9._-]")


def _dir_name(topic_id: str) -> str:
    name = _UNSAFE_PATH_CHARS.sub("_", topic_id).lstrip(".")
    return name or "_"


class Supervisor(WarmSpares):
    """Starts, shares, times out and reaps driver processes. Owns every one of them.

    Run `serve` in a nursery (`await nursery.start(sup.serve)`); every driver process and
    timer lives in the nursery it opens, so cancelling `serve` kills and reaps them all, and
    `aclose()` closes them gracefully first. Nothing a driver does can raise out of `serve`.

    Args:
        registry: where driver specs come from.
        base_env: the daemon's environment (default `os.environ`); a driver gets only the
            minimal variables plus those its spec names (see `driver_env`).
        idle_ttl: seconds a session may sit without a turn before it is closed (and a warm
            spare started in its place). `math.inf` disables it.
        warm_ttl: seconds a warm spare waits to be used before it is closed.
        max_warm: most warm spares at once; the oldest is evicted (0 disables prewarming).
        handshake_timeout: bound on spawn -> `Ready` (and on `Prewarm` -> `Warmed`).
        workdir_root: where per-topic working directories go when `SessionOptions` has none:
            `<workdir_root>/<topic_id>` (created if missing).
        prewarm_on_idle: start a warm spare when the idle TTL closes a session.
        close_timeout / terminate_timeout: bounds on `Close` -> exit and SIGTERM -> exit.
        python: the interpreter drivers run with (default: the daemon's).
        sandbox: how a confined session's driver is wrapped (bubblewrap) and what it hides;
            the `sandbox` option of a session picks the policy (`hostd.core.sandbox_policy`).
    """

    def __init__(
        self,
        registry: DriverRegistry,
        *,
        base_env: Mapping[str, str] | None = None,
        idle_ttl: float = 300.0,
        warm_ttl: float = 300.0,
        max_warm: int = 4,
        handshake_timeout: float = 15.0,
        workdir_root: str | None = None,
        prewarm_on_idle: bool = True,
        close_timeout: float = 2.0,
        terminate_timeout: float = 1.0,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        event_buffer: int = 1024,
        python: str | None = None,
        sandbox: Sandbox | None = None,
        configured_values: ConfiguredValues | None = None,
        driver_nice: int = DEFAULT_DRIVER_NICE,
    ) -> None:
        self._registry = registry
        #: The nice value drivers run at (`hostd.shell.drivers.priority`; 0: off).
        self._driver_nice = check_nice(driver_nice)
        #: The variables the local user's assistant files name for an option that names a
        #: variable (`api_key_env`); a process whose options name another is not started
        #: (`window_options.check_window_options`). The daemon wires its config cache in.
        self.configured_values: ConfiguredValues = configured_values or (lambda option: ())
        #: The daemon traces turns: every session's `Init` asks for model-call events.
        self.report_model_calls = False
        #: Where `${NAME}` references in options are resolved (`secrets.SecretSource`); None:
        #: no secrets file, no allowed names. The daemon wires its config cache in.
        self.secret_source: SecretSource | None = None
        self._sandbox = sandbox or Sandbox()
        #: Loopback bridges of live sessions (by `id(session)`), cancelled when they end.
        self._bridges: dict[int, trio.CancelScope] = {}
        #: cgroup leaves of live confined sessions (by `id(session)`), removed when they end.
        self._leaves: dict[int, Leaf] = {}
        self._base_env = dict(os.environ if base_env is None else base_env)
        self._handshake_timeout = handshake_timeout
        self._workdir_root = workdir_root or os.path.join(
            tempfile.gettempdir(), f"hostd-work-{os.getuid()}"
        )
        self.prewarm_on_idle = prewarm_on_idle
        self._close_timeout = close_timeout
        self._terminate_timeout = terminate_timeout
        self._max_frame_size = max_frame_size
        self._event_buffer = event_buffer
        self._python = python
        #: Kills every driver's process group if the daemon dies without closing them.
        self._reaper = GroupReaper(python)
        #: Reads every quiet driver pipe in one task (`pipe_hub`; `hub.statistics()`).
        self.hub = PipeHub()
        self._warm: WarmPool[DriverSession] = WarmPool(max_warm, warm_ttl)
        self._idle = IdleTimers(idle_ttl)
        self._sessions: dict[str, _Live] = {}
        self._flights: dict[str, _Flight] = {}
        self._warming: dict[str, trio.Event] = {}
        self._nursery: trio.Nursery | None = None
        self._wakeup = trio.Event()
        self._shutdown = trio.Event()
        self._stopped = trio.Event()
        self._stopping = False
        self._spawned = 0
        self._warm_hits = 0
        self._warm_misses = 0
        self._crashed = 0
        self._idle_closed = 0

    # --- service ------------------------------------------------------------------------------

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Own the driver processes until `aclose()` or cancellation."""
        if self._nursery is not None or self._stopped.is_set():
            raise RuntimeError("a Supervisor serves once")
        self._reaper.start()
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self._timer_loop)
                await nursery.start(self.hub.serve)
                task_status.started()
                try:
                    await self._shutdown.wait()
                finally:
                    # Graceful when asked (`aclose`); when cancelled, every session's own
                    # task is cancelled too and kills its process, so this is quick.
                    with trio.CancelScope(shield=True):
                        await self._close_all()
                    nursery.cancel_scope.cancel()
        finally:
            self._stopping = True
            self._nursery = None
            self._reaper.close()
            self._sandbox.close()
            self._stopped.set()

    async def aclose(self) -> None:
        """Close every session and spare (Close, terminate, kill; bounded) and stop `serve`."""
        self._shutdown.set()
        if self._nursery is not None:
            await self._stopped.wait()

    # --- topics -------------------------------------------------------------------------------

    async def open(
        self,
        topic_id: str,
        opts: SessionOptions,
        resume_token: str | None = None,
        *,
        fork_from: SessionSource | None = None,
    ) -> DriverSession:
        """The topic's session: the live one, a warm spare, or a new process (single-flight).

        Concurrent calls for one topic share one connect. A live session opened with other
        options (a different key) is closed and replaced. `resume_token` goes into `Init` of a
        new process; a live session keeps its own vendor session. `fork_from` too (a spare
        is taken only when it was started with the same source).

        Raises:
            DriverUnavailable: unknown driver, it failed to load, or it refused to start.
            DriverTimeout: no `Ready` within the handshake timeout.
            DriverCrashed / DriverProtocolError: it died or wrote garbage while starting.
            TopicClosed: `close(topic_id)` or shutdown happened while connecting.
        """
        nursery = self._require_serving()
        opts = self._resolve(topic_id, opts)
        key = opts.key()
        while True:
            live = self._sessions.get(topic_id)
            if live is not None:
                if live.session.alive and live.key == key:
                    return live.session
                await self._drop(topic_id, live)
                continue
            flight = self._flights.get(topic_id)
            if flight is None:
                flight = _Flight(key)
                self._flights[topic_id] = flight
                nursery.start_soon(
                    self._connect, topic_id, flight, opts, resume_token, fork_from
                )
            await flight.done.wait()
            if flight.session is not None:
                if flight.key == key:
                    return flight.session
                continue  # someone else's connect with other options won: replace it
            raise (
                _fresh(flight.error)
                if flight.error is not None
                else TopicClosed(f"topic {topic_id} was closed while its driver was starting")
            )

    def mark_idle(self, topic_id: str) -> None:
        """The topic has nothing running: start its idle TTL (unless a turn is in flight).

        Turns are tracked automatically (a `Send` starts one, its `TurnEnd` ends it); this
        undoes `mark_busy`.
        """
        self._idle.unpin(topic_id, trio.current_time())
        self._reschedule()

    def mark_busy(self, topic_id: str) -> None:
        """Keep the topic's session open until `mark_idle` (e.g. a window is mid-action)."""
        self._idle.pin(topic_id)
        self._reschedule()

    async def prewarm(
        self,
        opts: SessionOptions,
        resume_token: str | None = None,
        *,
        topic_id: str = "",
        fork_from: SessionSource | None = None,
    ) -> DriverSession:
        """Start a warm spare for these options; returns it once it answered `Warmed`.

        The spare waits in the pool (not bound to any topic) until an `open` with the same
        key, resume token and fork source takes it, its `warm_ttl` runs out, or it is evicted. `topic_id`
        resolves an empty `working_dir` the way `open` would for that topic, and marks the
        spare as that topic's (an open of the topic with other options drops it). Raises the
        same errors as `open` when the spare cannot start.
        """
        self._require_serving()
        opts = self._resolve(topic_id, opts)
        return await self._prewarm(opts, resume_token, for_topic=topic_id, fork_from=fork_from)

    async def close(self, topic_id: str) -> None:
        """Close the topic's session and spares; an open in flight gets `TopicClosed`."""
        self._flights.pop(topic_id, None)  # its result is stale now; `_connect` discards it
        live = self._sessions.pop(topic_id, None)
        self._idle.forget(topic_id)
        doomed = self._warm.take_for_topic(topic_id)
        if live is not None:
            doomed.append(live.session)
        await _close_all(doomed)

    def statistics(self) -> SupervisorStatistics:
        return SupervisorStatistics(
            sessions=len(self._sessions),
            connecting=len(self._flights),
            warm=len(self._warm),
            spawned=self._spawned,
            warm_hits=self._warm_hits,
            warm_misses=self._warm_misses,
            crashed=self._crashed,
            idle_closed=self._idle_closed,
        )

    def driver_environ(
        self, spec: DriverSpec, options: Mapping[str, Any] | None = None
    ) -> dict[str, str]:
        """The environment a driver of `spec` starts with (no per-topic secrets): what its
        credential check looks at; with `options`, also the variables they name."""
        names = spec.env if options is None else spec.env_names(options)
        return driver_env(names, self._base_env, {})

    def session(self, topic_id: str) -> DriverSession | None:
        """The topic's live session, if any (no connect)."""
        live = self._sessions.get(topic_id)
        return live.session if live is not None else None

    # --- internals ----------------------------------------------------------------------------

    def _require_serving(self) -> trio.Nursery:
        if self._nursery is None or self._stopping or self._shutdown.is_set():
            raise TopicClosed("the driver supervisor is not running (shut down or not started)")
        return self._nursery

    def _resolve(self, topic_id: str, opts: SessionOptions) -> SessionOptions:
        """`opts` with its working dir and the values of its `${NAME}` references (in
        `secrets`, so they reach the driver's environment only and their fingerprint is part
        of the key: a changed secret never reuses a process started with the old one)."""
        if self.secret_source is not None:
            try:
                spec = self._registry.get(opts.driver)
            except HostdError:
                spec = None  # reported where the process would start
            if spec is not None:
                referenced = driver_secrets(spec, opts.options, self.secret_source, self._base_env)
                if referenced:
                    opts = replace(opts, secrets={**referenced, **opts.secrets})
        if opts.working_dir:
            return opts
        root = self._workdir_root
        wd = os.path.join(root, _dir_name(topic_id)) if topic_id else root
        return replace(opts, working_dir=wd)

    async def _connect(
        self,
        topic_id: str,
        flight: _Flight,
        opts: SessionOptions,
        token: str | None,
        fork_from: SessionSource | None = None,
    ) -> None:
        stale: DriverSession | None = None
        try:
            session = await self._obtain(topic_id, opts, token, fork_from)
        except HostdError as exc:
            flight.error = exc
        except Exception as exc:  # a bug fails this open, never the daemon
            log.exception("starting driver %s for topic %s failed", opts.driver, topic_id)
            flight.error = DriverCrashed(
                f"internal error starting driver {opts.driver!r}: {type(exc).__name__}: {exc}",
                driver=opts.driver,
            )
        else:
            if self._flights.get(topic_id) is not flight or self._stopping:
                stale = session
                flight.error = TopicClosed(
                    f"topic {topic_id} was closed while its driver was starting"
                )
            else:
                self._install(topic_id, session, opts)
                flight.session = session
        finally:
            if self._flights.get(topic_id) is flight:
                del self._flights[topic_id]
            flight.done.set()
        if stale is not None:
            log.debug("discarding driver %s started for closed topic %s", opts.driver, topic_id)
            await stale.aclose()

    async def _obtain(
        self,
        topic_id: str,
        opts: SessionOptions,
        token: str | None,
        fork_from: SessionSource | None = None,
    ) -> DriverSession:
        spec = self._registry.get(opts.driver)
        wkey = _warm_key(opts, token, fork_from)
        # A spare for exactly this is on its way (the idle close is closing the old process
        # and then starts one): it started earlier than a cold start would, so wait for it.
        # A loop, because the idle close hands over from its marker to the prewarm's.
        with trio.move_on_after(self._handshake_timeout + self._close_timeout):
            while (warming := self._warming.get(wkey)) is not None:
                await warming.wait()
        now = trio.current_time()
        while (spare := self._warm.take(wkey, now)) is not None:
            if spare.alive:
                self._warm_hits += 1
                spare.topic_id = topic_id
                log.debug("topic %s takes warm driver %s pid %d", topic_id, spare.driver, spare.pid)
                self._reschedule()
                return spare
        self._warm_misses += 1
        # A spare this topic's idle close made for other options (or another token) is dead
        # weight now.
        await _close_all(self._warm.take_for_topic(topic_id))
        return await self._spawn(spec, opts, token, topic_id, fork_from)

    def _install(self, topic_id: str, session: DriverSession, opts: SessionOptions) -> None:
        session.topic_id = topic_id
        self._sessions[topic_id] = _Live(session, opts, opts.key())
        self._idle.track(topic_id, trio.current_time())
        if session.active_turn is not None:
            self._idle.turn_started(topic_id)
        self._reschedule()

    async def _drop(self, topic_id: str, live: _Live) -> None:
        if self._sessions.get(topic_id) is live:
            del self._sessions[topic_id]
            self._idle.forget(topic_id)
        await live.session.aclose()

    def _is_live(self, session: DriverSession) -> bool:
        live = self._sessions.get(session.topic_id)
        return live is not None and live.session is session

    def _on_turn_start(self, session: DriverSession) -> None:
        if self._is_live(session):
            self._idle.turn_started(session.topic_id)
            self._reschedule()

    def _on_turn_end(self, session: DriverSession) -> None:
        if self._is_live(session):
            self._idle.turn_ended(session.topic_id, trio.current_time())
            self._reschedule()

    def _on_end(self, session: DriverSession) -> None:
        bridge = self._bridges.pop(id(session), None)
        if bridge is not None:
            bridge.cancel()
        self._release_leaf(session)
        self._end_orphans()
        if session.end_error is not None and session.ready_at:
            self._crashed += 1
        if self._is_live(session):
            del self._sessions[session.topic_id]
            self._idle.forget(session.topic_id)
        self._warm.remove(session)
        self._reschedule()

    def _end_orphans(self) -> None:
        """A session ended: in the daemon process (a subreaper), what its driver left
        running when it died without ending its own tree came home to us; end it."""
        nursery = self._nursery
        if nursery is None or not child_process.is_subreaper():
            return

        async def end() -> None:
            with trio.CancelScope(shield=True):
                ended = await trio.to_thread.run_sync(child_process.end_orphans)
            if ended:
                log.warning("ended %d process(es) a dead driver left running: %s",
                            len(ended), ended)

        nursery.start_soon(end)

    def _reschedule(self) -> None:
        self._wakeup.set()

    async def _close_all(self) -> None:
        self._stopping = True
        doomed = [live.session for live in self._sessions.values()] + self._warm.drain()
        self._sessions.clear()
        self._flights.clear()
        await _close_all(doomed)
