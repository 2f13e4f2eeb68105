"""`hostd acp` at the end of its input with requests in flight, driven by the official ACP
SDK as an editor that closes its writing end and still reads: every request is answered
(a prompt whose turn runs: an error saying the answer goes on), its permission requests are
withdrawn, and nothing is stopped in the daemon (the answer still runs, the approval stays
open for other windows)."""

from __future__ import annotations

from pathlib import Path

import trio

from hostd.client import open_client
from hostd.shell.paths import Paths
from hostd_protocol.client_messages import TurnEnded
from tests.acp_editor.editor import TIMEOUT, daemon, editor, is_update, prompt, text_of


async def test_at_eof_requests_in_flight_are_answered_and_nothing_stops_in_the_daemon(
    home: Path, tmp_path: Path
) -> None:
    with trio.fail_after(TIMEOUT):
        async with daemon(home):
            async with open_client(Paths.under(home)) as window, editor(
                home, "--driver", "scripted"
            ) as ed:
                await ed.initialize()
                long_sid = await ed.new_session(tmp_path)
                asking_sid = await ed.new_session(tmp_path)
                # `/wait` answers until stopped; `/approve` until its approval is answered.
                long_tag = await ed.start_call(
                    "session/prompt", prompt(long_sid, "/text partial\n/wait")
                )
                await ed.wait_for(is_update("agent_message_chunk", long_sid))
                asking_tag = await ed.start_call(
                    "session/prompt", prompt(asking_sid, "/approve Bash")
                )
                asked = await ed.wait_for(lambda e: e.get("ev") == "permission")
                await ed.command({"op": "eof"})
                exited = await ed.wait_for(lambda e: e.get("ev") == "exit")
                assert exited["code"] == 0, exited
                # Both prompts were answered before hostd acp exited, saying why.
                for tag, sid in ((long_tag, long_sid), (asking_tag, asking_sid)):
                    got = await ed.result(tag)
                    assert got["error"]["code"] == -32603, got
                    assert "goes on in the daemon" in got["error"]["message"]
                    assert sid in got["error"]["message"]
                await ed.wait_for(
                    lambda e: e.get("ev") == "withdrawn" and e["key"] == asked["key"]
                )
                # Nothing was stopped: the answer still runs, the approval is still open.
                assert (await window.get_topic(long_sid)).state == "answering"
                async with window.attach(asking_sid) as sub:
                    approval_id = asked["params"]["toolCall"]["toolCallId"]
                    await window.answer_approval(asking_sid, approval_id, True, "")
                    async for ev in sub:
                        if isinstance(ev, TurnEnded):
                            assert ev.status == "success"
                            break
                answer = (await window.history(asking_sid)).rows[-1]
                assert "approved: ran Bash." in text_of(answer.parts)
                await window.stop(long_sid)
