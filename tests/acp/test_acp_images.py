"""Images through the ACP driver (protocol 1.5 attachments): an agent whose
`promptCapabilities.image` is true gets them as ACP image blocks before the text; one that
takes none fails the turn saying so, never a turn that quietly leaves them out."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from hostd.testing.conformance import ConformanceProfile, serving
from hostd_protocol.common import Attachment, TextDelta
from hostd_protocol.driver_messages import Send
from tests.acp.support import profile
from tests.acp.test_acp_driver import TIMEOUT, chunks, turn

DOT = Attachment(media_type="image/png", data="iVBORw0KGgo=", name="dot.png")


@pytest.fixture
def prof(tmp_path: Path) -> ConformanceProfile:
    return profile(tmp_path / "home")


async def test_an_agent_that_takes_images_gets_them_as_image_blocks(
    prof: ConformanceProfile, tmp_path: Path
) -> None:
    with trio.fail_after(TIMEOUT):
        async with serving(prof, tmp_path) as sup:
            session = await sup.open("t", prof.options())
            result = await turn(session, "t1", "hello", send=Send(
                turn_id="t1", text="hello", attachments=[DOT]))
    assert result.end is not None and result.end.status == "success", result.end
    assert chunks(result)[0] == TextDelta(text="images: image/png 12; ")


async def test_an_agent_that_takes_no_images_fails_the_turn_saying_so(
    prof: ConformanceProfile, tmp_path: Path
) -> None:
    with trio.fail_after(TIMEOUT):
        async with serving(prof, tmp_path) as sup:
            session = await sup.open("t", prof.options(agent="blind"))
            result = await turn(session, "t1", "hello", send=Send(
                turn_id="t1", text="hello", attachments=[DOT]))
            assert result.end is not None and result.end.status == "error"
            assert result.end.error == (
                "the ACP agent 'blind' takes no images (its promptCapabilities say so); "
                "send the message without them"
            )
            # The session goes on: the next message without images is answered.
            again = await turn(session, "t2", "hello")
    assert again.end is not None and again.end.status == "success"
