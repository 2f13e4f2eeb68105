"""The real daemon with the Claude Code driver, run in the test's process on the offline
environment that points the CLI at the fake Messages API, and the ways the tests here follow
a turn through it (one place: the daemon, sandbox and approval scaffolding was written out
in each test module). `until_turn_ended` and `text_of` are tests/turns.py's, re-exported."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import trio

from hostd.client import Client
from hostd.shell.daemon import DaemonConfig, serve_daemon
from hostd.shell.drivers.registry import DriverRegistry
from hostd.shell.drivers.sandbox import Sandbox
from hostd.shell.drivers.supervisor import Supervisor
from hostd.shell.paths import Paths
from hostd_claude_code.spec import SPEC
from hostd_protocol.client_messages import ApprovalRequested, MessageRow, TurnEnded
from hostd_protocol.common import ToolResult
from hostd_protocol.driver_spec import DriverSpec
from tests.turns import text_of, until_turn_ended

__all__ = [
    "start_daemon",
    "text_of",
    "tool_outputs",
    "turn_allowing_tools",
    "until_turn_ended",
]


async def start_daemon(
    nursery: trio.Nursery,
    paths: Paths,
    env: Mapping[str, str],
    *more: DriverSpec,
    sandboxed: bool = False,
) -> None:
    """The real daemon (Claude Code by default, plus `more` drivers), started in `nursery`.
    `sandboxed`: its supervisor can confine drivers (a topic's `sandbox` option), with the
    daemon's own folders kept out of reach."""
    sandbox = Sandbox((str(paths.data_dir), str(paths.runtime_dir))) if sandboxed else None
    await nursery.start(
        lambda task_status: serve_daemon(
            paths,
            config=DaemonConfig(default_driver="claude-code"),
            registry=DriverRegistry.from_specs(SPEC, *more),
            supervisor_factory=lambda r: Supervisor(r, base_env=env, sandbox=sandbox),
            task_status=task_status,
        )
    )


async def turn_allowing_tools(
    client: Client, topic_id: str, text: str
) -> tuple[TurnEnded, list[MessageRow]]:
    """Start a turn with `text`, allow every tool it asks for, and return how it ended and
    the topic's rows."""

    async def allow(item: Any) -> None:
        if isinstance(item, ApprovalRequested):
            await client.answer_approval(topic_id, item.approval.id, allow=True)

    async with client.attach(topic_id) as sub:
        await client.send(topic_id, text, intent="start")
        ended = await until_turn_ended(sub, allow)
        return ended, sub.transcript.rows()


def tool_outputs(rows: list[MessageRow]) -> list[str]:
    """What the turn's tools printed, in order."""
    return [p.output for r in rows for p in r.parts if isinstance(p, ToolResult)]
