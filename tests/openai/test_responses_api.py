"""`api = "responses"`: the Responses API, request and stream (`hostd_openai.responses_api`),
and the driver's loop over it on the fake server (text, tool calls, earlier tool calls in the
next turn's `input`)."""

from __future__ import annotations

import json
from pathlib import Path

import trio

from hostd_openai.chat_stream import Finished, ReasoningPiece, TextPiece, UsageReport
from hostd_openai.responses_api import ResponsesStreamDecoder, responses_body
from hostd_protocol.common import HistoryMessage, TextDelta, ToolCall, ToolResult
from tests.fakes.openai_api import FakeOpenAI, Rule, Text, ToolCalls, after_tools, user_says
from tests.openai.peer import driver, end_of, text_of, tool_results, tools_server


def sse(*events: dict[str, object]) -> bytes:
    return b"".join(
        b"event: " + str(e["type"]).encode() + b"\ndata: " + json.dumps(e).encode() + b"\n\n"
        for e in events
    )


STREAM = sse(
    {"type": "response.created", "response": {"status": "in_progress"}},
    {"type": "response.reasoning_summary_text.delta", "delta": "hmm"},
    {"type": "response.output_text.delta", "delta": "Let me "},
    {"type": "response.output_text.delta", "delta": "look."},
    {
        "type": "response.output_item.added",
        "output_index": 1,
        "item": {"type": "function_call", "id": "fc_1", "call_id": "call_a", "name": "t__echo"},
    },
    {"type": "response.function_call_arguments.delta", "item_id": "fc_1", "delta": '{"te'},
    {"type": "response.function_call_arguments.delta", "item_id": "fc_1", "delta": 'xt": 1}'},
    {
        "type": "response.completed",
        "response": {
            "status": "completed",
            "usage": {
                "input_tokens": 30,
                "output_tokens": 5,
                "input_tokens_details": {"cached_tokens": 10},
            },
        },
    },
)


def test_the_stream_decodes_alike_whole_and_byte_by_byte() -> None:
    expected = [
        ReasoningPiece("hmm"),
        TextPiece("Let me "),
        TextPiece("look."),
        UsageReport(input_tokens=30, output_tokens=5, cached_tokens=10),
        Finished("tool_calls"),
    ]
    whole = ResponsesStreamDecoder()
    assert whole.feed(STREAM) == expected and whole.done
    one = ResponsesStreamDecoder()
    items = [item for i in range(len(STREAM)) for item in one.feed(STREAM[i : i + 1])]
    assert items == expected
    for d in (whole, one):
        ((call_id, name, args),) = [(c.call_id, c.name, c.arguments) for c in d.tool_calls()]
        assert (call_id, name, json.loads(args)) == ("call_a", "t__echo", {"text": 1})


def test_the_request_is_the_same_conversation() -> None:
    chat = {
        "model": "m",
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": 100,
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "go"},
            {
                "role": "assistant",
                "content": "Looking.",
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "n", "arguments": "{}"}}
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "result"},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "[image 1]"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}},
                ],
            },
        ],
        "tools": [{"type": "function", "function": {"name": "n", "parameters": {}}}],
    }
    assert responses_body(chat) == {
        "model": "m",
        "stream": True,
        "store": False,
        "max_output_tokens": 100,
        "input": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": "Looking."},
            {"type": "function_call", "call_id": "c1", "name": "n", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "result"},
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "[image 1]"},
                    {"type": "input_image", "image_url": "data:image/png;base64,AA"},
                ],
            },
        ],
        "tools": [{"type": "function", "name": "n", "parameters": {}}],
    }


async def test_the_loop_over_the_responses_api(tmp_path: Path) -> None:
    rules = [
        Rule(user_says("echo"), ToolCalls([("t__echo", {"text": "over responses"})])),
        Rule(after_tools("echo"), Text("It said over responses.")),
        Rule(user_says("again"), Text("ok")),
    ]
    with FakeOpenAI(rules) as api, trio.fail_after(40):
        async with driver(
            api.base_url,
            api="responses",
            mcp_servers={"t": tools_server(tmp_path / "state")},
            allowed_tools=["t__*"],
        ) as (peer, _):
            first = await peer.turn("t1", "echo")
            (result,) = tool_results(first)
            # Turn 2 as the host sends it: the stored answer with its tool parts.
            call = next(
                e.chunk
                for e in first
                if getattr(e, "chunk", None) and isinstance(e.chunk, ToolCall)
            )
            history = [
                HistoryMessage(role="user", text="echo"),
                HistoryMessage(
                    role="assistant",
                    text="It said over responses.",
                    parts=[call, result, TextDelta(text="It said over responses.")],
                ),
            ]
            second = await peer.turn("t2", "again", history=history)
    assert end_of(first).status == "success" and end_of(second).status == "success"
    assert text_of(first) == "It said over responses."
    assert result == ToolResult(call_id=call.call_id, output="over responses")
    assert all(r.path.endswith("/v1/responses") for r in api.chat_requests)
    body = api.chat_requests[-1].body
    assert body["store"] is False
    kinds = [
        (i.get("type", "message"), i.get("role", ""), i.get("call_id", "")) for i in body["input"]
    ]
    assert kinds == [
        ("message", "user", ""),
        ("function_call", "", call.call_id),
        ("function_call_output", "", call.call_id),
        ("message", "assistant", ""),
        ("message", "user", ""),
    ]
