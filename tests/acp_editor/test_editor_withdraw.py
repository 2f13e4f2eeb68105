"""A permission request the editor shows for an approval that closed without it is withdrawn
(ACP's `$/cancel_request`, which the official SDK turns into an aborted handler): answered
in another window, its turn stopped elsewhere, its turn gone with a killed daemon. Driven by
the official ACP SDK against the real daemon and the scripted driver."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio

from hostd.client import open_client
from hostd.shell.paths import Paths
from tests.acp_editor.editor import (
    TIMEOUT,
    Editor,
    editor,
    is_note,
    prompt,
    restarted_daemon,
    scripted_session,
)


async def _asked(ed: Editor, sid: str) -> tuple[str, dict[str, Any]]:
    """A prompt whose turn asks an approval: its call's tag, the editor's permission event."""
    events = len(ed.events)
    tag = await ed.start_call("session/prompt", prompt(sid, "/approve Bash"))
    return tag, await ed.wait_for(lambda e: e.get("ev") == "permission", after=events)


def _withdrawn(key: str) -> Any:
    return lambda e: e.get("ev") == "withdrawn" and e["key"] == key


async def test_answered_in_another_window_or_stopped_elsewhere_the_request_is_withdrawn(
    home: Path, tmp_path: Path
) -> None:
    with trio.fail_after(TIMEOUT):
        async with scripted_session(home, tmp_path) as (ed, sid), open_client(
            Paths.under(home)
        ) as window:
            # 1. another window answers first: the editor's prompt is taken down
            tag, asked = await _asked(ed, sid)
            approval_id = asked["params"]["toolCall"]["toolCallId"]
            await window.answer_approval(sid, approval_id, True, "")
            await ed.wait_for(_withdrawn(asked["key"]))
            done = await ed.result(tag)
            assert done.get("result") == {"stopReason": "end_turn"}, done
            assert "approved: ran Bash." in ed.text(sid)
            # 2. the turn is stopped from another window: its approval closes with it
            tag, asked = await _asked(ed, sid)
            await window.stop(sid)
            await ed.wait_for(_withdrawn(asked["key"]))
            done = await ed.result(tag)
            assert done.get("result") == {"stopReason": "cancelled"}, done
            assert ed.proc.returncode is None


async def test_a_request_for_a_turn_that_died_with_the_daemon_is_withdrawn(
    home: Path, tmp_path: Path
) -> None:
    with trio.fail_after(TIMEOUT * 2):
        async with restarted_daemon(home) as d, editor(home, "--driver", "scripted") as ed:
            await ed.initialize()
            sid = await ed.new_session(tmp_path)
            tag, asked = await _asked(ed, sid)
            await d.kill9()
            # On the daemon `hostd acp` starts again the approval is closed (its turn died):
            # the card the editor still shows is withdrawn, the prompt answered.
            await ed.wait_for(_withdrawn(asked["key"]))
            answer = await ed.result(tag)
            assert answer["error"]["code"] == -32603, answer
            await ed.wait_for(is_note)
