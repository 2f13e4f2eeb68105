"""Plans and commands through the real daemon and the scripted driver: a plan is a part of
the answer row (stored, in snapshots, in history, after a restart); the command list is a
topic event and part of the snapshot."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from hostd.client import open_client
from hostd.shell.paths import Paths
from hostd_protocol.client_messages import CommandsChanged, RowAppended, Snapshot, TurnEnded
from hostd_protocol.common import CommandInfo, PlanChunk, PlanEntry
from tests.e2e import daemon_proc

pytestmark = pytest.mark.e2e

SCRIPT = (
    "/commands review:path help\n"
    "/plan [~] read; [ ] write\n"
    "/text working\n"
    "/plan [x] read; [~] write\n"
    "/commands review:path help\n"  # the same list again: windows hear only of changes
    "/text done"
)
FIRST = PlanChunk(
    entries=[PlanEntry(content="read", status="in_progress"), PlanEntry(content="write")]
)
SECOND = PlanChunk(
    entries=[
        PlanEntry(content="read", status="completed"),
        PlanEntry(content="write", status="in_progress"),
    ]
)
COMMANDS = [
    CommandInfo(name="review", description="the scripted review", input_hint="path"),
    CommandInfo(name="help", description="the scripted help"),
]


async def test_plans_and_commands_are_stored_and_replayed(home: Path) -> None:
    paths = Paths.under(home)
    with trio.fail_after(60):
        d = await daemon_proc.start(home)
        try:
            async with open_client(paths) as c:
                t = await c.create_topic(driver="scripted", options={"chunk_rate": 0})
                live: list[object] = []
                async with c.attach(t.id) as sub:
                    await c.send(t.id, SCRIPT)
                    async for ev in sub:
                        live.append(ev)
                        if isinstance(ev, TurnEnded):
                            break
                plans = [e.chunk for e in live if isinstance(e, RowAppended)
                         and isinstance(e.chunk, PlanChunk)]
                assert plans == [FIRST, SECOND]
                changes = [e for e in live if isinstance(e, CommandsChanged)]
                assert [e.commands for e in changes] == [COMMANDS]
                answer = (await c.history(t.id)).rows[-1]
                assert [p for p in answer.parts if isinstance(p, PlanChunk)] == [FIRST, SECOND]
                # A window attaching later gets both in its snapshot.
                async with c.attach(t.id) as later:
                    snap = await later.__anext__()
                    assert isinstance(snap, Snapshot)
                    assert snap.commands == COMMANDS
                    assert snap.rows[-1].parts == answer.parts
                    assert later.transcript.commands == COMMANDS
        finally:
            assert await d.terminate() == 0
        # Plans are stored with the row: they survive a restart.
        d2 = await daemon_proc.start(home)
        try:
            async with open_client(paths) as c:
                rows = (await c.history(t.id)).rows
                assert [p for p in rows[-1].parts if isinstance(p, PlanChunk)] == [FIRST, SECOND]
        finally:
            assert await d2.terminate() == 0
