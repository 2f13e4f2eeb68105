"""`hostd acp` outlives the daemon, driven by the official ACP SDK as an editor would: when
the daemon stops (or is killed mid-answer), `hostd acp` starts it again as it does at its
own start, re-attaches its sessions, tells the editor in the transcript, answers a prompt
whose turn died with an error, and the same ACP session goes on."""

from __future__ import annotations

from pathlib import Path

import trio

from tests.acp_editor.editor import (
    TIMEOUT,
    editor,
    is_note,
    is_update,
    prompt,
    restarted_daemon,
)


async def test_a_daemon_stopped_between_prompts_is_started_again_and_the_session_goes_on(
    home: Path, tmp_path: Path
) -> None:
    with trio.fail_after(TIMEOUT * 2):
        async with restarted_daemon(home) as d, editor(home, "--driver", "scripted") as ed:
            await ed.initialize()
            sid = await ed.new_session(tmp_path)
            await ed.prompt_ok(sid, "/text one")
            assert await d.terminate() == 0  # `hostd stop`, a crash, an upgrade...
            note = await ed.wait_for(is_note)
            assert note["params"]["sessionId"] == sid
            assert "this session goes on" in note["params"]["update"]["content"]["text"]
            # The same session, on the daemon `hostd acp` started again.
            await ed.prompt_ok(sid, "/text two")
            assert ed.text(sid).endswith("two")
            assert ed.proc.returncode is None


async def test_a_daemon_killed_mid_answer_fails_that_prompt_and_the_next_one_works(
    home: Path, tmp_path: Path
) -> None:
    with trio.fail_after(TIMEOUT * 2):
        async with restarted_daemon(home) as d, editor(home, "--driver", "scripted") as ed:
            await ed.initialize()
            sid = await ed.new_session(tmp_path)
            events = len(ed.events)
            tag = await ed.start_call("session/prompt", prompt(sid, "/chunks 400 size=4 rate=40"))
            await ed.wait_for(is_update("agent_message_chunk", sid), after=events)
            await d.kill9()
            answer = await ed.result(tag)
            # The turn died with the daemon: the prompt is answered (not left hanging).
            assert answer["error"]["code"] == -32603, answer
            assert "the daemon stopped during this answer" in answer["error"]["message"]
            await ed.wait_for(is_note)
            await ed.prompt_ok(sid, "/text after the crash")
            assert ed.text(sid).endswith("after the crash")
