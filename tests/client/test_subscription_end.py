"""How a subscription ends when its connection does: quietly when this client closed its own
connection (the caller ended it), with the typed error when hostd went away (that side is
tests/e2e/test_cli_acceptance.py, a real daemon killed under `hostd attach`)."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from hostd.client import Client, open_client
from hostd_protocol.errors import ConnectionClosed
from tests.shell.conftest import Running


async def _follow(
    client: Client,
    topic_id: str,
    ended: list[object],
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """A window's task: its attach block stays open until the iteration ends."""
    try:
        async with client.attach(topic_id) as sub:
            task_status.started()
            async for _ in sub:
                pass
        ended.append("quiet")
    except Exception as exc:  # the test reports what ended it
        ended.append(exc)


@pytest.mark.parametrize("how", ["aclose", "block end"])
async def test_closing_the_own_client_ends_an_open_subscription_quietly(
    running: Running, how: str
) -> None:
    ended: list[object] = []
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            async with open_client(running.paths) as client:
                topic = await client.create_topic(title="t")
                await nursery.start(_follow, client, topic.id, ended)
                if how == "aclose":
                    await client.aclose()
                    with pytest.raises(
                        ConnectionClosed, match=r"^the client closed the connection$"
                    ):
                        await client.list_topics()
            # "block end": leaving open_client's block closes the connection under the task.
    assert ended == ["quiet"]
