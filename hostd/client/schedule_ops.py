"""The client's schedule requests: add, list, remove, pause, resume, run now.

A mixin of `Client` (one concept per module), so the sync client derives them like every
other method (`sync_client.blocking`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hostd_protocol.client_messages import (
    AddSchedule,
    ListSchedules,
    MissedPolicy,
    RemoveSchedule,
    RunScheduleNow,
    ScheduleBusy,
    ScheduleInfo,
    ScheduleListResult,
    ScheduleResult,
    SetScheduleEnabled,
)

__all__ = ["ScheduleOps"]


class ScheduleOps:
    """Requests about scheduled prompts (`hostd_protocol.client_messages.ScheduleInfo`)."""

    if TYPE_CHECKING:  # provided by Client

        async def _request(self, msg: Any) -> Any: ...

    async def add_schedule(
        self,
        topic_id: str,
        text: str,
        *,
        cron: str = "",
        every_s: float = 0.0,
        tz: str = "UTC",
        busy: ScheduleBusy = "queue",
        missed: MissedPolicy = "run-once",
        enabled: bool = True,
        assistant: str = "",
    ) -> ScheduleInfo:
        """Send `text` to `topic_id` at every due time of `cron` (in zone `tz`) or every
        `every_s` seconds; see `ScheduleInfo` for `busy` and `missed`. With `assistant` (and
        `topic_id=""`), every run goes to a new topic of that assistant."""
        r = await self._request(
            AddSchedule(
                id=0,
                topic_id=topic_id,
                text=text,
                cron=cron,
                every_s=every_s,
                tz=tz,
                busy=busy,
                missed=missed,
                enabled=enabled,
                assistant=assistant,
            )
        )
        assert isinstance(r, ScheduleResult)
        return r.schedule

    async def list_schedules(self, topic_id: str = "") -> list[ScheduleInfo]:
        r = await self._request(ListSchedules(id=0, topic_id=topic_id))
        assert isinstance(r, ScheduleListResult)
        return r.schedules

    async def remove_schedule(self, schedule_id: str) -> None:
        await self._request(RemoveSchedule(id=0, schedule_id=schedule_id))

    async def pause_schedule(self, schedule_id: str) -> ScheduleInfo:
        return await self._set_schedule_enabled(schedule_id, False)

    async def resume_schedule(self, schedule_id: str) -> ScheduleInfo:
        """Run again from now on (due times passed while paused are not run)."""
        return await self._set_schedule_enabled(schedule_id, True)

    async def _set_schedule_enabled(self, schedule_id: str, enabled: bool) -> ScheduleInfo:
        r = await self._request(SetScheduleEnabled(id=0, schedule_id=schedule_id, enabled=enabled))
        assert isinstance(r, ScheduleResult)
        return r.schedule

    async def run_schedule_now(self, schedule_id: str) -> ScheduleInfo:
        """Send the schedule's message now; raises TopicBusy while its previous run goes on."""
        r = await self._request(RunScheduleNow(id=0, schedule_id=schedule_id))
        assert isinstance(r, ScheduleResult)
        return r.schedule
