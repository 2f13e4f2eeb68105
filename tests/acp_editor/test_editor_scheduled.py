"""A scheduled run seen through `hostd acp` by the official ACP SDK: in a loaded topic's
history and live, its user message is labelled with the schedule (as `hostd chat` shows
`schedule sc1 >`), never shown as if the user had typed it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio

from hostd.client import Client, open_client
from hostd.shell.paths import Paths
from hostd_protocol.client_messages import TurnEnded
from tests.acp_editor.editor import TIMEOUT, daemon, editor, is_update

YEAR_S = 365 * 86400.0


async def _run_now_and_wait(c: Client, topic_id: str, schedule_id: str) -> None:
    async with c.attach(topic_id) as sub:
        await c.run_schedule_now(schedule_id)
        async for ev in sub:
            if isinstance(ev, TurnEnded):
                assert ev.status == "success"
                return


def _user_chunks(updates: list[dict[str, Any]]) -> list[tuple[str, object]]:
    return [
        (u["content"]["text"], u.get("_meta"))
        for u in updates
        if u["sessionUpdate"] == "user_message_chunk"
    ]


async def test_a_scheduled_run_is_labelled_with_its_schedule_in_history_and_live(
    home: Path, tmp_path: Path
) -> None:
    with trio.fail_after(TIMEOUT):
        async with daemon(home):
            async with open_client(Paths.under(home)) as c:
                topic = await c.create_topic(driver="scripted", options={"chunk_rate": 0})
                tid = topic.id
                await c.send(tid, "/text typed answer", "start")
                schedule = await c.add_schedule(tid, "/text scheduled answer", every_s=YEAR_S)
                await _run_now_and_wait(c, tid, schedule.id)
                label = (f"schedule {schedule.id}: ", {"hostd": {"scheduledBy": schedule.id}})
                async with editor(home) as ed:
                    await ed.initialize()
                    await ed.call(
                        "session/load", {"sessionId": tid, "cwd": str(tmp_path), "mcpServers": []}
                    )
                    # History: the typed message as is, the scheduled one labelled.
                    assert _user_chunks(ed.updates(tid)) == [
                        ("/text typed answer", None),
                        label,
                        ("/text scheduled answer", label[1]),
                    ]
                    # Live: a run while the session is open is labelled the same way.
                    seen, events = len(ed.updates(tid)), len(ed.events)
                    await _run_now_and_wait(c, tid, schedule.id)
                    await ed.wait_for(is_update("agent_message_chunk", tid), after=events)
                    live = ed.updates(tid)[seen:]
                    assert _user_chunks(live)[:2] == [label, ("/text scheduled answer", label[1])]
