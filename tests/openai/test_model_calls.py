"""The OpenAI driver's model side against the fake server: history, usage, retries, errors,
cut and slow streams, stop, context overflow, steering, the step limit."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import trio

from hostd_protocol.common import Attachment, HistoryMessage, TextDelta, ToolCall, ToolResult, Usage
from hostd_protocol.driver_messages import (
    ApiRetry,
    ApprovalResponse,
    ChunkEvent,
    CompactionComplete,
    CompactionStart,
    Interrupt,
    Log,
    ModelCallEnd,
    ModelCallStart,
    Notice,
    Redirect,
    SteerBoundary,
    SteerInjected,
    SteerUndelivered,
    UsageEvent,
)
from tests.fakes.openai_api import (
    Cut,
    Error,
    FakeOpenAI,
    Garbage,
    Gate,
    Hang,
    Rule,
    Text,
    ToolCalls,
    anything,
    user_says,
)
from tests.openai.peer import driver, end_of, text_of, tool_results

FAST_RETRY = {"retry_base_delay": 0.01, "retry_max_delay": 0.05}


async def test_history_and_usage() -> None:
    rules = [Rule(user_says("and now?"), Text("Now this.", usage=(30, 4)))]
    history = [
        HistoryMessage(role="user", text="first"),
        HistoryMessage(role="assistant", text="first answer"),
        HistoryMessage(role="assistant", text=""),  # a tools-only row: nothing to read
    ]
    with FakeOpenAI(rules) as api, trio.fail_after(20):
        async with driver(
            api.base_url, system_prompt="Be brief.", prices={"input": 1.0, "output": 2.0}
        ) as (peer, ready):
            assert ready.capabilities.needs_history and ready.capabilities.inject_steering
            events = await peer.turn("t1", "and now?", history=history)
    assert end_of(events).status == "success"
    assert text_of(events) == "Now this."
    (req,) = api.chat_requests
    assert req.messages == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "first answer"},
        {"role": "user", "content": "and now?"},
    ]
    assert req.body["stream"] is True and req.body["stream_options"] == {"include_usage": True}
    usage = [e for e in events if isinstance(e, UsageEvent)][-1].usage
    assert (usage.input_tokens, usage.output_tokens) == (30, 4)
    assert usage.cost_usd == pytest.approx((30 * 1.0 + 4 * 2.0) / 1e6)


async def test_429_and_500_are_retried_with_notices() -> None:
    rules = [
        Rule(
            user_says("hi"),
            [Error(429, "slow down", retry_after=0.01), Error(503, "overloaded"), Text("Hi!")],
        )
    ]
    with FakeOpenAI(rules) as api, trio.fail_after(20):
        async with driver(api.base_url, **FAST_RETRY) as (peer, _):
            events = await peer.turn("t1", "hi")
    assert end_of(events).status == "success"
    assert text_of(events) == "Hi!"
    retries = [e for e in events if isinstance(e, ApiRetry)]
    assert [(r.attempt, r.error_status) for r in retries] == [(1, 429), (2, 503)]
    assert retries[0].retry_delay_ms == 10  # Retry-After wins over the backoff
    # One word per retry to the windows (the host's notice for ApiRetry): a Notice of the
    # driver's own beside it showed each retry twice (found from outside). The reason: the log.
    assert [e for e in events if isinstance(e, Notice) and e.code == "api_retry"] == []
    logs = [e.message for e in events if isinstance(e, Log) and e.level == "warning"]
    assert len(logs) == 2 and "slow down" in logs[0]
    assert len(api.chat_requests) == 3


async def test_retries_are_bounded() -> None:
    with FakeOpenAI([Rule(anything, Error(500, "down"))]) as api, trio.fail_after(20):
        async with driver(api.base_url, model_retries=2, **FAST_RETRY) as (peer, _):
            events = await peer.turn("t1", "hi")
    end = end_of(events)
    assert end.status == "error"
    assert end.error.startswith("the model server answered 500: down (after 3 attempts)")
    assert len(api.chat_requests) == 3


async def test_401_is_auth_required(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOSTD_TEST_OPENAI_KEY", "wrong-key")
    with FakeOpenAI([Rule(anything, Text("secret"))], api_key="right-key") as api:
        with trio.fail_after(20):
            async with driver(api.base_url, api_key_env="HOSTD_TEST_OPENAI_KEY") as (peer, _):
                events = await peer.turn("t1", "hi")
    end = end_of(events)
    assert (end.status, end.error_code) == ("error", "auth_required")
    assert "HOSTD_TEST_OPENAI_KEY" in end.error
    assert "wrong-key" not in end.error
    assert api.requests[0].headers["authorization"] == "Bearer wrong-key"


async def test_the_key_comes_from_the_named_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOSTD_TEST_OPENAI_KEY", "right-key")
    with FakeOpenAI([Rule(anything, Text("ok"))], api_key="right-key") as api:
        with trio.fail_after(20):
            async with driver(api.base_url, api_key_env="HOSTD_TEST_OPENAI_KEY") as (peer, _):
                events = await peer.turn("t1", "hi")
    assert end_of(events).status == "success"


async def test_unknown_model_names_the_servers_models() -> None:
    with FakeOpenAI([Rule(anything, Text("x"))]) as api, trio.fail_after(20):
        async with driver(api.base_url, model="gpt-nope") as (peer, _):
            events = await peer.turn("t1", "hi")
    end = end_of(events)
    assert end.status == "error"
    assert end.error.startswith("unknown model 'gpt-nope'")
    assert end.error.endswith("the server has: fake-large, fake-model")


async def test_cut_stream_ends_in_error_with_the_partial_kept() -> None:
    with FakeOpenAI([Rule(anything, Cut("The answer is"))]) as api, trio.fail_after(20):
        async with driver(api.base_url, **FAST_RETRY) as (peer, _):
            events = await peer.turn("t1", "hi")
            again = await peer.turn("t2", "hi")
    end = end_of(events)
    assert end.status == "error"
    assert "cut" in end.error
    assert text_of(events) == "The answer is"  # streamed before the cut: the host keeps it
    assert len(api.chat_requests) == 2  # not retried: the user already saw a partial answer
    assert end_of(again).status == "error"


async def test_stop_during_a_slow_stream_then_a_send_works() -> None:
    rules = [Rule(user_says("long"), Hang("one two ")), Rule(user_says("short"), Text("done"))]
    with FakeOpenAI(rules) as api, trio.fail_after(20):
        async with driver(api.base_url) as (peer, _):

            async def on_event(event: Any) -> None:
                if isinstance(event, ChunkEvent):
                    await peer.send(Interrupt(turn_id="t1"))

            events = await peer.turn("t1", "long", on_event=on_event)
            after = await peer.turn("t2", "short")
    assert end_of(events).status == "stopped"
    assert end_of(after).status == "success" and text_of(after) == "done"


async def test_slow_stream_is_streamed_as_it_comes() -> None:
    rules = [Rule(anything, Text("a b c d", delay=0.05))]
    with FakeOpenAI(rules) as api, trio.fail_after(20):
        async with driver(api.base_url) as (peer, _):
            events = await peer.turn("t1", "hi")
    assert [e.chunk.text for e in events if isinstance(e, ChunkEvent)] == ["a ", "b ", "c ", "d"]


async def test_context_overflow_compacts_and_retries() -> None:
    overflow = Error(
        400, "This model's maximum context length is 8192 tokens", "context_length_exceeded"
    )
    rules = [
        Rule(lambda r: "Summarise the conversation" in str(r.messages[0]), Text("They talked.")),
        Rule(lambda r: "(Summary of the earlier conversation)" in str(r.messages), Text("Fine.")),
        Rule(anything, overflow),
    ]
    history = [
        HistoryMessage(role="user" if i % 2 == 0 else "assistant", text=f"m{i}") for i in range(8)
    ]
    with FakeOpenAI(rules) as api, trio.fail_after(20):
        async with driver(api.base_url, compact_keep_last=2) as (peer, _):
            events = await peer.turn("t1", "go on", history=history)
    assert end_of(events).status == "success"
    kinds = [type(e) for e in events if isinstance(e, CompactionStart | CompactionComplete)]
    assert kinds == [CompactionStart, CompactionComplete]
    anchor = next(e for e in events if isinstance(e, CompactionComplete)).anchor
    assert anchor is not None and anchor.summary == "They talked."
    last = api.chat_requests[-1].messages
    assert last[0]["content"].endswith("They talked.")
    assert [m["content"] for m in last[1:]] == ["m7", "go on"]  # compact_keep_last=2
    assert text_of(events) == "Fine."


async def test_context_overflow_without_compaction_fails_clearly() -> None:
    overflow = Error(400, "maximum context length exceeded", "context_length_exceeded")
    with FakeOpenAI([Rule(anything, overflow)]) as api, trio.fail_after(20):
        async with driver(api.base_url, compact_on_overflow=False) as (peer, _):
            events = await peer.turn("t1", "hi")
    end = end_of(events)
    assert end.status == "error"
    assert end.error.startswith("the conversation is too long for model 'fake-model'")


async def test_step_limit_ends_the_turn_with_a_reason() -> None:
    rules = [Rule(anything, ToolCalls([("nope__tool", {})]))]
    with FakeOpenAI(rules) as api, trio.fail_after(20):
        async with driver(api.base_url, max_steps=3) as (peer, _):
            events = await peer.turn("t1", "loop")
    end = end_of(events)
    assert end.status == "error"
    assert "after 3 steps (max_steps)" in end.error
    assert len(api.chat_requests) == 3
    # Unknown tools are final failures handed to the model, never retried.
    assert all(r.is_error and "unknown tool" in r.output for r in tool_results(events))


async def test_a_stream_cut_before_any_output_is_retried() -> None:
    rules = [Rule(anything, [Cut(""), Text("whole answer")])]
    with FakeOpenAI(rules) as api, trio.fail_after(20):
        async with driver(api.base_url, **FAST_RETRY) as (peer, _):
            events = await peer.turn("t1", "hi")
    assert end_of(events).status == "success"
    assert text_of(events) == "whole answer"
    assert [e.attempt for e in events if isinstance(e, ApiRetry)] == [1]


async def test_a_steer_while_the_answer_streams_gets_one_more_call() -> None:
    gate = threading.Event()
    rules = [
        Rule(user_says("talk"), Gate("Talking ", "and done.", gate)),
        Rule(user_says("also say banana"), Text("Banana.")),
    ]
    with FakeOpenAI(rules) as api, trio.fail_after(20):
        async with driver(api.base_url) as (peer, _):
            steered = False

            async def on_event(event: Any) -> None:
                nonlocal steered
                if isinstance(event, ChunkEvent) and not steered:
                    steered = True
                    await peer.send(Redirect(turn_id="t1", steer_id="s1", text="also say banana"))
                    # The harness handles commands in order: its answer to this unknown
                    # approval proves the steer is pending before the stream may finish.
                    await peer.send(ApprovalResponse(approval_id="none", allow=False))
                elif isinstance(event, Log) and "no open approval" in event.message:
                    gate.set()

            events = await peer.turn("t1", "talk", on_event=on_event)
    assert end_of(events).status == "success"
    boundary = next(i for i, e in enumerate(events) if isinstance(e, SteerBoundary))
    assert text_of(events[:boundary]) == "Talking and done."
    assert text_of(events[boundary:]) == "Banana."
    assert [type(e) for e in events if isinstance(e, SteerInjected | SteerBoundary)] == [
        SteerInjected,
        SteerBoundary,
    ]
    second = api.chat_requests[1]
    assert [(m["role"], m["content"]) for m in second.messages] == [
        ("user", "talk"),
        ("assistant", "Talking and done."),
        ("user", "also say banana"),
    ]


async def test_a_malformed_stream_ends_the_turn_clearly() -> None:
    with FakeOpenAI([Rule(anything, Garbage("Half "))]) as api, trio.fail_after(20):
        async with driver(api.base_url) as (peer, _):
            events = await peer.turn("t1", "hi")
    end = end_of(events)
    assert end.status == "error"
    assert end.error.startswith("the model server sent a malformed stream: a stream event")
    assert text_of(events) == "Half "


async def test_a_steer_pending_when_the_steps_run_out_becomes_the_next_turn() -> None:
    gate = threading.Event()
    rules = [Rule(user_says("talk"), Gate("Talking ", "and done.", gate))]
    with FakeOpenAI(rules) as api, trio.fail_after(20):
        async with driver(api.base_url, max_steps=1) as (peer, _):
            steered = False

            async def on_event(event: Any) -> None:
                nonlocal steered
                if isinstance(event, ChunkEvent) and not steered:
                    steered = True
                    await peer.send(Redirect(turn_id="t1", steer_id="s1", text="and banana"))
                    await peer.send(ApprovalResponse(approval_id="none", allow=False))
                elif isinstance(event, Log) and "no open approval" in event.message:
                    gate.set()

            events = await peer.turn("t1", "talk", on_event=on_event)
    assert end_of(events).status == "success"
    assert text_of(events) == "Talking and done."
    (undelivered,) = [e for e in events if isinstance(e, SteerUndelivered)]
    assert undelivered.steer_ids == ["s1"]
    assert not [e for e in events if isinstance(e, SteerInjected)]
    assert len(api.chat_requests) == 1


async def test_a_tracing_host_gets_each_model_call_and_the_server_the_trace_context() -> None:
    """With `report_model_calls`, each request to the model (its retries inside it) is one
    `model-call-start` / `model-call-end` pair with the call's own usage and finish reason;
    the turn's `traceparent` goes to the server as the W3C header."""
    tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    rules = [Rule(user_says("hi"), [Error(429, "slow down", retry_after=0.01), Text("Hi!", usage=(12, 3))])]
    with FakeOpenAI(rules) as api, trio.fail_after(20):
        async with driver(api.base_url, report_model_calls=True, **FAST_RETRY) as (peer, _):
            events = await peer.turn("t1", "hi", traceparent=tp)
        async with driver(api.base_url, **FAST_RETRY) as (peer, _):
            plain = await peer.turn("t2", "hi")
    assert end_of(events).status == "success"
    calls = [e for e in events if isinstance(e, ModelCallStart | ModelCallEnd | ApiRetry)]
    assert calls == [
        ModelCallStart(turn_id="t1", call_id="m1", model="fake-model", provider="openai"),
        ApiRetry(turn_id="t1", attempt=1, max_retries=calls[1].max_retries, retry_delay_ms=10, error_status=429),
        ModelCallEnd(
            turn_id="t1", call_id="m1", finish_reason="stop",
            usage=Usage(input_tokens=12, output_tokens=3),
        ),
    ]
    assert [r.headers.get("traceparent") for r in api.chat_requests[:2]] == [tp, tp]
    assert not [e for e in plain if isinstance(e, ModelCallStart | ModelCallEnd)]
    assert "traceparent" not in api.chat_requests[-1].headers


async def test_a_compaction_never_splits_a_tool_call_from_its_result() -> None:
    overflow = Error(
        400, "This model's maximum context length is 8192 tokens", "context_length_exceeded"
    )
    rules = [
        Rule(lambda r: "Summarise the conversation" in str(r.messages[0]), Text("They talked.")),
        Rule(lambda r: "(Summary of the earlier conversation)" in str(r.messages), Text("Fine.")),
        Rule(anything, overflow),
    ]

    def answer(n: int) -> HistoryMessage:
        call = ToolCall(call_id=f"c{n}", name="t__echo", input={"text": f"r{n}"})
        result = ToolResult(call_id=f"c{n}", output=f"r{n}")
        return HistoryMessage(
            role="assistant", text=f"a{n}", parts=[call, result, TextDelta(text=f"a{n}")]
        )

    history = [HistoryMessage(role="user", text="q1"), answer(1)]
    history += [HistoryMessage(role="user", text="q2"), answer(2)]
    with FakeOpenAI(rules) as api, trio.fail_after(20):
        # Keeping the last 3 messages would start at c2's result: the cut moves back to its call.
        async with driver(api.base_url, compact_keep_last=3) as (peer, _):
            events = await peer.turn("t1", "go on", history=history)
    assert end_of(events).status == "success"
    summarised = api.chat_requests[-2].messages[1]["content"]
    assert "[called t__echo]" in summarised and "tool: r1" in summarised
    last = api.chat_requests[-1].messages
    assert last[0]["content"].endswith("They talked.")
    assert [(m["role"], m.get("tool_call_id") or m["content"]) for m in last[1:]] == [
        ("assistant", None),
        ("tool", "c2"),
        ("assistant", "a2"),
        ("user", "go on"),
    ]
    assert [c["id"] for c in last[1]["tool_calls"]] == ["c2"]


#: A 1x1 transparent PNG.
PNG_1x1 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII="


async def test_an_attached_image_is_an_image_url_part() -> None:
    """Protocol 1.5: the user message with images is content parts: the text, then each image
    as an `image_url` data URL."""
    with FakeOpenAI([Rule(user_says("what is this?"), Text("A dot."))]) as api, trio.fail_after(20):
        async with driver(api.base_url) as (peer, _ready):
            image = Attachment(media_type="image/png", data=PNG_1x1, name="dot.png")
            events = await peer.turn("t1", "what is this?", attachments=[image])
    assert end_of(events).status == "success" and text_of(events) == "A dot."
    (req,) = api.chat_requests
    assert req.messages[-1] == {
        "role": "user",
        "content": [
            {"type": "text", "text": "what is this?"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG_1x1}"}},
        ],
    }
