"""What the Claude Code driver makes the CLI send to the model (the fake Messages API's
recorded requests): Claude Code's own system prompt, with or without the assistant's text.

The SDK turns `system_prompt=None` into `--system-prompt ""`: a bare "Claude agent" without
Claude Code's instructions. The driver always asks for the `claude_code` preset, and appends
an assistant's system prompt to it.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from hostd_protocol.common import PROTOCOL_VERSION, Attachment
from hostd_protocol.driver_messages import Init, TurnEnd
from tests.claude.driver_peer import DriverProcess, offline_env
from tests.fakes.anthropic_api import (
    FakeAnthropicAPI,
    RecordedRequest,
    Rule,
    text,
    user_says,
    user_texts,
)

pytestmark = pytest.mark.claude

TURN_TIMEOUT = 30
#: Claude Code's preset is several KB; the SDK's bare identity line alone is ~60 characters.
PRESET_MIN_CHARS = 2000
APPENDED = "Always close your answers with the word Marmalade."


@pytest.fixture(scope="module")
def api() -> Iterator[FakeAnthropicAPI]:
    with FakeAnthropicAPI([Rule(user_says("hello"), text("Hi!"), times=None)]) as server:
        yield server


def system_text(req: RecordedRequest) -> str:
    """The request's system prompt without the CLI's billing header block."""
    system = req.body.get("system") or []
    if isinstance(system, str):
        return system
    return "\n".join(
        b.get("text", "")
        for b in system
        if not b.get("text", "").startswith("x-anthropic-billing-header")
    )


async def one_turn(api: FakeAnthropicAPI, workdir: Path, system_prompt: str) -> RecordedRequest:
    """A new driver process, one turn "hello"; the request the model got."""
    proc = DriverProcess(offline_env(api.base_url))
    before = len(api.message_requests)
    try:
        with trio.fail_after(TURN_TIMEOUT):
            async with proc.attach() as peer:
                await peer.handshake(
                    Init(
                        protocol_version=PROTOCOL_VERSION,
                        working_dir=str(workdir),
                        system_prompt=system_prompt,
                    )
                )
                events = await peer.turn("t1", "hello")
        end = events[-1]
        assert isinstance(end, TurnEnd) and end.status == "success", proc.stderr_text()[-2000:]
    finally:
        proc.close()
        proc.cleanup()
    (req,) = [r for r in api.message_requests[before:] if r.has_tools]
    return req


async def test_without_an_assistant_prompt_the_model_gets_claude_codes_own(
    api: FakeAnthropicAPI,
) -> None:
    with tempfile.TemporaryDirectory(prefix="hostd-cc-") as d:
        req = await one_turn(api, Path(d), "")
    assert len(system_text(req)) > PRESET_MIN_CHARS, system_text(req)


async def test_an_assistant_prompt_is_appended_to_claude_codes_own(
    api: FakeAnthropicAPI,
) -> None:
    with tempfile.TemporaryDirectory(prefix="hostd-cc-") as d:
        req = await one_turn(api, Path(d), APPENDED)
    system = system_text(req)
    assert APPENDED in system
    # Appended: Claude Code's own prompt comes first and is all there.
    assert len(system[: system.index(APPENDED)]) > PRESET_MIN_CHARS, system


#: A 1x1 transparent PNG.
PNG_1x1 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII="


async def test_an_attached_image_reaches_the_model_as_an_image_block(api: FakeAnthropicAPI) -> None:
    """Protocol 1.5: `Send.attachments` go to the CLI as one user message of image blocks
    and the text, and the CLI passes them on: the Messages API gets the image."""
    with tempfile.TemporaryDirectory(prefix="hostd-cc-") as d:
        proc = DriverProcess(offline_env(api.base_url))
        before = len(api.message_requests)
        try:
            with trio.fail_after(TURN_TIMEOUT):
                async with proc.attach() as peer:
                    await peer.handshake(Init(protocol_version=PROTOCOL_VERSION, working_dir=d))
                    image = Attachment(media_type="image/png", data=PNG_1x1, name="dot.png")
                    events = await peer.turn("t1", "hello", attachments=[image])
            assert isinstance(events[-1], TurnEnd) and events[-1].status == "success", proc.stderr_text()[-2000:]
        finally:
            proc.close()
            proc.cleanup()
    (req,) = [r for r in api.message_requests[before:] if r.has_tools]
    blocks = [b for m in req.body["messages"] if m["role"] == "user" for b in m["content"] if isinstance(b, dict)]
    images = [b for b in blocks if b.get("type") == "image"]
    assert images == [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG_1x1}}]
    assert any("hello" in t for t in user_texts(req.body)), user_texts(req.body)
