"""Tools from real MCP servers (tests/fakes/mcp_test_server.py and `mcp-server-time` from PyPI,
both stdio subprocesses): retries, final failures, parallel calls, approvals, steering during a
tool, stop during a slow tool, dead and slow servers."""

from __future__ import annotations

import socket
import subprocess
import sys
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio

from hostd_protocol.driver_messages import (
    ApprovalRequest,
    ChunkEvent,
    Interrupt,
    Notice,
    Redirect,
    SteerBoundary,
    SteerInjected,
)
from tests.fakes.openai_api import FakeOpenAI, Rule, Text, ToolCalls, after_tools, user_says
from tests.openai.peer import (
    REPO,
    driver,
    end_of,
    text_of,
    time_server,
    tool_calls,
    tool_results,
    tools_server,
)
from tests.polling import eventually

TIMEOUT = 40


async def test_retries_final_failures_parallel_calls_and_clipping(tmp_path: Path) -> None:
    rules = [
        Rule(user_says("flaky"), ToolCalls([("t__flaky", {"key": "k1", "failures": 2})])),
        Rule(user_says("broken"), ToolCalls([("t__broken", {"path": "/etc/x"})])),
        Rule(
            user_says("parallel"),
            ToolCalls(
                [
                    ("t__echo", {"text": "a"}),
                    ("time__get_current_time", {"timezone": "UTC"}),
                    ("t__echo", {"text": "b"}),
                ]
            ),
        ),
        Rule(user_says("huge"), ToolCalls([("t__huge", {"size": 5000})])),
        Rule(user_says("bad args"), ToolCalls([("t__echo", "{not json")])),
        Rule(lambda r: r.last_role == "tool", Text("ok")),
    ]
    servers = {"t": tools_server(tmp_path / "state"), "time": time_server()}
    with FakeOpenAI(rules) as api, trio.fail_after(TIMEOUT):
        async with driver(
            api.base_url,
            mcp_servers=servers,
            allowed_tools=["*"],
            tool_retry_delay=0.01,
            max_tool_result_chars=1000,
        ) as (peer, _):
            flaky = await peer.turn("t1", "flaky")
            broken = await peer.turn("t2", "broken")
            parallel = await peer.turn("t3", "parallel")
            huge = await peer.turn("t4", "huge")
            bad = await peer.turn("t5", "bad args")

    # Flaky: the server died twice mid-call.
    assert end_of(flaky).status == "success"
    # Flaky: the call the model made stays one call (no invented ids) with its attempts;
    # each failed attempt is a notice.
    (call,) = tool_calls(flaky)
    first = call.call_id
    (result,) = tool_results(flaky)
    assert (result.call_id, result.is_error, result.attempts) == (first, False, 3)
    assert result.output == "ok k1 after 2 failures"
    retries = [e.message for e in flaky if isinstance(e, Notice) and e.code == "tool_retry"]
    assert len(retries) == 2
    assert retries[0].startswith(f"Tool call t__flaky ({first}): attempt 1 of 4 failed: MCP")
    seen = [r for r in api.chat_requests if r.first_user_text == "flaky"][-1]
    assert seen.messages[-1] == {
        "role": "tool",
        "tool_call_id": first,
        "content": "ok k1 after 2 failures",
    }

    # Broken: a tool-level failure is final and handed to the model.
    (result,) = tool_results(broken)
    assert result.is_error and "permission denied: /etc/x" in result.output
    seen = [r for r in api.chat_requests if r.first_user_text == "broken"][-1]
    assert "permission denied: /etc/x" in seen.tool_results[0]

    # Parallel: three calls in one response, results sent back together, in order.
    assert end_of(parallel).status == "success"
    seen = [r for r in api.chat_requests if r.first_user_text == "parallel"][-1]
    assert len(seen.tool_results) == 3
    assert seen.tool_results[0] == "a" and seen.tool_results[2] == "b"
    assert '"timezone": "UTC"' in seen.tool_results[1]
    assert seen.tool_names == sorted(seen.tool_names, key=seen.tool_names.index)
    assert {"t__echo", "t__flaky", "time__get_current_time"} <= set(seen.tool_names)

    # Huge: clipped, with a note the model can read.
    (result,) = tool_results(huge)
    assert result.output.startswith("0123456789") and len(result.output) < 1100
    assert "tool result cut: 4000 more characters" in result.output

    # Bad arguments: final, no call made.
    (result,) = tool_results(bad)
    assert result.is_error and "not valid JSON" in result.output


async def test_approval_from_the_host_and_a_steer_during_the_tool(tmp_path: Path) -> None:
    rules = [
        Rule(user_says("echo"), ToolCalls([("t__echo", {"text": "hi"})])),
        Rule(user_says("also say banana"), Text("Echoed, and banana.")),
        Rule(user_says("deny"), ToolCalls([("t__echo", {"text": "no"})])),
        Rule(after_tools("deny"), Text("Understood.")),
    ]
    with FakeOpenAI(rules) as api, trio.fail_after(TIMEOUT):
        async with driver(api.base_url, mcp_servers={"t": tools_server(tmp_path / "state")}) as (
            peer,
            _,
        ):

            async def steer_then_allow(event: Any) -> None:
                if isinstance(event, ApprovalRequest):
                    await peer.send(Redirect(turn_id="t1", steer_id="s1", text="also say banana"))
                    await peer.answer(event, allow=True)

            steered = await peer.turn("t1", "echo", on_event=steer_then_allow)

            async def deny(event: Any) -> None:
                if isinstance(event, ApprovalRequest):
                    await peer.answer(event, allow=False, reason="not now")

            denied = await peer.turn("t2", "deny", on_event=deny)

    assert end_of(steered).status == "success"
    (request,) = [e for e in steered if isinstance(e, ApprovalRequest)]
    assert (request.tool, request.input) == ("t__echo", {"text": "hi"})
    order = [
        "result" if isinstance(e, ChunkEvent) and tool_results([e]) else type(e).__name__
        for e in steered
        if isinstance(e, SteerInjected | SteerBoundary) or tool_results([e])
    ]
    assert order == ["result", "SteerInjected", "SteerBoundary"]
    boundary = next(i for i, e in enumerate(steered) if isinstance(e, SteerBoundary))
    assert text_of(steered[:boundary]) == ""
    assert text_of(steered[boundary:]) == "Echoed, and banana."
    after = [r for r in api.chat_requests if r.first_user_text == "echo"][-1]
    assert after.count_text("also say banana") == 1
    assert [m["role"] for m in after.messages] == ["user", "assistant", "tool", "user"]
    assert after.tool_results == ["hi"]

    assert end_of(denied).status == "success"
    (result,) = tool_results(denied)
    assert result.is_error and result.output == "Error: denied: not now."
    seen = [r for r in api.chat_requests if r.first_user_text == "deny"][-1]
    assert seen.tool_results == ["Error: denied: not now."]


async def test_stop_during_a_slow_tool_then_timeouts_are_retried(tmp_path: Path) -> None:
    rules = [
        Rule(user_says("slow"), ToolCalls([("t__slow", {"seconds": 60})])),
        Rule(user_says("echo"), ToolCalls([("t__echo", {"text": "still here"})])),
        Rule(user_says("timeout"), ToolCalls([("s__slow", {"seconds": 5})])),
        Rule(lambda r: r.last_role == "tool", Text("ok")),
    ]
    with FakeOpenAI(rules) as api, trio.fail_after(TIMEOUT):
        async with driver(
            api.base_url,
            # "s" is the same server with a short per-server timeout; "t" keeps the default,
            # so the echo call is never at the mercy of a loaded machine.
            mcp_servers={
                "t": tools_server(tmp_path / "state"),
                "s": tools_server(tmp_path / "state", tool_timeout=0.5),
            },
            allowed_tools=["t__*", "s__*"],
            tool_retries=1,
            tool_retry_delay=0.01,
        ) as (peer, _):

            async def stop_at_the_call(event: Any) -> None:
                if tool_calls([event]):
                    await peer.send(Interrupt(turn_id="t1"))

            stopped = await peer.turn("t1", "slow", on_event=stop_at_the_call)
            echo = await peer.turn("t2", "echo")
            timeout = await peer.turn("t3", "timeout")

    assert end_of(stopped).status == "stopped"
    assert tool_results(stopped) == []
    assert end_of(echo).status == "success"
    assert [r.output for r in tool_results(echo)] == ["still here"]
    # The request after the stop carries no trace of the stopped turn's tool call.
    seen = [r for r in api.chat_requests if r.first_user_text == "echo"][-1]
    assert "t__slow" not in str(seen.messages)
    (result,) = tool_results(timeout)
    assert (result.is_error, result.attempts) == (True, 2)
    assert result.output == "Error: the tool call timed out after 0.5 s (after 2 attempts)."


async def test_dead_and_slow_servers_leave_their_tools_out_with_a_notice(tmp_path: Path) -> None:
    servers = {
        "dead": {"command": str(tmp_path / "no-such-server")},
        "stuck": {
            "command": sys.executable,
            "args": ["-c", "import time; time.sleep(60)"],
            "connect_timeout": 0.5,
        },
        "time": time_server(),
    }
    rules = [Rule(user_says("hi"), Text("hello"))]
    with FakeOpenAI(rules) as api, trio.fail_after(TIMEOUT):
        # The wait ends once every server made its first attempt; the bound is only a backstop.
        async with driver(api.base_url, mcp_servers=servers, mcp_startup_wait=30) as (peer, _):
            first = await peer.turn("t1", "hi")
            second = await peer.turn("t2", "hi")
    for events in (first, second):
        assert end_of(events).status == "success"
        notices = {
            e.message.split("'")[1]
            for e in events
            if isinstance(e, Notice) and e.code == "mcp_server_unavailable"
        }
        assert notices == {"dead", "stuck"}
    for req in api.chat_requests:
        assert set(req.tool_names) == {"time__get_current_time", "time__convert_time"}


@pytest.mark.parametrize("vision", [True, False])
async def test_image_results_go_to_models_that_take_images(tmp_path: Path, vision: bool) -> None:
    rules = [
        Rule(user_says("look"), ToolCalls([("t__picture", {"caption": "a red dot"})])),
        Rule(lambda r: r.last_user_text != "look" or r.last_role == "tool", Text("I see it.")),
    ]
    with FakeOpenAI(rules) as api, trio.fail_after(TIMEOUT):
        async with driver(
            api.base_url,
            mcp_servers={"t": tools_server(tmp_path / "state")},
            allowed_tools=["t__*"],
            vision=vision,
        ) as (peer, _):
            events = await peer.turn("t1", "look")
    assert end_of(events).status == "success"
    (result,) = tool_results(events)
    assert result.output == "a red dot\n[image 1: image/png]"  # what windows and rows keep
    seen = api.chat_requests[-1]
    call_id = result.call_id
    assert seen.tool_results == ["a red dot\n[image 1: image/png]"]
    tail = seen.messages[-1]
    if vision:
        assert tail["role"] == "user"
        text, image = tail["content"]
        assert text == {"type": "text", "text": f"[image 1 of tool call {call_id}]"}
        assert image["type"] == "image_url"
        assert image["image_url"]["url"].startswith("data:image/png;base64,iVBORw0KGgo")
    else:
        assert tail["role"] == "tool" and "image_url" not in str(seen.messages)


async def test_a_server_that_becomes_ready_mid_turn_joins_at_the_next_step(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    servers = {
        "t": tools_server(tmp_path / "t"),
        "late": tools_server(
            tmp_path / "late",
            args=[
                "-m",
                "tests.fakes.mcp_test_server",
                "--state",
                str(tmp_path / "late"),
                "--wait-for",
                str(gate),
            ],
        ),
    }
    rules = [
        Rule(user_says("go"), ToolCalls([("t__echo", {"text": "first"})])),
        Rule(after_tools("go"), Text("ok")),
    ]
    with FakeOpenAI(rules) as api, trio.fail_after(TIMEOUT):
        async with driver(api.base_url, mcp_servers=servers, mcp_startup_wait=0) as (peer, _):
            assert peer.driver is not None
            catalog = peer.driver.catalog
            await catalog.servers["t"].wait_ready()

            async def late_server_gets_ready(event: Any) -> None:
                if isinstance(event, ApprovalRequest):
                    gate.touch()
                    await catalog.servers["late"].wait_ready()
                    await peer.answer(event, allow=True)

            events = await peer.turn("t1", "go", on_event=late_server_gets_ready)
    assert end_of(events).status == "success"
    (notice,) = [e for e in events if isinstance(e, Notice)]
    assert notice.code == "mcp_server_unavailable" and "'late'" in notice.message
    first, second = api.chat_requests
    assert not any(n.startswith("late__") for n in first.tool_names)
    assert {"t__echo", "late__echo"} <= set(second.tool_names)


# Upstream, not ours: the mcp SDK (mcp/client/streamable_http.py,
# StreamableHTTPTransport._handle_sse_response and handle_get_stream) leaves its `async for`
# over httpx2's `EventSource` mid-stream (on the answer to a request, or when cancelled) without
# closing the generator, and httpx2 itself nests its stream generators without closing the
# inner one: EventSource.__aiter__ -> Response.aiter_text -> Response.aiter_bytes ->
# AsyncResponseStream.__aiter__ (httpx2/_transports/default.py) -> httpcore2's stream iterator.
# Trio closes each abandoned generator when it is collected (nothing leaks) but warns. Checked:
# closing the EventSource in mcp still leaves httpx2's inner ones. The innermost name changed
# with httpcore2 2.17 (PoolByteStream.__aiter__ stopped being a generator and hands out
# HTTP11ConnectionByteStream.__aiter__); both are let through, and only this SSE chain.
@pytest.mark.filterwarnings(
    "ignore:Exception ignored in. <async_generator object "
    "(EventSource|Response|PoolByteStream|HTTP11ConnectionByteStream)[.]"
    ":pytest.PytestUnraisableExceptionWarning"
)
async def test_a_streamable_http_mcp_server(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    rules = [
        Rule(user_says("echo"), ToolCalls([("h__echo", {"text": "over http"})])),
        Rule(after_tools("echo"), Text("ok")),
    ]
    argv = [sys.executable, "-m", "tests.fakes.mcp_test_server", "--state", str(tmp_path)]
    with FakeOpenAI(rules) as api, trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as nursery:
            server = await nursery.start(
                partial(
                    trio.run_process,
                    [*argv, "--http", str(port)],
                    cwd=str(REPO),
                    stderr=subprocess.DEVNULL,
                    check=False,
                )
            )
            try:
                await _until_listening(port)
                async with driver(
                    api.base_url,
                    mcp_servers={"h": {"url": f"http://127.0.0.1:{port}/mcp"}},
                    allowed_tools=["h__*"],
                ) as (peer, _):
                    events = await peer.turn("t1", "echo")
            finally:
                server.terminate()
    assert end_of(events).status == "success"
    assert [r.output for r in tool_results(events)] == ["over http"]
    assert api.chat_requests[-1].tool_results == ["over http"]


async def _until_listening(port: int) -> None:
    """The server process is starting (uvicorn): wait until its port accepts connections."""

    async def accepts() -> bool:
        try:
            stream = await trio.open_tcp_stream("127.0.0.1", port)
        except OSError:
            return False
        await stream.aclose()
        return True

    assert await eventually(accepts, within=60, every=0.05), f"nothing listens on {port} after 60 s"


# The SSE client of the mcp SDK reads httpx2's EventSource the same way (see above).
@pytest.mark.filterwarnings(
    "ignore:Exception ignored in. <async_generator object "
    "(EventSource|Response|PoolByteStream|HTTP11ConnectionByteStream)[.]"
    ":pytest.PytestUnraisableExceptionWarning"
)
async def test_an_sse_mcp_server(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    rules = [
        Rule(user_says("echo"), ToolCalls([("old_sse__echo", {"text": "over sse"})])),
        Rule(after_tools("echo"), Text("ok")),
    ]
    argv = [sys.executable, "-m", "tests.fakes.mcp_test_server", "--state", str(tmp_path)]
    with FakeOpenAI(rules) as api, trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as nursery:
            server = await nursery.start(
                partial(
                    trio.run_process,
                    [*argv, "--sse", str(port)],
                    cwd=str(REPO),
                    stderr=subprocess.DEVNULL,
                    check=False,
                )
            )
            try:
                await _until_listening(port)
                async with driver(
                    api.base_url,
                    mcpServers={"old_sse": {"type": "sse", "url": f"http://127.0.0.1:{port}/sse"}},
                    allowed_tools=["old_sse__*"],
                ) as (peer, _):
                    events = await peer.turn("t1", "echo")
            finally:
                server.terminate()
    assert end_of(events).status == "success"
    assert [r.output for r in tool_results(events)] == ["over sse"]
    assert api.chat_requests[-1].tool_results == ["over sse"]
