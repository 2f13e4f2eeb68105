"""The Claude Code driver end to end: real driver process, real SDK, real bundled CLI, and
the fake Messages API on 127.0.0.1 (no internet).

Cost control (the CLI costs ~2.4 s per cold process on 2 cores): one fake API server and one
shared driver process serve most tests of this module (each test sends its own turns with its
own prompts); only the tests that are about new processes (resume, bad options) start more.
"""

from __future__ import annotations

import os
import signal
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from hostd_protocol.common import TextDelta, ThinkingDelta, ToolCall, ToolResult
from hostd_protocol.driver_messages import (
    ApiRetry,
    ApprovalRequest,
    Checkpoint,
    ChunkEvent,
    CompactionComplete,
    CompactionStart,
    DriverFatal,
    Interrupt,
    Notice,
    Prewarm,
    Redirect,
    ResumeToken,
    SteerBoundary,
    SteerInjected,
    SteerUndelivered,
    TurnEnd,
    UsageEvent,
    Warmed,
)
from tests.claude.driver_peer import (
    DriverProcess,
    init_for,
    kinds,
    offline_env,
    text_of,
)
from tests.fakes.anthropic_api import (
    FakeAnthropicAPI,
    Hang,
    RecordedRequest,
    Rule,
    hang,
    has_tool_result,
    overloaded,
    text,
    thinking,
    tool_use,
    user_says,
    user_text_contains,
)

pytestmark = pytest.mark.claude

TURN_TIMEOUT = 30


def _follow_up(prompt: str) -> Any:
    """A request that continues the turn started by `prompt` after a tool ran."""

    def pred(req: RecordedRequest) -> bool:
        return req.last_user_has_tool_result and (req.last_user_text or "").strip() == prompt

    return pred


RULES = [
    Rule(user_says("hello"), text("Hi there!")),
    Rule(user_says("run echo"), tool_use("Bash", {"command": "echo hi"})),
    Rule(_follow_up("run echo"), text("Echoed.")),
    Rule(user_says("busy"), overloaded()),
    Rule(user_says("think first"), thinking("Let me think.", "Thought about it.")),
    Rule(user_says("big"), text("Big answer.", input_tokens=90_000)),
    Rule(has_tool_result, text("Done.")),
]


@pytest.fixture(scope="module")
def api() -> Iterator[FakeAnthropicAPI]:
    with FakeAnthropicAPI(RULES) as server:
        yield server


@pytest.fixture(scope="module")
def workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="hostd-cc-") as d:
        yield Path(d)


@pytest.fixture(scope="module")
def shared(api: FakeAnthropicAPI, workdir: Path) -> Iterator[DriverProcess]:
    env = offline_env(api.base_url, CLAUDE_CODE_AUTO_COMPACT_WINDOW="100000")
    proc = DriverProcess(env)
    proc.initialised = False  # type: ignore[attr-defined]
    yield proc
    code = proc.close()
    stderr = proc.stderr_text()
    proc.cleanup()
    assert code == 0, stderr[-3000:]


@asynccontextmanager
async def attached(proc: DriverProcess, workdir: Path) -> Any:
    """Attach to the shared driver; the first test to attach does the handshake + prewarm."""
    async with proc.attach() as peer:
        if not getattr(proc, "initialised", False):
            ready = await peer.handshake(init_for(workdir / "topic"))
            caps = ready.capabilities
            assert (caps.inject_steering, caps.compaction, caps.resume) == (True, True, True)
            assert (caps.approvals, caps.warm) == (True, True)
            await peer.send(Prewarm())
            assert isinstance(await peer.recv(), Warmed)
            proc.initialised = True  # type: ignore[attr-defined]
        yield peer


def chunks(events: list[Any]) -> list[Any]:
    return [e.chunk for e in events if isinstance(e, ChunkEvent)]


def end_of(events: list[Any]) -> TurnEnd:
    end = events[-1]
    assert isinstance(end, TurnEnd), events
    return end


def cli_children(pid: int) -> list[int]:
    """The driver's running claude CLI processes among its direct children. (A driver is a
    subreaper: what an earlier CLI left behind is re-parented to it, so not every direct
    child is a CLI.)"""
    out: list[int] = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/children") as f:
            for child in (int(x) for x in f.read().split()):
                try:
                    argv0 = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")[0]
                except OSError:
                    continue
                if argv0.rsplit(b"/", 1)[-1] == b"claude":
                    out.append(child)
    return out


async def wait_started(h: Hang) -> None:
    assert await trio.to_thread.run_sync(h.wait_started, TURN_TIMEOUT)


# --- basic turns --------------------------------------------------------------------------------


async def test_text_turn(shared: DriverProcess, workdir: Path) -> None:
    with trio.fail_after(TURN_TIMEOUT):
        async with attached(shared, workdir) as peer:
            events = await peer.turn("text-1", "hello")
    assert text_of(events) == "Hi there!"
    assert end_of(events).status == "success"
    usage = [e for e in events if isinstance(e, UsageEvent)]
    assert len(usage) == 1 and usage[0].usage.input_tokens == 1000
    assert usage[0].usage.output_tokens > 0 and usage[0].usage.cost_usd > 0
    # Every chunk comes before the usage and the end; the turn's checkpoint just before it:
    # the session id and the uuid of the turn's last assistant message.
    assert kinds(events)[-3:] == ["usage", "checkpoint", "turn-end"]
    (checkpoint,) = [e for e in events if isinstance(e, Checkpoint)]
    session, _, message = checkpoint.token.partition("@")
    assert checkpoint.turn_id == "text-1" and uuid.UUID(session) and uuid.UUID(message)


async def test_thinking_turn(shared: DriverProcess, workdir: Path) -> None:
    with trio.fail_after(TURN_TIMEOUT):
        async with attached(shared, workdir) as peer:
            events = await peer.turn("think-1", "think first")
    got = chunks(events)
    thoughts = [c.text for c in got if isinstance(c, ThinkingDelta)]
    assert "".join(thoughts) == "Let me think."
    # Thinking first, then the answer.
    assert isinstance(got[0], ThinkingDelta) and isinstance(got[-1], TextDelta)
    assert text_of(events) == "Thought about it."
    assert end_of(events).status == "success"


async def test_tool_turn(shared: DriverProcess, workdir: Path) -> None:
    with trio.fail_after(TURN_TIMEOUT):
        async with attached(shared, workdir) as peer:
            events = await peer.turn("tool-1", "run echo")
    got = chunks(events)
    call, result = got[0], got[1]
    assert isinstance(call, ToolCall) and call.name == "Bash"
    assert call.input == {"command": "echo hi"}
    assert result == ToolResult(call_id=call.call_id, output="hi", is_error=False)
    assert text_of(events) == "Echoed."
    assert end_of(events).status == "success"


async def test_per_send_model_override(
    shared: DriverProcess, workdir: Path, api: FakeAnthropicAPI
) -> None:
    with trio.fail_after(TURN_TIMEOUT):
        async with attached(shared, workdir) as peer:
            first = await peer.turn("model-1", "hello", options={"model": "claude-sonnet-4-5"})
            overridden = api.message_requests[-1].model
            second = await peer.turn("model-2", "hello")
            default = api.message_requests[-1].model
            bad = await peer.turn("model-3", "hello", options={"permission_mode": "yolo"})
    assert end_of(first).status == end_of(second).status == "success"
    assert overridden == "claude-sonnet-4-5" and default != overridden
    assert end_of(bad) == TurnEnd(
        turn_id="model-3",
        status="error",
        error="invalid claude-code send option: permission_mode='yolo'",
        error_code="invalid_argument",
    )


# --- steering -----------------------------------------------------------------------------------


async def test_steer_during_tool_reaches_the_next_request(
    shared: DriverProcess, workdir: Path, api: FakeAnthropicAPI
) -> None:
    # The tool needs approval, so the test knows the tool call is in progress when it steers.
    api.add_rule(
        user_says("steer me"),
        tool_use("Bash", {"command": "touch steered.txt"}),
        times=1,
        first=True,
    )

    async with attached(shared, workdir) as peer:

        async def on_event(event: Any) -> None:
            if isinstance(event, ApprovalRequest):
                await peer.send(Redirect(turn_id="steer-1", steer_id="s-1", text="say banana too"))
                await peer.answer(event, allow=True)

        with trio.fail_after(TURN_TIMEOUT):
            events = await peer.turn("steer-1", "steer me", on_event=on_event)

    assert end_of(events).status == "success"
    order = kinds(events)
    injected = order.index("steer-injected")
    boundary = order.index("steer-boundary")
    tool_result = next(
        i for i, e in enumerate(events) if isinstance(getattr(e, "chunk", None), ToolResult)
    )
    first_text = next(
        i for i, e in enumerate(events) if isinstance(getattr(e, "chunk", None), TextDelta)
    )
    assert injected < boundary and tool_result < boundary < first_text
    assert events[injected] == SteerInjected(turn_id="steer-1", steer_id="s-1")
    assert events[boundary] == SteerBoundary(turn_id="steer-1", steer_ids=["s-1"])
    assert not any(isinstance(e, SteerUndelivered) for e in events)
    # The model got the steer right after the tool result, in the follow-up request.
    follow_up = [r for r in api.message_requests if r.last_user_text == "steer me"][-1]
    assert follow_up.last_user_has_tool_result
    reminders = follow_up.system_reminders_after_tool_result
    assert any("say banana too" in r for r in reminders), reminders


async def test_steer_without_later_tool_use_is_undelivered(
    shared: DriverProcess, workdir: Path, api: FakeAnthropicAPI
) -> None:
    h = hang("Thinking about it")
    api.add_rule(user_says("no tools"), h, times=1, first=True)
    sent = False

    async with attached(shared, workdir) as peer:

        async def on_event(event: Any) -> None:
            nonlocal sent
            if isinstance(event, ChunkEvent) and not sent:
                sent = True
                await peer.send(Redirect(turn_id="undeliv-1", steer_id="s-2", text="late"))
                h.release()

        with trio.fail_after(TURN_TIMEOUT):
            events = await peer.turn("undeliv-1", "no tools", on_event=on_event)

    assert events[-2:] == [
        SteerUndelivered(turn_id="undeliv-1", steer_ids=["s-2"]),
        TurnEnd(turn_id="undeliv-1", status="success"),
    ]
    assert not any(isinstance(e, (SteerInjected, SteerBoundary)) for e in events)
    assert text_of(events) == "Thinking about it done."


# --- interrupt ----------------------------------------------------------------------------------


async def test_interrupt_mid_stream_then_next_send_works(
    shared: DriverProcess, workdir: Path, api: FakeAnthropicAPI
) -> None:
    h = hang("Partial answer")
    api.add_rule(user_says("long answer"), h, times=1, first=True)

    async with attached(shared, workdir) as peer:

        async def on_event(event: Any) -> None:
            if isinstance(event, ChunkEvent):
                await peer.send(Interrupt(turn_id="int-1"))

        # The answer hangs after its first delta: only the interrupt ends the turn.
        with trio.fail_after(TURN_TIMEOUT):
            events = await peer.turn("int-1", "long answer", on_event=on_event)
            after = await peer.turn("int-2", "hello")

    assert end_of(events) == TurnEnd(turn_id="int-1", status="stopped")
    assert text_of(events) == "Partial answer"
    assert end_of(after).status == "success" and text_of(after) == "Hi there!"
    last = api.message_requests[-1]
    assert "[Request interrupted by user]" in "".join(last.user_texts)


async def test_interrupt_during_a_running_tool(
    shared: DriverProcess, workdir: Path, api: FakeAnthropicAPI
) -> None:
    # The tool writes to a FIFO before sleeping: reading it tells the test the tool runs.
    fifo = workdir / "tool-started.fifo"
    os.mkfifo(fifo)
    command = f"echo started > {fifo} && sleep 60 && echo finished"
    api.add_rule(
        user_says("slow tool"), tool_use("Bash", {"command": command}), times=1, first=True
    )

    def read_fifo() -> str:
        with open(fifo) as f:
            return f.read()

    async with attached(shared, workdir) as peer:

        async def on_event(event: Any) -> None:
            if isinstance(event, ApprovalRequest):
                await peer.answer(event, allow=True)
                assert (await trio.to_thread.run_sync(read_fifo)).strip() == "started"
                await peer.send(Interrupt(turn_id="int-tool-1"))

        with trio.fail_after(TURN_TIMEOUT):
            events = await peer.turn("int-tool-1", "slow tool", on_event=on_event)
            after = await peer.turn("int-tool-2", "hello")

    assert end_of(events) == TurnEnd(turn_id="int-tool-1", status="stopped")
    call = chunks(events)[0]
    assert isinstance(call, ToolCall) and call.input == {"command": command}
    assert end_of(after).status == "success" and text_of(after) == "Hi there!"
    # No orphaned tool call: the next request's history pairs every tool_use with a result.
    last = api.message_requests[-1]
    uses = {
        b["id"]
        for m in last.messages
        if m["role"] == "assistant" and isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_use"
    }
    results = {
        b["tool_use_id"]
        for m in last.messages
        if m["role"] == "user" and isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_result"
    }
    assert uses <= results


async def test_interrupt_while_an_approval_is_open(
    shared: DriverProcess, workdir: Path, api: FakeAnthropicAPI
) -> None:
    api.add_rule(
        user_says("ask then stop"),
        tool_use("Bash", {"command": "touch never.txt"}),
        times=1,
        first=True,
    )

    async with attached(shared, workdir) as peer:

        async def on_event(event: Any) -> None:
            if isinstance(event, ApprovalRequest):
                await peer.send(Interrupt(turn_id="int-appr-1"))

        with trio.fail_after(TURN_TIMEOUT):
            events = await peer.turn("int-appr-1", "ask then stop", on_event=on_event)
            after = await peer.turn("int-appr-2", "hello")

    assert end_of(events) == TurnEnd(turn_id="int-appr-1", status="stopped")
    assert not (workdir / "topic" / "never.txt").exists()
    assert end_of(after).status == "success" and text_of(after) == "Hi there!"


# --- approvals ----------------------------------------------------------------------------------


async def test_approval_allow_and_deny(
    shared: DriverProcess, workdir: Path, api: FakeAnthropicAPI
) -> None:
    topic = workdir / "topic"
    api.add_rule(
        user_says("make allowed"),
        tool_use("Bash", {"command": "touch allowed.txt"}),
        times=1,
        first=True,
    )
    api.add_rule(
        user_says("make denied"),
        tool_use("Bash", {"command": "touch denied.txt"}),
        times=1,
        first=True,
    )
    requests: list[ApprovalRequest] = []

    async with attached(shared, workdir) as peer:

        def answering(allow: bool) -> Any:
            async def on_event(event: Any) -> None:
                if isinstance(event, ApprovalRequest):
                    requests.append(event)
                    await peer.answer(event, allow=allow, reason="" if allow else "not today")

            return on_event

        with trio.fail_after(TURN_TIMEOUT):
            allowed = await peer.turn("appr-1", "make allowed", on_event=answering(True))
            denied = await peer.turn("appr-2", "make denied", on_event=answering(False))

    assert [r.tool for r in requests] == ["Bash", "Bash"]
    assert requests[0].input == {"command": "touch allowed.txt"}
    assert requests[0].approval_id != requests[1].approval_id
    assert end_of(allowed).status == "success" and (topic / "allowed.txt").exists()
    allowed_result = [c for c in chunks(allowed) if isinstance(c, ToolResult)]
    assert [r.is_error for r in allowed_result] == [False]
    assert end_of(denied).status == "success" and not (topic / "denied.txt").exists()
    denied_result = [c for c in chunks(denied) if isinstance(c, ToolResult)]
    assert [r.is_error for r in denied_result] == [True]
    assert "not today" in denied_result[0].output


# --- compaction ---------------------------------------------------------------------------------


async def test_manual_compaction(
    shared: DriverProcess, workdir: Path, api: FakeAnthropicAPI
) -> None:
    with trio.fail_after(TURN_TIMEOUT):
        async with attached(shared, workdir) as peer:
            events = await peer.turn("compact-1", "/compact")
    assert kinds(events) == ["compaction-start", "compaction-complete", "usage", "turn-end"]
    assert events[0] == CompactionStart(turn_id="compact-1", trigger="manual")
    anchor = events[1].anchor
    assert anchor is not None and anchor.trigger == "manual"
    assert anchor.tokens_before > 0 and anchor.tokens_after > 0
    assert "The user and the assistant had a short conversation." in anchor.summary
    assert end_of(events).status == "success"
    assert api.message_requests[-1].is_summary_request


async def test_automatic_compaction(shared: DriverProcess, workdir: Path) -> None:
    with trio.fail_after(TURN_TIMEOUT):
        async with attached(shared, workdir) as peer:
            # Some history first: the CLI does not compact a conversation of one exchange.
            for i in range(2):
                assert end_of(await peer.turn(f"auto-pre-{i}", "hello")).status == "success"
            big = await peer.turn("auto-big", "big")  # reports 90k input tokens
            events = await peer.turn("auto-1", "hello")
    assert end_of(big).status == "success"
    order = kinds(events)
    assert order[:2] == ["compaction-start", "compaction-complete"], order
    assert events[0] == CompactionStart(turn_id="auto-1", trigger="auto")
    complete = events[1]
    assert isinstance(complete, CompactionComplete) and complete.anchor is not None
    assert complete.anchor.trigger == "auto" and complete.anchor.tokens_before >= 90_000
    # The summary never shows up as answer text: only the real answer does.
    assert text_of(events) == "Hi there!"
    assert end_of(events).status == "success"


# --- errors -------------------------------------------------------------------------------------


async def test_overloaded_api_is_retried_then_fails_with_cause(
    shared: DriverProcess, workdir: Path
) -> None:
    with trio.fail_after(TURN_TIMEOUT):
        async with attached(shared, workdir) as peer:
            events = await peer.turn("busy-1", "busy")
            after = await peer.turn("busy-2", "hello")
    retries = [e for e in events if isinstance(e, ApiRetry)]
    assert [(r.attempt, r.max_retries, r.error_status) for r in retries] == [
        (1, 2, 529),
        (2, 2, 529),
    ]
    assert all(r.turn_id == "busy-1" and r.retry_delay_ms > 0 for r in retries)
    end = end_of(events)
    assert end.status == "error" and end.error_code == "driver_turn_error"
    assert "529" in end.error and "Overloaded" in end.error
    assert end_of(after).status == "success"


async def test_cli_killed_mid_turn_fails_with_cause_and_next_send_resumes(
    shared: DriverProcess, workdir: Path, api: FakeAnthropicAPI
) -> None:
    h = hang("Before the crash")
    api.add_rule(user_says("crash now"), h, times=1, first=True)
    killed: list[int] = []

    async with attached(shared, workdir) as peer:

        async def on_event(event: Any) -> None:
            if isinstance(event, ChunkEvent) and not killed:
                for pid in cli_children(shared.pid):
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)

        with trio.fail_after(TURN_TIMEOUT):
            before = await peer.turn("crash-0", "remember kiwi")
            events = await peer.turn("crash-1", "crash now", on_event=on_event)
            after = await peer.turn("crash-2", "hello")

    assert len(killed) == 1
    end = end_of(events)
    assert end.status == "error" and end.error_code == "driver_turn_error"
    assert end.error.startswith("the Claude CLI was killed by signal 9 during the turn")
    assert "(exit code -9)" in end.error
    assert text_of(events) == "Before the crash"
    # A new CLI resumed the session: the earlier turns are in the next request.
    assert end_of(after).status == "success"
    assert cli_children(shared.pid) and cli_children(shared.pid) != killed
    # (The killed turn's own prompt may be lost: the CLI had not written it yet.)
    assert end_of(before).status == "success"
    texts = [t.strip() for t in api.message_requests[-1].user_texts]
    assert "remember kiwi" in texts, texts


# --- new processes: resume, bad options ---------------------------------------------------------


async def test_resume_in_a_new_process(api: FakeAnthropicAPI, workdir: Path) -> None:
    topic = workdir / "resume-topic"
    api.add_rule(user_says("remember apple"), text("Noted: apple."), times=1, first=True)
    api.add_rule(user_text_contains("what did I say"), text("You said apple."), times=2, first=True)
    env = offline_env(api.base_url)

    async def one_turn(init_token: str | None, turn_id: str, prompt: str) -> list[Any]:
        proc = DriverProcess(env)
        try:
            async with proc.attach() as peer:
                init = init_for(topic)
                if init_token is not None:
                    init = type(init)(
                        protocol_version=init.protocol_version,
                        working_dir=init.working_dir,
                        resume_token=init_token,
                    )
                await peer.handshake(init)
                return await peer.turn(turn_id, prompt)
        finally:
            assert proc.close() == 0, proc.stderr_text()[-3000:]
            proc.cleanup()

    with trio.fail_after(2 * TURN_TIMEOUT):
        # A stored token whose transcript is gone: a fresh session, said visibly.
        first = await one_turn("00000000-0000-4000-8000-000000000000", "res-1", "remember apple")
        notices = [e for e in first if isinstance(e, Notice)]
        assert [n.code for n in notices] == ["resume_failed"]
        assert notices[0].turn_id == "res-1" and "00000000-0000-4000-8000" in notices[0].message
        tokens = [e.token for e in first if isinstance(e, ResumeToken)]
        assert len(tokens) == 1 and tokens[0] != "00000000-0000-4000-8000-000000000000"
        assert end_of(first).status == "success"
        # A new process with the token continues the conversation: history is re-sent.
        second = await one_turn(tokens[0], "res-2", "what did I say")
    assert end_of(second).status == "success" and text_of(second) == "You said apple."
    assert not any(isinstance(e, Notice) for e in second)
    assert [e.token for e in second if isinstance(e, ResumeToken)] == tokens
    last = api.message_requests[-1]
    assert "remember apple" in last.user_texts
    assert any(
        m["role"] == "assistant" and "Noted: apple." in str(m["content"]) for m in last.messages
    )
    # Everything the CLI wrote stayed in the topic's folder.
    assert (topic / ".hostd-claude" / ".claude" / "projects").is_dir()


async def test_invalid_option_is_a_clear_fatal_error(api: FakeAnthropicAPI, workdir: Path) -> None:
    proc = DriverProcess(offline_env(api.base_url))
    try:
        with trio.fail_after(TURN_TIMEOUT):
            async with proc.attach() as peer:
                await peer.send(init_for(workdir / "bad", permission_mode="yolo"))
                fatal = await peer.recv()
    finally:
        code = proc.close()
        proc.cleanup()
    assert isinstance(fatal, DriverFatal) and fatal.code == "invalid_argument"
    assert fatal.message == (
        "invalid claude-code option: Invalid enum value 'yolo' - at `$.permission_mode`"
    )
    assert code == 2


async def test_bench_helper_measures_cold_and_warm(api: FakeAnthropicAPI) -> None:
    from tests.claude.bench import HANG_PROMPT, PROMPT, measure_async

    api.add_rule(user_says(PROMPT), text("Hello from the fake."), first=True)
    api.add_rule(user_says(HANG_PROMPT), hang("Partial answer"), first=True)
    with trio.fail_after(2 * TURN_TIMEOUT):
        bench = await measure_async(runs=1, base_url=api.base_url)
    # Figures measured; which is faster is the bench's to say (`scripts/bench claude`).
    assert bench.warm_ttft_s > 0 and bench.cold_ttft_s > 0
    assert bench.driver_rss_mib > 0 and bench.cli_rss_mib > 0
    assert bench.interrupt_s > 0  # the interrupted turn ended `stopped` (the helper checks)
    assert bench.summary().startswith("claude-code driver, median of 1: time to first token cold ")


async def test_cli_that_cannot_start_reports_exit_code_and_stderr(
    api: FakeAnthropicAPI, workdir: Path
) -> None:
    # As root the CLI refuses bypassPermissions unless IS_SANDBOX is set; unset it on purpose.
    if os.geteuid() != 0:
        pytest.skip("the CLI refuses bypassPermissions only as root")
    proc = DriverProcess(offline_env(api.base_url))
    try:
        with trio.fail_after(TURN_TIMEOUT):
            async with proc.attach() as peer:
                ready = await peer.handshake(
                    init_for(
                        workdir / "no-start",
                        permission_mode="bypassPermissions",
                        env={"IS_SANDBOX": ""},
                    )
                )
                events = await peer.turn("fail-1", "hello")
    finally:
        assert proc.close() == 0
        proc.cleanup()
    assert ready.capabilities.approvals is False
    end = end_of(events)
    assert end.status == "error" and end.error_code == "driver_turn_error"
    assert end.error == (
        "the Claude CLI failed to start (exit code 1)\n--- driver stderr (tail) ---\n"
        "--dangerously-skip-permissions cannot be used with root/sudo privileges for "
        "security reasons"
    )


async def test_cli_killed_in_the_first_turn_of_a_new_session(
    api: FakeAnthropicAPI, workdir: Path
) -> None:
    # The CLI dies in the first turn: the next turn resumes the session if the CLI wrote its
    # transcript in time, else starts a new one; either way quietly (nothing the user saw
    # was lost), and a new session reports its new token.
    api.add_rule(user_says("die early"), hang("x"), times=1, first=True)
    proc = DriverProcess(offline_env(api.base_url))
    killed: list[int] = []
    try:
        async with proc.attach() as peer:
            await peer.handshake(init_for(workdir / "first-crash"))

            async def on_event(event: Any) -> None:
                if isinstance(event, ChunkEvent) and not killed:
                    for pid in cli_children(proc.pid):
                        os.kill(pid, signal.SIGKILL)
                        killed.append(pid)

            with trio.fail_after(2 * TURN_TIMEOUT):
                first = await peer.turn("early-1", "die early", on_event=on_event)
                second = await peer.turn("early-2", "hello")
    finally:
        assert proc.close() == 0
        proc.cleanup()
    assert end_of(first).status == "error"
    assert end_of(second).status == "success" and text_of(second) == "Hi there!"
    assert not any(isinstance(e, Notice) for e in second)
    tokens = [e.token for e in first + second if isinstance(e, ResumeToken)]
    assert len(tokens) in (1, 2) and len(set(tokens)) == len(tokens), tokens
