"""ACP's `$/cancel_request` on both sides of hostd, driven by the official ACP SDK against the
real daemon: an agent behind the ACP driver withdraws its permission request (the approval
closes for every window, with the reason, and a late answer is refused), and the editor
withdraws requests it sent `hostd acp` (a prompt is stopped and answers `cancelled`; a load
the daemon cannot serve is answered -32800 and can be made again)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
import trio

from hostd.client import Client, open_client
from hostd.shell.paths import Paths
from hostd_protocol.client_messages import ApprovalRequested, ApprovalResolved
from hostd_protocol.errors import AlreadyAnswered
from tests.acp.support import write_agents_file
from tests.acp_editor.editor import (
    TIMEOUT,
    Editor,
    is_update,
    prompt,
    scripted_session,
    text_of,
)
from tests.turns import until_turn_ended

WITHDRAWN = "the agent withdrew its permission request"


async def test_cancel_request_on_both_sides_of_hostd(home: Path, tmp_path: Path) -> None:
    """One daemon and one SDK editor (`hostd acp`): a session on the ACP driver (test agent)
    and a second window, then a session on the scripted driver."""
    write_agents_file(home)
    with trio.fail_after(TIMEOUT):
        async with scripted_session(home, tmp_path) as (ed, sid), open_client(
            Paths.under(home)
        ) as window:
            new = await ed.call("session/new", {
                "cwd": str(tmp_path), "mcpServers": [],
                "_meta": {"hostd": {"driver": "acp", "options": {"agent": "test"}}},
            })
            await _agent_withdraws(ed, window, new["sessionId"], tmp_path)
            await _editor_withdraws(ed, window, sid, tmp_path)


async def _agent_withdraws(ed: Editor, window: Client, sid: str, tmp_path: Path) -> None:
    """editor -> `hostd acp` -> daemon -> ACP driver -> test agent, which takes its
    permission request back: closed in every window with the reason, a late answer refused."""
    go = tmp_path / "go"
    os.mkfifo(go)
    async with window.attach(sid) as sub:
        tag = await ed.start_call("session/prompt", prompt(sid, f"withdraw {go}"))
        asked = await ed.wait_for(lambda e: e.get("ev") == "permission")
        approval = None
        async for item in sub:
            if isinstance(item, ApprovalRequested):
                approval = item.approval
                break
        assert approval is not None and approval.tool
        # Both windows show it: now the agent takes it back.
        await trio.Path(go).write_text("go")
        resolved = None
        async for item in sub:
            if isinstance(item, ApprovalResolved):
                resolved = item
                break
        assert resolved is not None
        assert (resolved.approval_id, resolved.status, resolved.reason) == (
            approval.id, "cancelled", WITHDRAWN
        )
        # The editor's card is taken down too (`hostd acp` withdraws its request).
        await ed.wait_for(
            lambda e: e.get("ev") == "withdrawn" and e["key"] == asked["key"]
        )
        with pytest.raises(AlreadyAnswered, match=WITHDRAWN) as late:
            await window.answer_approval(sid, approval.id, True, "")
        assert late.value.details["reason"] == WITHDRAWN
        done = await ed.result(tag)
        assert done.get("result", {}).get("stopReason") == "end_turn", done
        # The agent was answered with the method's own cancellation result.
        assert "withdrawn: cancelled" in ed.text(sid)
        assert (await window.get_topic(sid)).state == "idle"


async def _editor_withdraws(ed: Editor, window: Client, sid: str, tmp_path: Path) -> None:
    """The editor takes back requests it sent `hostd acp`."""
    # 1. A prompt in flight: its turn is stopped, the partial answer kept, and the
    # prompt is answered with ACP's cancellation result for it.
    tag = await ed.start_call(
        "session/prompt", prompt(sid, "/chunks 5000 size=8 rate=100")
    )
    await ed.wait_for(is_update("agent_message_chunk", sid))
    await ed.command({"op": "cancel", "tag": tag})
    assert (await ed.result(tag))["result"] == {"stopReason": "cancelled"}
    answer = (await window.history(sid)).rows[-1]
    assert answer.status == "stopped"
    assert 0 < len(text_of(answer.parts)) < 5000 * 8
    # 2. A load the daemon cannot serve now (stopped): withdrawn, it is answered
    # -32800 at once; once the daemon runs again the same load works.
    other = await window.create_topic(driver="scripted", working_dir=str(tmp_path))
    async with window.attach(other.id) as sub:
        await window.send(other.id, "/text loaded later", "start")
        await until_turn_ended(sub)
    pid = (await window.status()).pid
    os.kill(pid, signal.SIGSTOP)
    try:
        tag = await ed.start_call(
            "session/load",
            {"sessionId": other.id, "cwd": str(tmp_path), "mcpServers": []},
        )
        await ed.command({"op": "cancel", "tag": tag})
        got = await ed.result(tag)
    finally:
        os.kill(pid, signal.SIGCONT)
    assert got["error"]["code"] == -32800, got
    await ed.call(
        "session/load", {"sessionId": other.id, "cwd": str(tmp_path), "mcpServers": []}
    )
    assert "loaded later" in ed.text(other.id)
