"""`hostd acp` outlives the daemon, driven by the official ACP SDK as an editor would: when
the daemon stops (or is killed mid-answer), `hostd acp` starts it again as it does at its
own start, re-attaches its sessions, tells the editor in the transcript, answers a prompt
whose turn died with an error, and the same ACP session goes on."""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio

from tests.acp_editor.editor import HOSTD, Editor, editor
from tests.acp_editor.test_editor import TIMEOUT, is_update, new_session, prompt
from tests.e2e import daemon_proc


def is_note(event: dict[str, Any]) -> bool:
    if event.get("ev") != "update":
        return False
    update = event["params"]["update"]
    return bool(update.get("_meta", {}).get("hostd", {}).get("notice") == "reconnected")


@asynccontextmanager
async def started(home: Path) -> AsyncIterator[daemon_proc.DaemonProcess]:
    """The test's daemon; the one `hostd acp` starts again is stopped at the end too."""
    d = await daemon_proc.start(home)
    try:
        yield d
    finally:
        await d.terminate()
        await trio.to_thread.run_sync(lambda: subprocess.run(
            [HOSTD, "--home", str(home), "stop"], capture_output=True, timeout=60, check=False
        ))


async def _prompt_ok(ed: Editor, sid: str, text: str) -> None:
    result = await ed.call("session/prompt", prompt(sid, text))
    assert result == {"stopReason": "end_turn"}


async def test_a_daemon_stopped_between_prompts_is_started_again_and_the_session_goes_on(
    home: Path, tmp_path: Path
) -> None:
    with trio.fail_after(TIMEOUT * 2):
        async with started(home) as d, editor(home, "--driver", "scripted") as ed:
            await ed.initialize()
            sid = await new_session(ed, tmp_path)
            await _prompt_ok(ed, sid, "/text one")
            assert await d.terminate() == 0  # `hostd stop`, a crash, an upgrade...
            note = await ed.wait_for(is_note)
            assert note["params"]["sessionId"] == sid
            assert "this session goes on" in note["params"]["update"]["content"]["text"]
            # The same session, on the daemon `hostd acp` started again.
            await _prompt_ok(ed, sid, "/text two")
            assert ed.text(sid).endswith("two")
            assert ed.proc.returncode is None


async def test_a_daemon_killed_mid_answer_fails_that_prompt_and_the_next_one_works(
    home: Path, tmp_path: Path
) -> None:
    with trio.fail_after(TIMEOUT * 2):
        async with started(home) as d, editor(home, "--driver", "scripted") as ed:
            await ed.initialize()
            sid = await new_session(ed, tmp_path)
            events = len(ed.events)
            tag = await ed.start_call("session/prompt", prompt(sid, "/chunks 400 size=4 rate=40"))
            await ed.wait_for(is_update("agent_message_chunk", sid), after=events)
            await d.kill9()
            answer = await ed.result(tag)
            # The turn died with the daemon: the prompt is answered (not left hanging).
            assert answer["error"]["code"] == -32603, answer
            assert "the daemon stopped during this answer" in answer["error"]["message"]
            await ed.wait_for(is_note)
            await _prompt_ok(ed, sid, "/text after the crash")
            assert ed.text(sid).endswith("after the crash")
