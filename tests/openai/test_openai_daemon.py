"""The OpenAI driver behind the real daemon (subprocess), with two windows (hostd.client).

Real daemon process, real socket and SQLite, the driver as the daemon's subprocess, a real
MCP server as the driver's subprocess, the fake OpenAI-compatible server in this process.
Window A sends; window B answers the approval, steers, and sees everything A sees.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
import trio

from hostd.client import open_client
from hostd.shell.paths import Paths
from hostd_protocol.client_messages import ApprovalRequested, RowAppended
from hostd_protocol.common import Attachment, ToolCall, ToolResult
from tests.dirs import made_dir
from tests.e2e import daemon_proc
from tests.fakes.openai_api import FakeOpenAI, Rule, Text, ToolCalls, after_tools, user_says
from tests.openai.peer import tools_server
from tests.turns import text_of, until_turn_ended

pytestmark = pytest.mark.e2e

TIMEOUT = 60


RULES = [
    Rule(user_says("echo please"), ToolCalls([("t__echo", {"text": "echoed"})])),
    Rule(after_tools("echo please"), Text("The tool said echoed.")),
    Rule(user_says("work"), ToolCalls([("t__echo", {"text": "working"})])),
    Rule(user_says("say banana too"), Text("Done, and banana.")),
    Rule(user_says("slow"), ToolCalls([("t__slow", {"seconds": 60})])),
    Rule(user_says("hello"), Text("Hi again.")),
]


async def test_two_windows_approval_steer_stop(tmp_path: Path) -> None:
    home = Path(tempfile.mkdtemp(prefix="hdo", dir="/tmp"))  # short: AF_UNIX path limit
    try:
        await _scenario(home, tmp_path)
    finally:
        shutil.rmtree(home, ignore_errors=True)


async def _scenario(home: Path, tmp_path: Path) -> None:
    paths = Paths.under(home)
    with FakeOpenAI(RULES) as api, trio.fail_after(TIMEOUT):
        d = await daemon_proc.start(home)
        try:
            async with open_client(paths) as a, open_client(paths) as b:
                topic = await a.create_topic(
                    title="openai",
                    driver="openai",
                    model="fake-model",
                    working_dir=made_dir(tmp_path / "work"),
                    options={
                        "base_url": api.base_url,
                        "api_key_env": "",
                        "mcp_servers": {"t": tools_server(tmp_path / "state")},
                        "mcp_startup_wait": 30,  # the servers in turn 1 however loaded
                        # echo asks for approval; slow runs without asking.
                        "allowed_tools": ["t__slow"],
                    },
                )
                async with a.attach(topic.id) as sa, b.attach(topic.id) as sb:
                    # 1. A tool call needing approval, answered from the other window.
                    async def b_allows(item: Any) -> None:
                        if isinstance(item, ApprovalRequested):
                            await b.answer_approval(topic.id, item.approval.id, allow=True)

                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(until_turn_ended, sb, b_allows)
                        await a.send(topic.id, "echo please", intent="start")
                        first = await until_turn_ended(sa)

                    # 2. A steer while the tool call waits (window B), rolling the answer.
                    async def b_steers(item: Any) -> None:
                        if isinstance(item, ApprovalRequested):
                            await b.send(topic.id, "say banana too", intent="steer")
                            await b.answer_approval(topic.id, item.approval.id, allow=True)

                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(until_turn_ended, sb, b_steers)
                        await a.send(topic.id, "work", intent="start")
                        second = await until_turn_ended(sa)

                    # 3. Stop during a slow tool, then a send that works.
                    async def stop_at_tool(item: Any) -> None:
                        if isinstance(item, RowAppended) and isinstance(item.chunk, ToolCall):
                            await b.stop(topic.id)

                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(until_turn_ended, sb)
                        await a.send(topic.id, "slow", intent="start")
                        third = await until_turn_ended(sa, stop_at_tool)
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(until_turn_ended, sb)
                        await a.send(topic.id, "hello", intent="start")
                        fourth = await until_turn_ended(sa)
                    rows_a = sa.transcript.rows()
                    rows_b = sb.transcript.rows()
                stored = (await a.history(topic.id)).rows
                await a.shutdown()
        finally:
            await d.terminate()

    assert (first.status, second.status, third.status, fourth.status) == (
        "success",
        "success",
        "stopped",
        "success",
    ), (first, second, third, fourth)
    assert [r.parts for r in rows_a] == [r.parts for r in rows_b]
    messages = [r for r in stored if r.role != "marker"]
    assert [(r.role, r.status) for r in messages] == [
        ("user", "success"),
        ("assistant", "success"),
        ("user", "success"),
        ("assistant", "success"),  # A1a: the tool call and its result
        ("user", "success"),  # U2: the steer
        ("assistant", "success"),  # A2
        ("user", "success"),
        ("assistant", "stopped"),  # the slow tool, stopped
        ("user", "success"),
        ("assistant", "success"),
    ], messages
    assert text_of(messages[1]) == "The tool said echoed."
    a1a, u2, a2 = messages[3], messages[4], messages[5]
    assert [type(p) for p in a1a.parts] == [ToolCall, ToolResult]
    assert text_of(u2) == "say banana too"
    assert text_of(a2) == "Done, and banana."
    assert text_of(messages[9]) == "Hi again."

    # What the model saw.
    echo_result = next(r for r in api.chat_requests if r.last_role == "tool")
    assert echo_result.tool_results == ["echoed"]
    steered = next(r for r in api.chat_requests if r.last_user_text == "say banana too")
    assert steered.count_text("say banana too") == 1
    assert steered.tool_results[-1] == "working"
    last = api.chat_requests[-1]
    users = [m["content"] for m in last.messages if m["role"] == "user"]
    assert users == ["echo please", "work", "say banana too", "slow", "hello"]
    assistants = [m["content"] for m in last.messages if m["role"] == "assistant" and m["content"]]
    assert assistants == ["The tool said echoed.", "Done, and banana."]
    # Earlier tool calls are remembered, each with its result; the stopped one (no result)
    # is left out.
    calls = [c["function"]["name"] for m in last.messages for c in m.get("tool_calls", [])]
    assert calls == ["t__echo", "t__echo"]
    assert last.tool_results == ["echoed", "working"]
    assert "t__slow" not in str(last.messages)


#: A 1x1 transparent PNG.
PNG_1x1 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII="


async def test_an_image_sent_to_the_daemon_reaches_the_model(tmp_path: Path) -> None:
    """Protocol 1.5 end to end: `send` with an image (the real daemon stores it with the user
    row and hands it to the driver process), the fake server gets an `image_url` part, and
    again on the next turn, in the history the stateless driver is given."""
    home = Path(tempfile.mkdtemp(prefix="hdi", dir="/tmp"))
    try:
        rules = [Rule(user_says("what is this?"), Text("A dot.")), Rule(user_says("what colour?"), Text("None."))]
        with FakeOpenAI(rules) as api, trio.fail_after(TIMEOUT):
            d = await daemon_proc.start(home)
            try:
                async with open_client(Paths.under(home)) as client:
                    topic = await client.create_topic(
                        title="image", driver="openai", model="fake-model", working_dir=str(tmp_path),
                        options={"base_url": api.base_url, "api_key_env": ""},
                    )
                    async with client.attach(topic.id) as sub:
                        image = Attachment(media_type="image/png", data=PNG_1x1, name="dot.png")
                        await client.send(topic.id, "what is this?", attachments=[image])
                        ended = await until_turn_ended(sub)
                        assert ended.status == "success"
                        first_request = api.chat_requests[-1]
                        await client.send(topic.id, "what colour?")
                        ended = await until_turn_ended(sub)
                    assert ended.status == "success"
                    rows = (await client.history(topic.id)).rows
            finally:
                await d.terminate()
        assert rows[0].meta["attachments"] == [{"media_type": "image/png", "data": PNG_1x1, "name": "dot.png"}]
        assert text_of(rows[1]) == "A dot."
        with_image = [
            {"type": "text", "text": "what is this?"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG_1x1}"}},
        ]
        assert first_request.messages[-1]["content"] == with_image
        second = api.chat_requests[-1].messages
        assert [m["content"] for m in second if m["role"] == "user"] == [with_image, "what colour?"]
    finally:
        shutil.rmtree(home, ignore_errors=True)
