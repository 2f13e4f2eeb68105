"""Images from an editor, driven by the official ACP SDK: `hostd acp` advertises image
prompts where the driver of new sessions takes images (`DriverSpec.images`), and an image
content block reaches the driver as an attachment (protocol 1.5), stored with the user row.
The scripted driver says what it got, as a model would look at it."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
import trio

from hostd.acp.inputs import prompt_input
from hostd.client import open_client
from hostd.shell.paths import Paths
from hostd_acp.rpc_peer import RequestRefused
from tests.acp_editor.editor import TIMEOUT, daemon, editor

DOT = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="


async def test_an_image_block_reaches_the_driver_and_is_stored_with_the_message(
    home: Path, tmp_path: Path
) -> None:
    with trio.fail_after(TIMEOUT):
        async with daemon(home):
            async with editor(home, "--driver", "scripted") as ed:
                init = await ed.initialize()
                assert init["agentCapabilities"]["promptCapabilities"]["image"] is True
                sid = await ed.new_session(tmp_path)
                result = await ed.call("session/prompt", {"sessionId": sid, "prompt": [
                    {"type": "image", "mimeType": "image/png", "data": DOT,
                     "uri": "file:///home/me/dot.png"},
                    {"type": "text", "text": "/text seen"},
                ]})
                assert result == {"stopReason": "end_turn"}
                size = len(base64.b64decode(DOT))
                assert ed.text(sid) == f"(images: dot.png image/png {size} bytes) seen"
            async with open_client(Paths.under(home)) as c:
                sent = (await c.history(sid)).rows[0]
                assert sent.meta["attachments"] == [
                    {"media_type": "image/png", "data": DOT, "name": "dot.png"}
                ]


def test_a_driver_without_images_refuses_an_image_block_with_a_reason() -> None:
    blocks = [{"type": "image", "mimeType": "image/png", "data": DOT},
              {"type": "text", "text": "what is it?"}]
    text, images = prompt_input(blocks, images=True)
    assert (text, [(a.media_type, a.name) for a in images]) == (
        "what is it?", [("image/png", "image-1")])
    with pytest.raises(RequestRefused, match=r"^the bench-load driver takes no images; "):
        prompt_input(blocks, images=False, driver="bench-load")
