"""The ACP driver's sans-IO parts: the JSON-RPC line codec and the update translator."""

from __future__ import annotations

import itertools
import json

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from hostd_acp.jsonrpc import (
    Dropped,
    LineDecoder,
    Notification,
    Request,
    Response,
    encode_request,
    encode_result,
)
from hostd_acp.translate import UpdateTranslator, commands_event
from hostd_protocol.common import (
    CommandInfo,
    PlanChunk,
    PlanEntry,
    TextDelta,
    ToolCall,
    ToolResult,
)
from hostd_protocol.driver_messages import CommandsEvent, Log

STREAM = (
    encode_request(1, "session/request_permission", {"a": 1})
    + b'{"jsonrpc":"2.0","method":"session/update","params":{"x":"\xc3\xa9"}}\n'
    + b"not json\n"
    + b"\n"
    + encode_result(7, None)
    + b'{"jsonrpc":"2.0","id":8,"error":{"code":-32602,"message":"bad"}}\n'
)


def kinds(items: list[object]) -> list[str]:
    return [type(i).__name__ for i in items]


def test_lines_decode_to_messages_and_drops() -> None:
    got = LineDecoder().feed(STREAM)
    assert kinds(got) == ["Request", "Notification", "Dropped", "Response", "Response"]
    req, note, bad, ok, err = got
    assert isinstance(req, Request) and req.id == 1 and json.loads(bytes(req.params)) == {"a": 1}
    assert isinstance(note, Notification) and json.loads(bytes(note.params)) == {"x": "é"}
    assert isinstance(bad, Dropped) and bad.reason == "malformed"
    assert isinstance(ok, Response) and ok.error is None and bytes(ok.result) == b"null"
    assert isinstance(err, Response) and err.error is not None and err.error.code == -32602


@given(st.lists(st.integers(min_value=1, max_value=len(STREAM) - 1), max_size=8))
def test_any_split_decodes_the_same(cuts: list[int]) -> None:
    decoder = LineDecoder()
    got: list[object] = []
    points = [0, *sorted(set(cuts)), len(STREAM)]
    for a, b in itertools.pairwise(points):
        got += decoder.feed(STREAM[a:b])
    assert kinds(got) == kinds(LineDecoder().feed(STREAM))


def test_one_byte_at_a_time() -> None:
    decoder = LineDecoder()
    got: list[object] = []
    for i in range(len(STREAM)):
        got += decoder.feed(STREAM[i : i + 1])
    assert kinds(got) == ["Request", "Notification", "Dropped", "Response", "Response"]


def test_an_oversized_line_is_dropped_without_being_buffered() -> None:
    decoder = LineDecoder(max_line=100)
    got = decoder.feed(b'{"jsonrpc":"2.0","method":"x","params":"' + b"y" * 150)
    assert got == [] and len(decoder._buf) == 0
    got = decoder.feed(b"y" * 1000 + b'"}\n' + encode_result(1, {}))
    assert kinds(got) == ["Dropped", "Response"]
    assert isinstance(got[0], Dropped) and got[0].reason == "oversized"
    assert got[0].size > 1100


def update(**fields: object) -> bytes:
    return msgspec.json.encode(fields)


def test_tool_call_waits_for_its_input_and_gets_one_result() -> None:
    t = UpdateTranslator()
    assert t.feed(update(sessionUpdate="tool_call", toolCallId="c", title="Run", rawInput={})) == []
    assert t.feed(
        update(sessionUpdate="tool_call_update", toolCallId="c", rawInput={"cmd": "ls"})
    ) == [ToolCall(call_id="c", name="Run", input={"cmd": "ls"})]
    done = update(
        sessionUpdate="tool_call_update",
        toolCallId="c",
        status="completed",
        content=[{"type": "diff", "path": "/w/a.txt", "oldText": "a", "newText": "b"}],
    )
    assert t.feed(done) == [ToolResult(call_id="c", output="--- /w/a.txt\n+++ /w/a.txt\nb")]
    assert t.feed(done) == []  # never two results


def test_a_call_without_input_is_announced_before_other_output() -> None:
    t = UpdateTranslator()
    t.feed(update(sessionUpdate="tool_call", toolCallId="c", kind="read"))
    out = t.feed(
        update(sessionUpdate="agent_message_chunk", content={"type": "text", "text": "hi"})
    )
    assert out == [ToolCall(call_id="c", name="read"), TextDelta(text="hi")]
    assert t.finish() == []


def test_plans_unknown_kinds_and_garbage() -> None:
    t = UpdateTranslator()
    plan = t.feed(
        update(
            sessionUpdate="plan",
            entries=[
                {"content": "a", "status": "completed", "priority": "high"},
                {"content": "b", "status": "brand_new_status", "priority": "low"},
            ],
        )
    )
    assert plan == [
        PlanChunk(
            entries=[
                PlanEntry(content="a", status="completed", priority="high"),
                PlanEntry(content="b", status="pending", priority="low"),
            ]
        )
    ]
    commands = update(
        sessionUpdate="available_commands_update",
        availableCommands=[{"name": "r", "description": "d", "input": {"hint": "h"}}, {"name": "x"}],
    )
    assert t.feed(commands) == []  # session-level: the driver emits it whenever it comes
    assert commands_event(commands) == CommandsEvent(
        commands=[CommandInfo(name="r", description="d", input_hint="h"), CommandInfo(name="x")]
    )
    assert isinstance(commands_event(b'{"availableCommands": 3}'), Log)
    unknown = t.feed(update(sessionUpdate="brand_new_kind"))
    assert len(unknown) == 1 and isinstance(unknown[0], Log) and unknown[0].level == "debug"
    bad = t.feed(b'{"sessionUpdate": "tool_call"}')
    assert len(bad) == 1 and isinstance(bad[0], Log) and bad[0].level == "warning"
    assert isinstance(t.feed(b"[1, 2]")[0], Log)
