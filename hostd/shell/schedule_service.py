"""Schedules inside the daemon: the scheduler's view of topics and the store, and the
`*-schedule` request handlers. Kept out of `hostd.shell.daemon` so the daemon only wires it in.

- `DaemonScheduleTarget`: a run is sent exactly like a window's `send` (topic loaded on
  demand, the same permission check, answered once the row is committed), with the run's
  `client_msg_id` (`schedule:<id>:<due>`), which every window sees in the row's `meta`.
- `WriterScheduleStore`: schedule writes go through the one store writer, durably.
- `schedule_handlers`: the request handlers, merged into the daemon's table.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import trio

from hostd.core.schedules import Notify, StartRun
from hostd.shell.scheduler import Scheduler
from hostd.shell.store import store as st
from hostd.shell.topic_host import new_id
from hostd_protocol.client_messages import (
    AddSchedule,
    CreateTopic,
    Empty,
    ListSchedules,
    RemoveSchedule,
    Result,
    RunScheduleNow,
    ScheduleInfo,
    ScheduleListResult,
    ScheduleResult,
    SendResult,
    SetScheduleEnabled,
)

if TYPE_CHECKING:
    from hostd.shell.connection import Connection
    from hostd.shell.daemon import Daemon


class DaemonScheduleTarget:
    """`ScheduleTarget` over the daemon's topic hosts."""

    def __init__(self, daemon: Daemon) -> None:
        self._daemon = daemon

    async def send_scheduled(self, run: StartRun) -> tuple[str, SendResult]:
        topic_id = run.topic_id
        if not topic_id:
            title = f"{run.text.strip().splitlines()[0][:60]} (schedule {run.schedule_id})"
            info = await self._daemon.create_topic(CreateTopic(id=0, title=title, assistant=run.assistant))
            topic_id = info.id
        host = await self._daemon.host(topic_id)
        # The same refusal a window's send gets (the daemon's own user sends for it).
        self._daemon.turns.check(os.getuid(), host.topic_info())
        result = await host.send(run.text, run.intent, client_msg_id=run.client_msg_id)
        return topic_id, result

    def run_active(self, info: ScheduleInfo) -> bool:
        host = self._daemon.hosts.get(info.last_topic_id or info.topic_id)
        if host is None or host.closed:
            return False  # not loaded: nothing of it is queued or running
        row = host.runtime.row(info.last_row_id)
        if row is None:
            return False
        return row.status == "queued" or (
            bool(row.turn_id) and row.turn_id == host.runtime.active_turn_id
        )

    def notify(self, notice: Notify) -> None:
        host = self._daemon.hosts.get(notice.topic_id)
        if host is None or host.closed:
            return  # nobody is attached to a topic that is not loaded; the schedule keeps it
        host.apply(
            host.runtime.notice(notice.code, notice.message, notice.level, trio.current_time())
        )


class WriterScheduleStore:
    """`ScheduleStore` over the daemon's store writer."""

    def __init__(self, writer: st.StoreWriter) -> None:
        self._writer = writer

    def save_schedule(self, info: ScheduleInfo) -> int:
        return self._writer.put(st.PutSchedule(info), durable=True)

    def drop_schedule(self, schedule_id: str) -> int:
        return self._writer.put(st.DeleteSchedule(schedule_id), durable=True)

    async def wait_committed(self, gen: int | None = None) -> None:
        await self._writer.wait_committed(gen)


def schedule_handlers(
    daemon: Daemon, scheduler: Scheduler
) -> dict[type, Callable[[Connection, Any], Any]]:
    """The handlers of the schedule requests."""

    async def add(conn: Connection, msg: AddSchedule) -> Result:
        if msg.topic_id:
            daemon._topic_info(msg.topic_id)  # unknown topic -> UnknownTopic
        if msg.assistant:
            await daemon.turns.config.load(msg.assistant)  # unknown or broken: ConfigError
        info = ScheduleInfo(
            id=new_id("sc"),
            topic_id=msg.topic_id,
            assistant=msg.assistant,
            text=msg.text,
            cron=msg.cron,
            every_s=msg.every_s,
            tz=msg.tz,
            busy=msg.busy,
            missed=msg.missed,
            enabled=msg.enabled,
        )
        return ScheduleResult(schedule=await scheduler.add(info))

    async def list_(conn: Connection, msg: ListSchedules) -> Result:
        if msg.topic_id:
            daemon._topic_info(msg.topic_id)
        return ScheduleListResult(schedules=scheduler.book.schedules(msg.topic_id))

    async def remove(conn: Connection, msg: RemoveSchedule) -> Result:
        await scheduler.remove(msg.schedule_id)
        return Empty()

    async def set_enabled(conn: Connection, msg: SetScheduleEnabled) -> Result:
        return ScheduleResult(schedule=await scheduler.set_enabled(msg.schedule_id, msg.enabled))

    async def run_now(conn: Connection, msg: RunScheduleNow) -> Result:
        return ScheduleResult(schedule=await scheduler.run_now(msg.schedule_id))

    return {
        AddSchedule: add,
        ListSchedules: list_,
        RemoveSchedule: remove,
        SetScheduleEnabled: set_enabled,
        RunScheduleNow: run_now,
    }


__all__ = ["DaemonScheduleTarget", "WriterScheduleStore", "schedule_handlers"]
