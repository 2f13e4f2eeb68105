"""The scheduler service: runs the schedule core (`hostd.core.schedules`) on trio's clock.

`Scheduler.serve` sleeps until the soonest due time (or until a request changed the
schedules), asks the book what is due, and carries out its effects in order:

- `StartRun`: an ordinary send through `ScheduleTarget.send_scheduled` (the same path a
  window's `send` takes), then `run_sent` / `run_refused` with the outcome;
- `SaveSchedule` / `DropSchedule`: to the store (`ScheduleStore`), committed before a request
  that changed a schedule is answered;
- `Notify`: a `notice` to the topic's windows.

Due times are wall-clock (cron lines mean local times), but every wait is a trio sleep, so
tests drive it with `MockClock`: pass a `wall` that follows `trio.current_time()`. A sleep
never lasts longer than `max_sleep`, so a wall clock that jumps (suspend, NTP) is noticed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Protocol

import trio

from hostd.core.schedules import (
    DropSchedule,
    Notify,
    SaveSchedule,
    ScheduleBook,
    ScheduleEffect,
    StartRun,
)
from hostd_protocol.client_messages import ScheduleInfo, SendResult, TopicEvent
from hostd_protocol.errors import HostdError

log = logging.getLogger(__name__)

#: The longest the scheduler sleeps without looking at the wall clock again.
DEFAULT_MAX_SLEEP = 30.0


class ScheduleTarget(Protocol):
    """What the scheduler needs from the daemon."""

    async def send_scheduled(self, run: StartRun) -> tuple[str, SendResult]:
        """Send `run.text` to `run.topic_id` (or to a new topic of `run.assistant`) like a
        window's send (committed before it returns), with the run's key and intent; the
        topic it went to and the send's result. Raises HostdError when refused."""
        ...

    def run_active(self, info: ScheduleInfo) -> bool:
        """True while the row of the schedule's latest run (`last_row_id` in
        `last_topic_id`) is queued or being answered."""
        ...

    def notify(self, notice: Notify) -> None:
        """Show a notice to the windows of `notice.topic_id` (nothing if it is not loaded)."""
        ...


class ScheduleStore(Protocol):
    """Where schedules are kept: writes are queued and return a generation to wait for."""

    def save_schedule(self, info: ScheduleInfo) -> int: ...

    def drop_schedule(self, schedule_id: str) -> int: ...

    async def wait_committed(self, gen: int | None = None) -> None: ...


class Scheduler:
    """The daemon's schedules: requests, the due-time loop, and the topic events it follows.

    Args:
        book: The core, built from the stored schedules.
        target: Sends runs and shows notices (the daemon).
        store: Persists schedules.
        wall: Unix time now; tests pass one that follows trio's clock.
        max_sleep: Look at the wall clock at least this often.
    """

    def __init__(
        self,
        book: ScheduleBook,
        target: ScheduleTarget,
        store: ScheduleStore,
        *,
        wall: Callable[[], float] = time.time,
        max_sleep: float = DEFAULT_MAX_SLEEP,
    ) -> None:
        self.book = book
        self._target = target
        self._store = store
        self._wall = wall
        self._max_sleep = max_sleep
        self._changed = trio.Event()
        self._lock = trio.Lock()  # one batch of effects at a time: runs start in order

    # --- the loop -------------------------------------------------------------------------

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run due schedules until cancelled."""
        task_status.started()
        while True:
            now = self._wall()
            running = {s.id for s in self.book.schedules() if s.last_row_id and self._target.run_active(s)}
            effects = self.book.collect(now, running)
            if effects:
                async with self._lock:
                    await self._execute(effects)
                continue  # a run may have taken a while: look at the clock again
            nxt = self.book.next_wake()
            delay = self._max_sleep
            if nxt is not None and nxt.next_due is not None:
                delay = min(delay, max(nxt.next_due - self._wall(), 0.0))
            with trio.move_on_after(delay):
                await self._changed.wait()
            self._changed = trio.Event()

    def _wake(self) -> None:
        self._changed.set()

    async def _execute(self, effects: list[ScheduleEffect]) -> HostdError | None:
        """Carry out effects in order; the error of a refused run, if one was."""
        gen = 0
        refused: HostdError | None = None
        for eff in effects:
            if isinstance(eff, StartRun):
                await self._store.wait_committed(gen or None)  # skips recorded before the run
                gen = 0
                refused = await self._start(eff) or refused
            else:
                gen = self._apply(eff) or gen
        if gen:
            await self._store.wait_committed(gen)
        return refused

    def _apply(self, eff: ScheduleEffect) -> int:
        """A non-run effect; the store generation to wait for (0: none)."""
        if isinstance(eff, SaveSchedule):
            return self._store.save_schedule(eff.schedule)
        if isinstance(eff, DropSchedule):
            return self._store.drop_schedule(eff.schedule_id)
        if isinstance(eff, Notify):
            self._target.notify(eff)
        return 0

    async def _start(self, run: StartRun) -> HostdError | None:
        refused: HostdError | None = None
        try:
            topic_id, result = await self._target.send_scheduled(run)
        except HostdError as exc:
            log.info("schedule %s: run refused: %s", run.schedule_id, exc.message)
            refused = exc
            effects = self.book.run_refused(run.schedule_id, exc.code, exc.message, self._wall())
        except Exception as exc:
            # A bug while sending fails this run, never the scheduler.
            log.exception("schedule %s: run failed", run.schedule_id)
            effects = self.book.run_refused(
                run.schedule_id, "internal_error", f"internal error: {exc!r}", self._wall()
            )
        else:
            effects = self.book.run_sent(run.schedule_id, result, self._wall(), topic_id=topic_id)
        gen = 0
        for eff in effects:
            gen = self._apply(eff) or gen
        if gen:
            await self._store.wait_committed(gen)
        return refused

    # --- requests (from the daemon's handlers) --------------------------------------------

    async def add(self, info: ScheduleInfo) -> ScheduleInfo:
        """Validate, store (committed) and start timing a new schedule."""
        added, effects = self.book.add(info, self._wall())
        await self._execute(list(effects))
        self._wake()
        return added

    async def remove(self, schedule_id: str) -> None:
        await self._execute(self.book.remove(schedule_id))
        self._wake()

    async def set_enabled(self, schedule_id: str, enabled: bool) -> ScheduleInfo:
        info, effects = self.book.set_enabled(schedule_id, enabled, self._wall())
        await self._execute(effects)
        self._wake()
        return info

    async def run_now(self, schedule_id: str) -> ScheduleInfo:
        """Run outside the due times; returns the schedule once the message is stored.

        Raises:
            NotFound: unknown schedule.
            TopicBusy: its previous run is still going, or (busy `skip`) the topic answers.
            HostdError: whatever refused the send (recorded in the schedule too).
        """
        async with self._lock:
            info = self.book.get(schedule_id)
            running = bool(info.last_row_id) and self._target.run_active(info)
            effects = self.book.run_now(schedule_id, self._wall(), running=running)
            refused = await self._execute(effects)
        if refused is not None:
            raise refused
        return self.book.get(schedule_id)

    def observe(self, topic_id: str, event: TopicEvent) -> None:
        """Every event of every topic (synchronously, as the topic host emits it)."""
        for eff in self.book.observe(topic_id, event):
            self._apply(eff)

    def next_due(self) -> ScheduleInfo | None:
        return self.book.next_wake()

    def statistics(self) -> tuple[int, ScheduleInfo | None]:
        """(enabled schedules, the one due soonest)."""
        enabled = sum(1 for s in self.book.schedules() if s.enabled)
        return enabled, self.book.next_wake()


def wall_following(clock_origin: float) -> Callable[[], float]:
    """A wall clock that is `clock_origin` at trio time 0 and follows trio's clock (tests)."""

    def wall() -> float:
        return clock_origin + trio.current_time()

    return wall


__all__ = ["DEFAULT_MAX_SLEEP", "ScheduleStore", "ScheduleTarget", "Scheduler", "wall_following"]
