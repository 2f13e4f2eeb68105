"""The model remembers its tool calls: later requests carry earlier turns' `tool_calls` and
`tool` messages, in order and each exactly once, also after a steer roll, a resume in a new
driver process (the daemon restarted: the history is rebuilt from the store) and a rewind.

Real daemon process, real socket and SQLite, the driver and a real MCP server as
subprocesses, the fake OpenAI-compatible server in this process.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
import trio

from hostd.client import Client, Subscription, open_client
from hostd.shell.paths import Paths
from hostd_protocol.client_messages import ApprovalRequested, TurnEnded
from tests.dirs import made_dir
from tests.e2e import daemon_proc
from tests.fakes.openai_api import (
    FakeOpenAI,
    Recorded,
    Rule,
    Text,
    ToolCalls,
    after_tools,
    user_says,
)
from tests.openai.peer import tools_server

pytestmark = pytest.mark.e2e

TIMEOUT = 90

RULES = [
    Rule(
        user_says("read it"),
        ToolCalls([("t__echo", {"text": "one"}), ("t__echo", {"text": "two"})]),
    ),
    Rule(after_tools("read it"), Text("It said one and two.")),
    Rule(user_says("work"), ToolCalls([("t__echo", {"text": "working"})])),
    Rule(user_says("say banana too"), Text("Done, and banana.")),
    Rule(lambda r: r.last_role == "user", Text("ok")),
]


def trace(request: Recorded) -> list[tuple[str, ...]]:
    """The conversation a request carried, tool calls and results included, in order."""
    out: list[tuple[str, ...]] = []
    for m in request.messages:
        if m["role"] == "tool":
            out.append(("result", m["tool_call_id"], m["content"]))
            continue
        if m.get("content"):
            out.append((m["role"], m["content"]))
        for call in m.get("tool_calls", []):
            out.append(
                ("call", call["id"], call["function"]["name"], call["function"]["arguments"])
            )
    return out


async def turn(client: Client, sub: Subscription, topic_id: str, text: str, steer: str = "") -> str:
    """Send `text`, allow every tool call (steering `steer` first, once), wait for the end."""
    steered = False
    await client.send(topic_id, text, intent="start")
    async for item in sub:
        if isinstance(item, ApprovalRequested):
            if steer and not steered:
                steered = True
                await client.send(topic_id, steer, intent="steer")
            await client.answer_approval(topic_id, item.approval.id, allow=True)
        if isinstance(item, TurnEnded):
            return item.status
    raise AssertionError("the subscription ended before the turn did")


class Session:
    """One daemon run with one client attached to the topic."""

    def __init__(self, client: Client, sub: Subscription, topic_id: str) -> None:
        self.client, self.sub, self.topic_id = client, sub, topic_id

    async def turn(self, text: str, steer: str = "") -> None:
        assert await turn(self.client, self.sub, self.topic_id, text, steer) == "success"


async def test_tool_calls_reach_later_requests_once_in_order(tmp_path: Path) -> None:
    home = Path(tempfile.mkdtemp(prefix="hdt", dir="/tmp"))  # short: AF_UNIX path limit
    try:
        await _scenario(home, tmp_path)
    finally:
        shutil.rmtree(home, ignore_errors=True)


async def _scenario(home: Path, tmp_path: Path) -> None:
    paths = Paths.under(home)
    with FakeOpenAI(RULES) as api, trio.fail_after(TIMEOUT):

        def request_after(text: str) -> Recorded:
            """The last request whose newest message is the user's `text`."""
            return [
                r for r in api.chat_requests if r.last_role == "user" and r.last_user_text == text
            ][-1]

        def ids_for(text: str) -> list[str]:
            """Ids the fake gave the tool calls answering `text`: `call_<n>_<index>`, n the
            number of requests it had recorded, that one included."""
            n = api.requests.index(request_after(text)) + 1
            return [f"call_{n}_{k}" for k in range(2)]

        d = await daemon_proc.start(home)
        try:
            async with open_client(paths) as a:
                topic = await a.create_topic(
                    title="tools",
                    driver="openai",
                    model="fake-model",
                    working_dir=made_dir(tmp_path / "work"),
                    options={
                        "base_url": api.base_url,
                        "api_key_env": "",
                        "mcp_servers": {"t": tools_server(tmp_path / "state")},
                        "mcp_startup_wait": 30,  # the servers in turn 1 however loaded
                    },
                )
                async with a.attach(topic.id) as sub:
                    s = Session(a, sub, topic.id)
                    # 1. A tool turn (two parallel calls), then turn 2.
                    await s.turn("read it")
                    await s.turn("next")
                    one, two = ids_for("read it")
                    turn1 = [
                        ("user", "read it"),
                        ("call", one, "t__echo", '{"text": "one"}'),
                        ("call", two, "t__echo", '{"text": "two"}'),
                        ("result", one, "one"),
                        ("result", two, "two"),
                        ("assistant", "It said one and two."),
                    ]
                    assert trace(request_after("next")) == [*turn1, ("user", "next")]

                    # 2. A steer while the tool call waits for its approval: the answer rolls
                    # (A1a with the call and its result, U2, A2); the next turn reads it so.
                    await s.turn("work", steer="say banana too")
                    await s.turn("after the steer")
                    (work, _) = ids_for("work")
                    turn3 = [
                        ("user", "work"),
                        ("call", work, "t__echo", '{"text": "working"}'),
                        ("result", work, "working"),
                        ("user", "say banana too"),
                        ("assistant", "Done, and banana."),
                    ]
                    so_far = [*turn1, ("user", "next"), ("assistant", "ok"), *turn3]
                    assert trace(request_after("after the steer")) == [
                        *so_far,
                        ("user", "after the steer"),
                    ]
                    so_far += [("user", "after the steer"), ("assistant", "ok")]
                    rows = (await a.history(topic.id)).rows
                    first_answer = rows[1].id
        finally:
            assert await d.terminate() == 0

        # 3. A new daemon, so a new driver process: the history comes from the store.
        d = await daemon_proc.start(home)
        try:
            async with open_client(paths) as a, a.attach(topic.id) as sub:
                s = Session(a, sub, topic.id)
                await s.turn("after the restart")
                assert trace(request_after("after the restart")) == [
                    *so_far,
                    ("user", "after the restart"),
                ]

                # 4. A rewind to the first answer: the tool turn stays, the rest is gone.
                await a.rewind(topic.id, first_answer)
                await s.turn("after the rewind")
                assert trace(request_after("after the rewind")) == [
                    *turn1,
                    ("user", "after the rewind"),
                ]
                await a.shutdown()
        finally:
            await d.terminate()


def test_trace_helper_sees_order() -> None:
    rec = Recorded(
        path="/v1/chat/completions",
        body={
            "messages": [
                {"role": "user", "content": "q"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [{"id": "c", "function": {"name": "n", "arguments": "{}"}}],
                },
                {"role": "tool", "tool_call_id": "c", "content": "r"},
            ]
        },
        headers={},
        received_at=0.0,
    )
    assert trace(rec) == [("user", "q"), ("call", "c", "n", "{}"), ("result", "c", "r")]
