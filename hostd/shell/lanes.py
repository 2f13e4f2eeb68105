"""The shell side of multi-answer turns: one `LaneHost` per extra lane of the running turn.

The runtime (`hostd.core.runtime_lanes`) says `StartLane`; the topic's host makes a
`LaneHost`, which runs that lane's own `TurnMachine` (the lane's assistant / driver / model,
root session key `<topic>/lane<n>-<turn>`) through a `TurnRunner` of its own, exactly as the host runs lane 0:
the `LaneHost` is that runner's `TurnHost`. What differs from the topic's own session:

- the lane's session is opened fresh for the turn (no resume token, a state folder of its
  own) and closed when the lane ends; its resume tokens are not the topic's (the runtime
  ignores them);
- its events go to `TopicRuntime.lane_event(lane, ...)`, its end to the same, so the runtime
  ends only that lane; a lost session is that lane machine's `lost`, never the topic's;
- commands for it (interrupt, approval answers) travel the host's one ordered command queue
  with the lane's session key, and a lane whose session is gone just drops them;
- a lane runner stores no steps and releases no standalone workspace: the turn's steps and
  workspace are lane 0's, which ends last (the runtime's `TurnEnded` follows the last lane).

Rules it guards: every lane machine ends (its own end, or the turn's `TurnEnded`, which
`end_all` feeds to the ones still running), and every lane session is closed once.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

import trio

from hostd.core.payload_bounds import images_refused
from hostd.core.runtime_lanes import lane_topic
from hostd.shell.topic_driver import route_events
from hostd.shell.turns import TurnRunner
from hostd_protocol.common import AnswerTarget
from hostd_protocol.driver_messages import DriverEvent, HostCommand, TurnEnd
from hostd_protocol.errors import DriverCrashed, DriverError, HostdError

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping

    from hostd.core.effects import Effect, StartLane
    from hostd.core.options import SessionOptions
    from hostd.core.turn import TurnMachine
    from hostd.shell.drivers.registry import DriverRegistry
    from hostd.shell.drivers.supervisor import DriverSession, Supervisor
    from hostd.shell.runtime_protocol import Runtime
    from hostd.shell.turns import TurnServices
    from hostd_protocol.client_messages import SendMessage, TopicInfo
    from hostd_protocol.common import TurnStatus
    from hostd_protocol.driver_spec import DriverSpec

__all__ = ["LaneHost", "Lanes", "refused_target"]

log = logging.getLogger(__name__)


class LaneOwner(Protocol):
    """What the lanes need of the topic's host (`TopicHost`)."""

    topic_id: str
    info: TopicInfo
    runtime: Runtime
    _supervisor: Supervisor
    _services: TurnServices

    def apply(self, effects: list[Effect]) -> int: ...

    def start_soon(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> None: ...

    def queue_command(self, key: str, cmd: HostCommand) -> None: ...


class LaneHost:
    """The `TurnHost` of one extra lane (see the module docstring)."""

    def __init__(self, owner: LaneOwner, lane: int, turn_id: str, services: TurnServices) -> None:
        self._owner = owner
        self.lane = lane
        self.topic_id = owner.topic_id
        self.info = owner.info
        # Unique per turn: the last turn's lane session may still be closing under its key.
        self.key = f"{owner.topic_id}/lane{lane}-{turn_id}"
        self._session: DriverSession | None = None
        self._closed = False
        self.runner = TurnRunner(self, services, lane=lane)

    # --- TurnHost -------------------------------------------------------------------------

    @property
    def session(self) -> DriverSession | None:
        return self._session

    def start_soon(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> None:
        self._owner.start_soon(fn, *args)

    def queue_command(self, key: str, cmd: HostCommand) -> None:
        self._owner.queue_command(key, cmd)

    def end_turn(self, end: TurnEnd) -> None:
        """The lane machine's end: the runtime ends this lane (the turn too if it was the
        last); then the machine hears its own end and the session closes."""
        owner = self._owner
        if owner.runtime.active_turn_id == end.turn_id:
            owner.apply(owner.runtime.lane_event(self.lane, end, trio.current_time()))
        self._ended(end.status, end.error, end.error_code)

    def feed_runtime(self, events: list[DriverEvent]) -> None:
        owner = self._owner
        now = trio.current_time()
        for event in events:
            owner.apply(owner.runtime.lane_event(self.lane, event, now))

    def feed(self, batch: list[DriverEvent], now: float) -> None:
        """Like the topic's own feed (`DriverLink.feed`), for this lane."""
        owner = self._owner
        route_events(
            batch,
            self.runner,
            lambda event: owner.apply(owner.runtime.lane_event(self.lane, event, now)),
        )

    async def open_session(self, opts: SessionOptions) -> DriverSession:
        """A fresh session for this lane (never resumed; its own state folder)."""
        if self._closed:
            raise DriverCrashed("the answer ended before its driver opened", driver=opts.driver)
        opts = replace(opts, state_dir=f"{opts.state_dir}-lane{self.lane}")
        session = await self._owner._supervisor.open(self.key, opts)
        if self._closed:  # the turn ended while it opened
            await self._close_session(session)
            raise DriverCrashed("the answer ended before its driver opened", driver=opts.driver)
        self._session = session
        self.start_soon(self._pump, session)
        return session

    async def wait_resets(self) -> None:
        return  # a lane's session is new: no rewind of the topic's session concerns it

    def detach_session(self) -> None:
        self._session = None

    # --- lifetime -------------------------------------------------------------------------

    def session_for(self, key: str) -> DriverSession | None:
        """The session of `key` if it is this lane's (or one of its delegated children's)."""
        return self._session if key == self.key else self.runner.session_for(key)

    def lost(self, error: HostdError) -> None:
        """A command could not be written to this lane's session: the lane ends."""
        machine = self.runner.machine
        if machine is not None and not machine.over:
            self.runner.feed(machine, partial(machine.lost, error))

    def turn_over(self, status: TurnStatus, error: str, error_code: str) -> None:
        """The whole turn ended (`TurnEnded`): a lane still running ends with it."""
        self._ended(status, error, error_code)

    def _ended(self, status: TurnStatus, error: str, error_code: str) -> None:
        machine = self.runner.machine
        if machine is not None:
            self.runner.feed(machine, partial(machine.turn_ended, status, error, error_code))
        if not self._closed:
            self._closed = True
            session, self._session = self._session, None
            if session is not None:
                self.start_soon(self._close_session, session)

    async def _close_session(self, session: DriverSession) -> None:
        with trio.CancelScope(shield=True):
            try:
                await self._owner._supervisor.close(self.key)
            except HostdError as exc:
                log.info("topic %s: closing lane %d: %s", self.topic_id, self.lane, exc)

    async def aclose(self) -> None:
        """The host is closing: close the session now."""
        self._closed = True
        session, self._session = self._session, None
        if session is not None:
            await self._close_session(session)

    async def _pump(self, session: DriverSession) -> None:
        from hostd.shell.drivers.supervisor import SessionEnded

        error: HostdError | None = None
        async for item in session.events:
            if isinstance(item, SessionEnded):
                error = item.error
                break
            if item:
                self.feed(list(item), trio.current_time())
        if self._session is not session:
            return  # closed on purpose (the lane ended)
        self._session = None
        self.lost(
            error or DriverCrashed("the driver session ended during a turn", driver=session.driver)
        )


class Lanes:
    """The extra lanes of the host's running turn, by lane number."""

    def __init__(self, owner: LaneOwner) -> None:
        self._owner = owner
        self.by_lane: dict[int, LaneHost] = {}

    def start(self, eff: StartLane) -> None:
        """`StartLane`: a lane host and its machine, started like the topic's own turn."""
        from hostd.core.turn import TurnMachine

        owner = self._owner
        services = owner._services
        if eff.lane == 1:
            self.by_lane = {}  # a new multi-answer turn: the last one's lanes are all over
        lane = LaneHost(owner, eff.lane, eff.turn_id, services)
        self.by_lane[eff.lane] = lane
        machine: TurnMachine = TurnMachine(
            topic=lane_topic(owner.info, eff.target),
            send=eff.send,
            workspaces=str(services.workspaces),
            now=time.time(),
            ask_retry=bool(services.observers.observers),
            prepare=services.observers.prepares,
            key=lane.key,
            fresh=True,  # a lane's session is always new: it is fed the visible history
        )
        lane.runner.begin(machine)

    def key_of(self, lane: int) -> str | None:
        """Where a command for lane `lane` goes now (None: no such lane)."""
        host = self.by_lane.get(lane)
        if host is None:
            return None
        machine = host.runner.machine
        return machine.session_key if machine is not None and not machine.over else host.key

    def owner_of(self, key: str) -> LaneHost | None:
        """The lane a session key belongs to (its own key, or a delegated child's below it)."""
        for host in self.by_lane.values():
            if key == host.key or key.startswith(host.key + "/"):
                return host
        return None

    def stop(self, lane: int | None = None) -> None:
        """A stop of the turn reaches every lane machine, a stop of one answer its lane's (a
        running hook is cancelled)."""
        for n, host in self.by_lane.items():
            if lane is not None and n != lane:
                continue
            machine = host.runner.machine
            if machine is not None and not machine.over:
                host.runner.feed(machine, machine.stop)

    def end_all(self, status: TurnStatus, error: str, error_code: str) -> None:
        """The turn ended: every lane machine still running ends, every session closes."""
        for host in self.by_lane.values():
            host.turn_over(status, error, error_code)

    async def aclose(self) -> None:
        for host in self.by_lane.values():
            await host.aclose()


async def check_takers(
    registry: DriverRegistry,
    turns: TurnServices,
    topic: TopicInfo,
    also: list[AnswerTarget],
    msg: SendMessage,
    environ_of: Callable[[DriverSpec, Mapping[str, Any]], Mapping[str, str]],
) -> None:
    """Refuse a message (nothing is stored) that the topic's driver, or an extra answer's,
    must not take: images when it takes none (`DriverSpec.images`: that model would never
    see them); per-message options a window may not set, over the topic's own
    (`window_options`: checked again before the `Send` reaches a driver). A driver the
    topic's roles decide is resolved as its turn would; one not known here passes (its turn
    then fails the usual way)."""
    if not (msg.attachments or msg.options):
        return
    from hostd.core.options import merge_options
    from hostd.core.sandbox_policy import driver_options
    from hostd.shell.drivers.window_options import check_window_options

    async def check(lane: TopicInfo) -> None:
        try:
            driver = lane.driver or await turns.resolve_driver(lane.assistant, lane.model)
            spec = registry.get(driver)
        except HostdError:
            return
        if msg.attachments and not spec.images:
            raise images_refused(driver, lane=lane is not topic)
        if msg.options:
            options = driver_options(merge_options(topic.options, msg.options))
            await turns.config.current()  # the assistant files as they are now
            check_window_options(
                spec, options, turns.config.configured_values, environ_of(spec, options)
            )

    await check(topic)
    for n, target in enumerate(also, 1):
        try:
            await check(lane_topic(topic, target))
        except HostdError as exc:
            raise refused_target(exc, n, target) from None


def refused_target(exc: HostdError, n: int, target: AnswerTarget) -> HostdError:
    """`exc` (why extra answer `n`'s target cannot run) said as the refusal of the whole
    send: which target, and that nothing was sent. Same class and code."""
    who = f"@{target.assistant}" if target.assistant else "/".join(
        x for x in (target.driver, target.model) if x
    )
    message = f"extra answer {n} ({who}): {exc.message}; nothing was sent"
    if isinstance(exc, DriverError):
        kept = {k: v for k, v in exc.details.items() if k not in ("driver", "exit_code")}
        return type(exc)(message, driver=exc.driver, details={**kept, "lane": n})
    return type(exc)(message, details={**exc.details, "lane": n})
