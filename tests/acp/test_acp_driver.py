"""The ACP driver against the deterministic test agent (tests/acp/agent.py), through the real
supervisor: handshake details, approvals, stop, late updates, bad input from the agent,
client file methods, resume in a new process, and the agent's process group.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest
import trio

from hostd.core.delta_merge import coalesce_deltas
from hostd.shell.drivers.supervisor import DriverSession
from hostd.testing.conformance import ConformanceProfile, TurnResult, serving
from hostd_acp.spec import make_spec
from hostd_protocol.common import (
    CommandInfo,
    PlanChunk,
    TextDelta,
    ThinkingDelta,
    ToolCall,
    ToolResult,
)
from hostd_protocol.driver_messages import (
    ApprovalRequest,
    ApprovalResponse,
    ChunkEvent,
    CommandsEvent,
    Log,
    Notice,
    ResumeToken,
    Send,
    UsageEvent,
)
from hostd_protocol.errors import DriverError
from tests.acp.support import profile
from tests.polling import eventually

TIMEOUT = 30


@pytest.fixture
def prof(tmp_path: Path) -> ConformanceProfile:
    return profile(tmp_path / "home")


async def turn(
    session: DriverSession,
    turn_id: str,
    text: str,
    *,
    approve: bool | None = None,
    option: str = "",
    stop_on: type | None = None,
    send: Send | None = None,
) -> TurnResult:
    """Send (`send`, else a `Send` of `text`), answer approvals (when `approve` is set),
    optionally interrupt at the first event of type `stop_on`, and collect the turn."""
    await session.send(send or Send(turn_id=turn_id, text=text))
    result = TurnResult()
    async with trio.open_nursery() as nursery:
        async for batch in session.events:
            assert isinstance(batch, list), f"session ended: {batch}"
            for event in batch:
                result.events.append(event)
                if isinstance(event, ApprovalRequest) and approve is not None:
                    await session.send(
                        ApprovalResponse(
                            approval_id=event.approval_id, allow=approve, option_id=option
                        )
                    )
                if stop_on is not None and isinstance(event, stop_on):
                    stop_on = None
                    nursery.start_soon(session.interrupt, turn_id, 5.0)
                if getattr(event, "turn_id", None) == turn_id and type(event).__name__ == "TurnEnd":
                    result.end = event  # type: ignore[assignment]
            if result.end is not None:
                break
    return result


def chunks(result: TurnResult) -> list[object]:
    """The turn's chunks, consecutive deltas merged (the harness merges the deltas it is
    given in one scheduler pass, so how they are cut depends on timing)."""
    return [e.chunk for e in coalesce_deltas(result.events) if isinstance(e, ChunkEvent)]


def logs(result: TurnResult) -> str:
    return "\n".join(e.message for e in result.events if isinstance(e, Log))


async def test_handshake_names_the_agent_and_a_turn_maps_updates(
    prof: ConformanceProfile, tmp_path: Path
) -> None:
    with trio.fail_after(TIMEOUT):
        async with serving(prof, tmp_path) as sup:
            session = await sup.open("t", prof.options())
            assert session.capabilities.inject_steering is False
            assert session.capabilities.resume is True
            assert session.capabilities.approvals is True
            result = await turn(session, "t1", "hello")
    assert result.end is not None and result.end.status == "success", result.end
    assert chunks(result) == [
        ThinkingDelta(text="pondering"),
        TextDelta(text="Hello from the test agent."),
    ]
    tokens = [e for e in result.events if isinstance(e, ResumeToken)]
    assert len(tokens) == 1 and tokens[0].token.startswith("sess-")
    usage = [e for e in result.events if isinstance(e, UsageEvent)]
    assert usage and usage[-1].usage.input_tokens == 10 and usage[-1].turn_id == "t1"


async def test_plans_are_plan_chunks_and_the_command_list_comes_between_turns(
    prof: ConformanceProfile, tmp_path: Path
) -> None:
    with trio.fail_after(TIMEOUT):
        async with serving(prof, tmp_path) as sup:
            session = await sup.open("t", prof.options())
            result = await turn(session, "t1", "plan")
    assert result.end is not None and result.end.status == "success", result.end
    plans = [c for c in chunks(result) if isinstance(c, PlanChunk)]
    assert [[(e.content, e.status, e.priority) for e in p.entries] for p in plans] == [
        [("read", "in_progress", "high"), ("write", "pending", "high")],
        [("read", "completed", "high"), ("write", "in_progress", "high")],
    ]
    # Sent right after session/new, before the prompt: a CommandsEvent of no turn.
    commands = [e for e in result.events if isinstance(e, CommandsEvent)]
    assert commands == [
        CommandsEvent(
            commands=[
                CommandInfo(name="review", description="Review the changes", input_hint="path"),
                CommandInfo(name="init", description="Write AGENTS.md"),
            ]
        )
    ]
    assert "late update" not in logs(result) and "unknown session" not in logs(result)


@pytest.mark.parametrize(("allow", "option"), [(True, ""), (False, ""), (True, "always")])
async def test_permission_request_becomes_an_approval(
    prof: ConformanceProfile, tmp_path: Path, allow: bool, option: str
) -> None:
    with trio.fail_after(TIMEOUT):
        async with serving(prof, tmp_path) as sup:
            session = await sup.open("t", prof.options())
            result = await turn(session, "t1", "tool", approve=allow, option=option)
    assert result.end is not None and result.end.status == "success", result.end
    kinds = [
        type(e).__name__ for e in result.events if isinstance(e, (ChunkEvent, ApprovalRequest))
    ]
    # The call (with its full input) reaches the host before its approval.
    assert kinds[:2] == ["ChunkEvent", "ApprovalRequest"], kinds
    approval = next(e for e in result.events if isinstance(e, ApprovalRequest))
    assert approval.tool == "touch x"
    assert approval.input == {"command": "touch x"}
    assert [(o.id, o.label, o.kind) for o in approval.options] == [
        ("always", "Always Allow", "allow_always"),
        ("allow", "Allow", "allow_once"),
        ("reject", "Reject", "reject_once"),
    ]
    got = chunks(result)
    assert got[0] == ToolCall(call_id="call-1", name="touch x", input={"command": "touch x"})
    if option == "always":  # the window chose the agent's "always" option
        assert got[1:] == [
            ToolResult(call_id="call-1", output="done"),
            TextDelta(text="Tool ran (always)."),
        ]
    elif allow:  # plain allow: the agent's allow-once option
        assert got[1:] == [ToolResult(call_id="call-1", output="done"), TextDelta(text="Tool ran.")]
    else:
        assert got[1:] == [
            ToolResult(call_id="call-1", output="refused", is_error=True),
            TextDelta(text="Tool refused."),
        ]


async def test_stop_mid_tool_then_two_sends(prof: ConformanceProfile, tmp_path: Path) -> None:
    with trio.fail_after(TIMEOUT):
        async with serving(prof, tmp_path) as sup:
            session = await sup.open("t", prof.options())
            stopped = await turn(session, "t1", "tool-hang", approve=True, stop_on=ApprovalRequest)
            first = await turn(session, "t2", "one")
            second = await turn(session, "t3", "recall")
    assert stopped.end is not None and stopped.end.status == "stopped", stopped.end
    assert first.end is not None and first.end.status == "success", first.end
    assert first.text == "echo: one"
    # The same ACP session goes on (restarted agent, resumed session): it remembers.
    assert second.text == "earlier: tool-hang | one"


async def test_a_late_update_after_a_cancel_never_reaches_the_next_turn(
    prof: ConformanceProfile, tmp_path: Path
) -> None:
    with trio.fail_after(TIMEOUT):
        async with serving(prof, tmp_path) as sup:
            session = await sup.open("t", prof.options())
            stopped = await turn(session, "t1", "count-late", stop_on=ChunkEvent)
            after = await turn(session, "t2", "hello")
    assert stopped.end is not None and stopped.end.status == "stopped"
    assert stopped.text == "1\n"  # the partial answer is kept
    assert after.text == "Hello from the test agent."


async def test_agent_exit_mid_turn_reports_code_and_stderr_then_recovers(
    prof: ConformanceProfile, tmp_path: Path
) -> None:
    with trio.fail_after(TIMEOUT):
        async with serving(prof, tmp_path) as sup:
            session = await sup.open("t", prof.options())
            crashed = await turn(session, "t1", "crash")
            again = await turn(session, "t2", "recall")
    assert crashed.end is not None and crashed.end.status == "error"
    assert crashed.end.error.startswith("the ACP agent 'test' exited during the turn (exit code 3)")
    assert "test agent: crashing on purpose" in crashed.end.error
    assert crashed.text == "about to crash"
    assert again.end is not None and again.end.status == "success", again.end
    assert again.text == "earlier: crash"


@pytest.mark.parametrize(
    ("prompt", "answer", "logged"),
    [
        ("garbage", "after garbage", "dropped malformed message"),
        ("huge", "after huge", "dropped oversized message"),
        ("stranger", "ok", "dropped update for an unknown session"),
        (
            "unsupported",
            "client said: hostd's ACP client does not support terminal/create",
            "dropped request",
        ),
    ],
)
async def test_bad_input_from_the_agent_is_a_bounded_logged_drop(
    prof: ConformanceProfile, tmp_path: Path, prompt: str, answer: str, logged: str
) -> None:
    with trio.fail_after(TIMEOUT):
        async with serving(prof, tmp_path) as sup:
            session = await sup.open("t", prof.options())
            result = await turn(session, "t1", prompt)
            after = await turn(session, "t2", "hello")
    assert result.end is not None and result.end.status == "success", result.end
    assert result.text == answer
    assert logged in logs(result)
    assert after.text == "Hello from the test agent."


async def test_file_methods_stay_inside_the_working_dir(
    prof: ConformanceProfile, tmp_path: Path
) -> None:
    work = tmp_path / "work" / "t"
    outside = tmp_path / "secret.txt"
    outside.write_text("top secret")
    with trio.fail_after(TIMEOUT):
        async with serving(prof, tmp_path) as sup:
            session = await sup.open("t", prof.options())
            wrote = await turn(session, "t1", f"write {work}/note.txt hi there")
            read = await turn(session, "t2", f"read {work}/note.txt")
            escape = await turn(session, "t3", f"read {work}/../../secret.txt")
            (work / "link").symlink_to(outside)
            link = await turn(session, "t4", f"read {work}/link")
            clobber = await turn(session, "t5", f"write {outside} pwned")
    assert wrote.text == "written"
    assert read.text == "content: hi there"
    assert escape.text.startswith("error: path is outside the working directory")
    assert link.text.startswith("error: path is outside the working directory")
    assert clobber.text.startswith("error: path is outside the working directory")
    assert outside.read_text() == "top secret"


@pytest.mark.parametrize("agent", ["test", "loader"])
async def test_resume_in_a_new_driver_process(
    prof: ConformanceProfile, tmp_path: Path, agent: str
) -> None:
    opts = prof.options(agent=agent)
    with trio.fail_after(TIMEOUT):
        async with serving(prof, tmp_path) as sup:
            first = await sup.open("t", opts)
            await turn(first, "t1", "hello")
            token = first.resume_token
            assert token
            await sup.close("t")
        async with serving(prof, tmp_path) as sup:
            second = await sup.open("t", opts, resume_token=token)
            assert second.pid != first.pid
            recall = await turn(second, "t2", "recall")
            lost = await sup.open("u", opts, resume_token="sess-does-not-exist")
            fresh = await turn(lost, "t3", "recall")
    # session/resume (test) or session/load (loader, its replay dropped): same session.
    assert recall.text == "earlier: hello"
    assert fresh.text == "earlier: "
    notices = [e for e in fresh.events if isinstance(e, Notice)]
    assert [n.code for n in notices] == ["resume_failed"]


@pytest.mark.parametrize(
    ("agent", "options", "message"),
    [
        ("mute", {"initialize_timeout": 0.5}, "did not answer initialize within 0.5 s"),
        ("future", {}, "speaks ACP protocol version 2; this driver speaks version 1"),
        ("missing", {}, "command 'hostd-no-such-agent-command' not found"),
    ],
)
async def test_agents_that_cannot_start_fail_the_turn_clearly(
    prof: ConformanceProfile, tmp_path: Path, agent: str, options: dict[str, object], message: str
) -> None:
    with trio.fail_after(TIMEOUT):
        async with serving(prof, tmp_path) as sup:
            session = await sup.open("t", prof.options(agent=agent, **options))
            result = await turn(session, "t1", "hello")
            assert session.alive
    assert result.end is not None and result.end.status == "error"
    assert message in result.end.error, result.end.error
    assert not chunks(result)


async def test_an_unknown_agent_name_refuses_the_session(
    prof: ConformanceProfile, tmp_path: Path
) -> None:
    with trio.fail_after(TIMEOUT):
        async with serving(prof, tmp_path) as sup:
            with pytest.raises(DriverError) as info:
                await sup.open("t", prof.options(agent="nobody"))
    assert "no ACP agent named 'nobody' (configured: " in info.value.message


def processes_in(root: Path) -> list[int]:
    """Pids whose working dir is inside `root`."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cwd = Path(os.readlink(f"/proc/{entry}/cwd"))
            except OSError:
                continue
            if cwd == root or root in cwd.parents:
                found.append(int(entry))
    return found


async def test_closing_ends_an_agent_that_ignores_stdin_close_and_its_children(
    prof: ConformanceProfile, tmp_path: Path
) -> None:
    work = tmp_path / "work" / "t"
    with trio.fail_after(TIMEOUT):
        async with serving(prof, tmp_path) as sup:
            session = await sup.open("t", prof.options(agent="stubborn"))
            await turn(session, "t1", "hello")
            # The agent and its `sleep` child, besides the driver (all work in the topic dir).
            assert len(set(processes_in(work)) - {session.pid}) == 2
            await sup.close("t")
    assert processes_in(work) == []


async def test_hostd_drivers_lists_agents_with_the_version_they_reported(
    prof: ConformanceProfile, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("HOSTD_HOME", str(home))
    before = make_spec().description
    assert "test (" in before and "missing (hostd-no-such-agent-command: not found)" in before
    assert "last seen" not in before
    with trio.fail_after(TIMEOUT):
        async with serving(prof, tmp_path) as sup:
            session = await sup.open("t", prof.options())
            await turn(session, "t1", "hello")
    after = make_spec().description
    assert ": found, last seen as acp-test-agent 1.2.3)" in after
    seen = home / "data" / "acp-agents-seen.json"
    assert seen.stat().st_mode & 0o777 == 0o600


async def test_a_stop_while_the_agent_starts_leaves_no_agent_behind(
    prof: ConformanceProfile, tmp_path: Path
) -> None:
    work = tmp_path / "work" / "t"
    with trio.fail_after(TIMEOUT):
        async with serving(prof, tmp_path) as sup:
            session = await sup.open("t", prof.options(agent="slow"))
            await session.send(Send(turn_id="t1", text="hello"))
            # The agent answers initialize only after 2 s: once it runs, stop the turn.
            assert await eventually(lambda: set(processes_in(work)) - {session.pid}, TIMEOUT)
            await session.interrupt("t1", 5.0)
            stopped = TurnResult()
            async for batch in session.events:
                assert isinstance(batch, list), batch
                stopped.events += batch
                if any(type(e).__name__ == "TurnEnd" for e in batch):
                    break
            assert set(processes_in(work)) - {session.pid} == set()
            after = await turn(session, "t2", "hello")
    ends = [e for e in stopped.events if type(e).__name__ == "TurnEnd"]
    assert [e.status for e in ends] == ["stopped"]
    assert not chunks(stopped)
    assert after.text == "Hello from the test agent."


@pytest.mark.parametrize(
    ("model", "answer", "notice"),
    [("", "fast", None), ("Smart", "smart", None), ("huge", "fast", "model_unavailable")],
)
async def test_the_topic_model_is_selected_when_the_agent_offers_it(
    prof: ConformanceProfile, tmp_path: Path, model: str, answer: str, notice: str | None
) -> None:
    opts = dataclasses.replace(prof.options(), model=model)
    with trio.fail_after(TIMEOUT):
        async with serving(prof, tmp_path) as sup:
            session = await sup.open("t", opts)
            result = await turn(session, "t1", "model")
            token = session.resume_token
            await sup.close("t")
            resumed = await sup.open("t", opts, resume_token=token)
            again = await turn(resumed, "t2", "model")
    assert result.text == f"model: {answer}"
    assert again.text == f"model: {answer}"  # set again on the resumed session
    codes = [e.code for e in result.events if isinstance(e, Notice)]
    assert codes == ([notice] if notice else [])


@pytest.mark.parametrize(
    ("mode", "answer", "notice"),
    [("", "auto", None), ("Ask", "ask", None), ("plan", "auto", "mode_unavailable")],
)
async def test_the_mode_option_selects_the_session_mode(
    prof: ConformanceProfile, tmp_path: Path, mode: str, answer: str, notice: str | None
) -> None:
    # claude-agent-acp 0.101 starts in its `auto` permission mode; `mode=default` is how a
    # topic asks it to route every tool through hostd's approvals.
    opts = prof.options(mode=mode) if mode else prof.options()
    with trio.fail_after(TIMEOUT):
        async with serving(prof, tmp_path) as sup:
            session = await sup.open("t", opts)
            result = await turn(session, "t1", "mode")
            token = session.resume_token
            await sup.close("t")
            resumed = await sup.open("t", opts, resume_token=token)
            again = await turn(resumed, "t2", "mode")
    assert result.text == f"mode: {answer}"
    assert again.text == f"mode: {answer}"  # selected again on the resumed session
    codes = [e.code for e in result.events if isinstance(e, Notice)]
    assert codes == ([notice] if notice else [])
    if notice:
        message = next(e.message for e in result.events if isinstance(e, Notice))
        assert message == (
            "ACP agent 'test' has no session mode 'plan' (it offers: ask, auto); using auto"
        )
