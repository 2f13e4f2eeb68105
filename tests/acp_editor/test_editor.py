"""`hostd acp` driven by a real ACP client we did not write: the official TypeScript SDK
(`@agentclientprotocol/sdk`, pinned in tests/acp_editor/package.json), as an editor would,
against the real daemon and the scripted driver."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest
import trio

from hostd.client import open_client
from hostd.shell.paths import Paths
from hostd_protocol.client_messages import TurnEnded
from tests.acp.support import write_agents_file
from tests.acp_editor.editor import (
    HOSTD,
    TIMEOUT,
    daemon,
    editor,
    is_update,
    prompt,
    scripted_session,
    text_of,
)

pytestmark = pytest.mark.e2e


async def test_a_new_session_streams_the_answer_and_is_a_topic(
    home: Path, tmp_path: Path
) -> None:
    with trio.fail_after(TIMEOUT):
        async with daemon(home):
            async with editor(home, "--driver", "scripted") as ed:
                init = await ed.initialize()
                assert init["protocolVersion"] == 1
                caps = init["agentCapabilities"]
                assert caps["loadSession"] is True
                assert caps["promptCapabilities"]["embeddedContext"] is True
                assert "list" in caps["sessionCapabilities"]
                sid = await ed.new_session(tmp_path)
                script = (
                    "/commands review:path\n/plan [x] read; [~] write\n"
                    "/chunks 20 size=4 rate=200\n/tool Read pause=0\n/text done."
                )
                result = await ed.call("session/prompt", prompt(sid, script))
                assert result == {"stopReason": "end_turn"}
                kinds = [u["sessionUpdate"] for u in ed.updates(sid)]
                assert kinds.count("agent_message_chunk") >= 2  # streamed, not one block
                assert {"available_commands_update", "plan", "tool_call",
                        "tool_call_update"} <= set(kinds)
                plan = next(u for u in ed.updates(sid) if u["sessionUpdate"] == "plan")
                assert [(e["content"], e["status"]) for e in plan["entries"]] == [
                    ("read", "completed"), ("write", "in_progress")
                ]
                call = next(u for u in ed.updates(sid) if u["sessionUpdate"] == "tool_call")
                assert call["kind"] == "read" and call["locations"] == [{"path": "README.md"}]
                # The session is an ordinary topic: same answer, the editor's cwd.
                async with open_client(Paths.under(home)) as c:
                    topic = await c.get_topic(sid)
                    assert topic.working_dir == str(tmp_path)
                    rows = (await c.history(sid)).rows
                    assert text_of(rows[-1].parts) == ed.text(sid)
                listed = await ed.call("session/list", {})
                assert sid in [s["sessionId"] for s in listed["sessions"]]


async def test_a_permission_answered_in_the_editor_then_one_answered_elsewhere_first(
    home: Path, tmp_path: Path
) -> None:
    with trio.fail_after(TIMEOUT):
        async with scripted_session(home, tmp_path) as (ed, sid), open_client(
            Paths.under(home)
        ) as window:
            # 1. answered in the editor
            tag = await ed.start_call("session/prompt", prompt(sid, "/approve Bash"))
            asked = await ed.wait_for(lambda e: e.get("ev") == "permission")
            await ed.select(asked, "allow_once")
            assert (await ed.result(tag))["result"] == {"stopReason": "end_turn"}
            assert "approved: ran Bash." in ed.text(sid)
            # 2. another window answers first; the editor's late answer changes nothing
            tag = await ed.start_call("session/prompt", prompt(sid, "/approve Bash"))
            asked = await ed.wait_for(
                lambda e: e.get("ev") == "permission" and e["key"] != asked["key"]
            )
            approval_id = asked["params"]["toolCall"]["toolCallId"]
            await window.answer_approval(sid, approval_id, False, "no from the CLI")
            await ed.wait_for(
                lambda e: e.get("ev") == "update"
                and e["params"]["update"].get("toolCallId") == approval_id
                and e["params"]["update"].get("status") == "failed"
            )
            await ed.select(asked, "allow_once")
            done = await ed.result(tag)
            assert done.get("result") == {"stopReason": "end_turn"}, done
            assert "denied: did not run Bash (no from the CLI)." in ed.text(sid)


async def test_cancel_stops_the_turn_and_keeps_the_partial_answer(
    home: Path, tmp_path: Path
) -> None:
    with trio.fail_after(TIMEOUT):
        async with scripted_session(home, tmp_path) as (ed, sid):
            tag = await ed.start_call(
                "session/prompt", prompt(sid, "/chunks 5000 size=8 rate=100")
            )
            await ed.wait_for(is_update("agent_message_chunk", sid))
            # Ctrl-C at a terminal editor's (acpx) terminal reaches hostd acp too (one process
            # group), and the editor sends session/cancel: that cancel must not be lost.
            os.kill(ed.agent_pid, signal.SIGINT)
            await ed.command({"op": "notify", "method": "session/cancel",
                              "params": {"sessionId": sid}})
            assert (await ed.result(tag)).get("result") == {"stopReason": "cancelled"}
            async with open_client(Paths.under(home)) as c:
                answer = (await c.history(sid)).rows[-1]
            assert answer.status == "stopped"
            assert 0 < len(text_of(answer.parts)) < 5000 * 8
            # The next prompt works.
            again = await ed.call("session/prompt", prompt(sid, "/text after the stop"))
            assert again == {"stopReason": "end_turn"}


async def test_loading_a_topic_made_by_the_cli_replays_its_history_in_order(
    home: Path, tmp_path: Path
) -> None:
    with trio.fail_after(TIMEOUT):
        async with daemon(home):
            def cli(*args: str) -> str:
                return subprocess.run(
                    [HOSTD, "--home", str(home), *args],
                    check=True, capture_output=True, text=True, timeout=30,
                ).stdout.strip()

            tid = await trio.to_thread.run_sync(
                lambda: cli("new", "--driver", "scripted", "--option", "chunk_rate=0")
            )
            for text in ("/text first answer", "/tool Read pause=0\n/text second answer"):
                await trio.to_thread.run_sync(lambda t=text: cli("send", tid, t, "--follow"))
            async with editor(home) as ed:
                await ed.initialize()
                assert await ed.call(
                    "session/load", {"sessionId": tid, "cwd": str(tmp_path), "mcpServers": []}
                ) is not None
                got = [
                    (u["sessionUpdate"], u["content"]["text"] if "text" in str(u.get("content"))
                     and isinstance(u["content"], dict) else "")
                    for u in ed.updates(tid)
                ]
                # In order, all before the load's answer (the SDK saw them first).
                assert got == [
                    ("user_message_chunk", "/text first answer"),
                    ("agent_message_chunk", "first answer"),
                    ("user_message_chunk", "/tool Read pause=0\n/text second answer"),
                    ("tool_call", ""),
                    ("tool_call_update", ""),
                    ("agent_message_chunk", "second answer"),
                ]
                # Then live: a prompt in the loaded session.
                result = await ed.call("session/prompt", prompt(tid, "/text third"))
                assert result == {"stopReason": "end_turn"}
                assert ed.text(tid).endswith("third")
                missing = await ed.result(await ed.start_call(
                    "session/load", {"sessionId": "tp-none", "cwd": "/", "mcpServers": []}
                ))
                assert missing["error"]["code"] == -32002


async def test_the_editor_killed_mid_answer_leaves_the_daemon_to_finish_it(
    home: Path, tmp_path: Path
) -> None:
    with trio.fail_after(TIMEOUT):
        async with daemon(home):
            async with open_client(Paths.under(home)) as window:
                async with editor(home, "--driver", "scripted") as ed:
                    await ed.initialize()
                    sid = await ed.new_session(tmp_path)
                    async with window.attach(sid) as sub:
                        await ed.start_call(
                            "session/prompt", prompt(sid, "/chunks 150 size=8 rate=150")
                        )
                        await ed.wait_for(is_update("agent_message_chunk", sid))
                        ed.proc.send_signal(signal.SIGKILL)  # the editor dies
                        await ed.proc.wait()
                        ended = None
                        async for ev in sub:
                            if isinstance(ev, TurnEnded):
                                ended = ev
                                break
                    assert ended is not None and ended.status == "success"
                    answer = (await window.history(sid)).rows[-1]
                    assert answer.status == "success" and len(text_of(answer.parts)) == 150 * 8
                    # `hostd acp` saw its stdin close and ended (no orphan left behind).
                    await _exited(ed.agent_pid)


async def _exited(pid: int) -> None:
    """Wait for a process that is not our child to exit (a pidfd turns readable)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        with trio.fail_after(10):
            await trio.lowlevel.wait_readable(fd)
    finally:
        os.close(fd)


async def test_garbage_and_unknown_methods_get_json_rpc_errors_and_nothing_else_breaks(
    home: Path, tmp_path: Path
) -> None:
    with trio.fail_after(TIMEOUT):
        async with daemon(home):
            async with open_client(Paths.under(home)) as window:
                other = await window.create_topic(driver="scripted", options={"chunk_rate": 0})
                async with editor(home, "--driver", "scripted") as ed:
                    await ed.initialize()
                    sid = await ed.new_session(tmp_path)
                    unknown = await ed.result(await ed.start_call("no/such/method", {}))
                    assert unknown["error"]["code"] == -32601
                    bad = await ed.result(await ed.start_call("session/prompt", {"x": 1}))
                    assert bad["error"]["code"] == -32002  # no such session
                    # What the editor sent is wrong: invalid params, not an internal error
                    # (found from outside: a 2 MB prompt and an unknown option were -32603).
                    big = await ed.result(
                        await ed.start_call("session/prompt", prompt(sid, "x" * 2_000_000))
                    )
                    assert big["error"]["code"] == -32602
                    assert big["error"]["message"].startswith("payload_too_large: ")
                    opts = await ed.result(await ed.start_call("session/new", {
                        "cwd": str(tmp_path), "mcpServers": [],
                        "_meta": {"hostd": {"options": {"bogus": 1}}},
                    }))
                    assert opts["error"]["code"] == -32602
                    assert opts["error"]["message"].startswith("invalid_argument: unknown option")
                    # A cwd that does not exist is refused, never created (as for every entry).
                    gone = tmp_path / "gone"
                    missing = await ed.result(await ed.start_call("session/new", {
                        "cwd": str(gone), "mcpServers": [],
                    }))
                    assert missing["error"]["code"] == -32602
                    assert missing["error"]["message"] == (
                        f"invalid_argument: working directory {str(gone)!r} does not exist; "
                        "create it, or choose an existing directory"
                    )
                    assert not gone.exists()
                    await ed.command({"op": "raw", "text": "this is not json\n{\"a\": 1}\n"})
                    result = await ed.call("session/prompt", prompt(sid, "/text still here"))
                    assert result == {"stopReason": "end_turn"}
                    assert ed.text(sid) == "still here"
                # The daemon and its other topics never noticed.
                sent = await window.send(other.id, "/text other topic fine")
                assert sent.disposition == "started"
                async with window.attach(other.id) as sub:
                    async for ev in sub:
                        if isinstance(ev, TurnEnded):
                            break
                assert text_of((await window.history(other.id)).rows[-1].parts) == (
                    "other topic fine"
                )


async def test_a_prompt_while_a_turn_runs_steers_it_and_modes_switch_per_prompt(
    home: Path, tmp_path: Path
) -> None:
    with trio.fail_after(TIMEOUT):
        async with daemon(home):
            async with editor(home, "--driver", "scripted") as ed:
                await ed.initialize()
                new = await ed.call("session/new", {"cwd": str(tmp_path), "mcpServers": []})
                sid = new["sessionId"]
                assert new["modes"]["currentModeId"] == "default"
                assert "echo" in [m["id"] for m in new["modes"]["availableModes"]]
                first = await ed.start_call(
                    "session/prompt", prompt(sid, "/tool Read wait-steer=20\n/text first done")
                )
                await ed.wait_for(is_update("tool_call", sid))
                second = await ed.start_call("session/prompt", prompt(sid, "and also this"))
                assert (await ed.result(first))["result"] == {"stopReason": "end_turn"}
                assert (await ed.result(second))["result"] == {"stopReason": "end_turn"}
                assert "You said: and also this." in ed.text(sid)
                async with open_client(Paths.under(home)) as c:
                    rows = (await c.history(sid)).rows
                # A1a, U2, A2: the steer went into the running answer.
                assert [r.role for r in rows] == ["user", "assistant", "user", "assistant"]
                assert len({r.turn_id for r in rows}) == 1
                # Modes: the scripted driver's scenarios, carried by the next prompt.
                await ed.call("session/set_mode", {"sessionId": sid, "modeId": "echo"})
                await ed.wait_for(is_update("current_mode_update", sid))
                before = len(ed.text(sid))
                await ed.call("session/prompt", prompt(sid, "say it back"))
                assert ed.text(sid)[before:] == "say it back"
                bad = await ed.result(await ed.start_call(
                    "session/set_mode", {"sessionId": sid, "modeId": "nope"}
                ))
                assert bad["error"]["code"] == -32602


async def test_the_editors_mcp_servers_reach_an_acp_agent_behind_the_acp_driver(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """hostd on both sides of ACP: the editor -> `hostd acp` -> the ACP driver -> an agent.
    `_meta.hostd` picks the driver; the editor's MCP servers reach the agent's session."""
    write_agents_file(home)
    # No HOSTD_HOME in the daemon's environment: `--home` alone tells its drivers where the
    # agents file is (the ACP driver read the default config folder before).
    monkeypatch.delenv("HOSTD_HOME", raising=False)
    with trio.fail_after(TIMEOUT):
        async with daemon(home):
            async with editor(home, "--driver", "scripted") as ed:
                await ed.initialize()
                new = await ed.call("session/new", {
                    "cwd": str(tmp_path),
                    "mcpServers": [{"name": "files", "command": "/bin/true", "args": [],
                                    "env": [{"name": "A", "value": "1"}]}],
                    "_meta": {"hostd": {"driver": "acp", "options": {"agent": "test"}}},
                })
                sid = new["sessionId"]
                assert "modes" not in new  # the acp driver offers none through hostd
                await ed.call("session/prompt", prompt(sid, "mcp"))
                assert ed.text(sid) == "mcp servers: files"
                await ed.call("session/prompt", prompt(sid, "plan"))
                plans = [u for u in ed.updates(sid) if u["sessionUpdate"] == "plan"]
                assert [e["status"] for e in plans[-1]["entries"]] == ["completed", "in_progress"]
                assert any(u["sessionUpdate"] == "available_commands_update"
                           for u in ed.updates(sid))


def test_a_daemon_it_cannot_reach_is_one_line_and_exit_code_1(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    proc = subprocess.run(
        [HOSTD, "--home", str(blocker / "home"), "acp"],
        input="", capture_output=True, text=True, timeout=30, check=False,
    )
    assert proc.returncode == 1
    assert proc.stdout == ""  # stdout is the editor's channel
    # The clients' one mapping of a socket path no daemon can be reached at (every command).
    assert proc.stderr.splitlines() == [
        f"hostd: cannot reach hostd at {blocker}/home/run/hostd.sock: Not a directory; point "
        "--home / HOSTD_HOME at a folder of your own"
    ]


async def test_with_busy_intent_queue_a_second_prompt_is_the_next_turn(
    home: Path, tmp_path: Path
) -> None:
    with trio.fail_after(TIMEOUT):
        async with scripted_session(home, tmp_path, "--busy-intent", "queue") as (ed, sid):
            first = await ed.start_call(
                "session/prompt", prompt(sid, "/tool Read wait-steer=1\n/text first")
            )
            await ed.wait_for(is_update("tool_call", sid))
            second = await ed.start_call("session/prompt", prompt(sid, "/text second"))
            assert (await ed.result(first))["result"] == {"stopReason": "end_turn"}
            assert (await ed.result(second))["result"] == {"stopReason": "end_turn"}
            assert "You said" not in ed.text(sid)  # not steered into the first answer
            assert ed.text(sid).endswith("firstsecond")
            async with open_client(Paths.under(home)) as c:
                rows = (await c.history(sid)).rows
            assert [r.role for r in rows] == ["user", "assistant", "user", "assistant"]
            assert rows[1].turn_id != rows[3].turn_id  # two turns


async def test_a_steer_the_driver_cannot_take_is_answered_when_its_own_turn_ends(
    home: Path, tmp_path: Path
) -> None:
    with trio.fail_after(TIMEOUT):
        async with scripted_session(home, tmp_path) as (ed, sid):
            # No tool call, so no point where the steer could go in: it is sent as a
            # steer but runs as the next turn.
            first = await ed.start_call(
                "session/prompt", prompt(sid, "/chunks 100 size=4 rate=200\n/text first")
            )
            await ed.wait_for(is_update("agent_message_chunk", sid))
            second = await ed.start_call("session/prompt", prompt(sid, "/text second"))
            assert (await ed.result(first))["result"] == {"stopReason": "end_turn"}
            assert (await ed.result(second))["result"] == {"stopReason": "end_turn"}
            # Answered after its own answer streamed, not at the end of the first turn.
            done = next(i for i, e in enumerate(ed.events)
                        if e.get("ev") == "result" and e.get("tag") == second)
            streamed = [e["params"]["update"]["content"]["text"] for e in ed.events[:done]
                        if e.get("ev") == "update"
                        and e["params"]["update"]["sessionUpdate"] == "agent_message_chunk"]
            assert "second" in streamed
