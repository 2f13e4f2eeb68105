"""The host's choice between a vendor fork and the host path, through the real daemon and the
scripted driver (`hostd.core.vendor_session`): a fork at the last row offers the original's
vendor session (`Init.fork_from`); a driver declaring `fork_session` continues a copy of it
and is fed no history; one that does not (the default) starts fresh and is fed the history.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from hostd.client import Client, open_client
from hostd.shell.paths import Paths
from tests.e2e import daemon_proc
from tests.e2e.test_topic_ops_e2e import text_of, turn_over

pytestmark = pytest.mark.e2e


async def answer(c: Client, topic_id: str, text: str) -> str:
    async with c.attach(topic_id) as sub:
        sent = await c.send(topic_id, text)
        ended = await turn_over(sub, sent.turn_id)
    assert ended.status == "success", ended
    return text_of((await c.history(topic_id)).rows[-1])


async def fork_at_last_row(c: Client, options: dict[str, Any]) -> tuple[str, str, str]:
    """A topic with one turn, forked at its last row; returns (original, fork, whoami of
    the original: its vendor session token)."""
    t = await c.create_topic(title="vf", driver="scripted", options=options)
    session = await answer(c, t.id, "/whoami")
    assert session.startswith("new session scripted-"), session
    last = (await c.history(t.id)).rows[-1].id
    fork = await c.fork_topic(t.id, last)
    return t.id, fork.id, session.removeprefix("new session ")


async def test_fork_takes_the_vendor_copy_only_when_the_driver_declares_it(home: Path) -> None:
    paths = Paths.under(home)
    with trio.fail_after(90):
        d = await daemon_proc.start(home)
        try:
            async with open_client(paths) as c:
                # A driver that declares `fork_session`: its first session is the copy.
                _t, fork, token = await fork_at_last_row(c, {"fork_session": True})
                assert await answer(c, fork, "/history") == "(no history)"
                assert await answer(c, fork, "/whoami") == f"resumed a copy of {token}"

                # The default scripted driver declares nothing: it was offered the same and
                # ignored it; the host fed its fresh session the copied history.
                t, fork, _token = await fork_at_last_row(c, {})
                assert await answer(c, fork, "/history") == "user: /whoami\nassistant: " + (
                    text_of((await c.history(t)).rows[1])
                )
                whoami = await answer(c, fork, "/whoami")
                assert whoami.startswith("new session scripted-"), whoami
        finally:
            assert await d.terminate() == 0
