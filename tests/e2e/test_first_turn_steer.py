"""A steer sent the moment a topic's first turn starts (before its driver is up) is injected.

Found from the web page: a steer sent ~0.2 s after the first send came back `queued` and ran
as the next turn, although the scripted driver can inject and was waiting for it. The
driver's capabilities are unknown until it is ready; the steer must go to it all the same.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from hostd.client import open_client
from hostd.shell.paths import Paths
from hostd_protocol.client_messages import Rolled, TurnEnded
from hostd_protocol.common import TextDelta
from tests.e2e import daemon_proc

pytestmark = pytest.mark.e2e


def text_of(parts: list[object]) -> str:
    return "".join(p.text for p in parts if isinstance(p, TextDelta))


async def test_steer_before_the_driver_is_ready_rolls_the_first_answer(home: Path) -> None:
    with trio.fail_after(60):
        d = await daemon_proc.start(home)
        try:
            paths = Paths.under(home)
            async with open_client(paths) as c:
                t = await c.create_topic(title="first", driver="scripted")
                async with c.attach(t.id) as sub:
                    sent = await c.send(t.id, "/text hello\n/tool Read wait-steer=20\n/text done")
                    # At once: the driver process has not even answered its handshake yet.
                    steer = await c.send(t.id, "also this", "steer")
                    assert steer.disposition == "steered"
                    rolled = False
                    async for ev in sub:
                        rolled = rolled or isinstance(ev, Rolled)
                        if isinstance(ev, TurnEnded) and ev.turn_id == sent.turn_id:
                            assert ev.status == "success", ev
                            break
                    assert rolled
                stored = (await c.history(t.id)).rows
                assert [r.role for r in stored] == ["user", "assistant", "user", "assistant"]
                assert text_of(stored[2].parts) == "also this"
                assert "You said: also this" in text_of(stored[3].parts)
        finally:
            assert await d.terminate() == 0
