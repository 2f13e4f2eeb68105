"""The SDK -> hostd translation, message by message (no CLI, no I/O)."""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest.importorskip("claude_agent_sdk")

from claude_agent_sdk import (
    AssistantMessage,
    ResultMessage,
    StreamEvent,
    SystemMessage,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    UserMessage,
)

from hostd_claude_code.translate import (
    MESSAGE_START,
    Translator,
    result_error_message,
    tool_result_text,
)
from hostd_protocol.common import (
    CommandInfo,
    CompactionAnchor,
    PlanChunk,
    PlanEntry,
    TextDelta,
    ThinkingDelta,
    ToolCall,
    ToolResult,
    Usage,
)
from hostd_protocol.driver_messages import (
    ApiRetry,
    CommandsEvent,
    CompactionComplete,
    CompactionError,
    CompactionStart,
    Log,
    ModelCallEnd,
    ModelCallStart,
    ResumeToken,
    UsageEvent,
)


def ev(event: dict[str, Any], parent: str | None = None) -> StreamEvent:
    return StreamEvent(uuid="u", session_id="s", event=event, parent_tool_use_id=parent)


def start(msg_id: str = "msg_1") -> StreamEvent:
    return ev({"type": "message_start", "message": {"id": msg_id}})


def block_start(index: int, block: dict[str, Any]) -> StreamEvent:
    return ev({"type": "content_block_start", "index": index, "content_block": block})


def delta(index: int, d: dict[str, Any], parent: str | None = None) -> StreamEvent:
    return ev({"type": "content_block_delta", "index": index, "delta": d}, parent)


def stop(index: int) -> StreamEvent:
    return ev({"type": "content_block_stop", "index": index})


def result(**kw: Any) -> ResultMessage:
    base: dict[str, Any] = dict(
        subtype="success",
        duration_ms=1,
        duration_api_ms=1,
        is_error=False,
        num_turns=1,
        session_id="s",
    )
    base.update(kw)
    return ResultMessage(**base)


def feed_all(t: Translator, *msgs: object) -> list[Any]:
    out: list[Any] = []
    for m in msgs:
        out.extend(t.feed(m))
    return out


def test_text_and_thinking_stream_into_chunks_after_message_start() -> None:
    t = Translator("t1")
    out = feed_all(
        t,
        start(),
        block_start(0, {"type": "thinking", "thinking": ""}),
        delta(0, {"type": "thinking_delta", "thinking": "hmm"}),
        delta(0, {"type": "signature_delta", "signature": "x"}),
        stop(0),
        block_start(1, {"type": "text", "text": ""}),
        delta(1, {"type": "text_delta", "text": "Hi"}),
        delta(1, {"type": "text_delta", "text": "!"}),
        AssistantMessage(content=[TextBlock("Hi!")], model="m", message_id="msg_1"),
        stop(1),
    )
    assert out == [
        MESSAGE_START,
        ThinkingDelta(text="hmm"),
        TextDelta(text="Hi"),
        TextDelta(text="!"),
    ]


def test_tool_call_is_sent_when_its_block_completes() -> None:
    t = Translator("t1")
    out = feed_all(
        t,
        start(),
        block_start(0, {"type": "tool_use", "id": "tu1", "name": "Bash", "input": {}}),
        delta(0, {"type": "input_json_delta", "partial_json": '{"comm'}),
        delta(0, {"type": "input_json_delta", "partial_json": 'and": "ls"}'}),
    )
    assert out == [MESSAGE_START]
    assert t.feed(stop(0)) == [ToolCall(call_id="tu1", name="Bash", input={"command": "ls"})]
    assert t.feed(
        UserMessage(content=[ToolResultBlock(tool_use_id="tu1", content="a\nb", is_error=None)])
    ) == [ToolResult(call_id="tu1", output="a\nb", is_error=False)]


def test_tool_input_that_is_not_json_is_kept_raw() -> None:
    t = Translator("t1")
    feed_all(
        t,
        start(),
        block_start(0, {"type": "tool_use", "id": "x", "name": "N"}),
        delta(0, {"type": "input_json_delta", "partial_json": "{nope"}),
    )
    assert t.feed(stop(0)) == [ToolCall(call_id="x", name="N", input={"_raw": "{nope"})]


def test_sub_agent_traffic_is_not_part_of_the_answer() -> None:
    t = Translator("t1")
    out = feed_all(
        t,
        ev({"type": "message_start", "message": {"id": "sub"}}, parent="task1"),
        delta(0, {"type": "text_delta", "text": "sub text"}, parent="task1"),
        AssistantMessage(content=[TextBlock("sub")], model="m", parent_tool_use_id="task1"),
        UserMessage(
            content=[ToolResultBlock(tool_use_id="inner", content="x")], parent_tool_use_id="task1"
        ),
    )
    assert out == []


def test_unstreamed_assistant_message_is_sent_whole_but_errors_never() -> None:
    t = Translator("t1")
    whole = AssistantMessage(
        content=[TextBlock("late"), ToolUseBlock(id="t", name="Read", input={"p": 1})],
        model="m",
        message_id="msg_9",
    )
    assert t.feed(whole) == [
        TextDelta(text="late"),
        ToolCall(call_id="t", name="Read", input={"p": 1}),
    ]
    assert t.feed(whole) == []  # the same message again
    api_error = AssistantMessage(
        content=[TextBlock("API Error: 529")], model="m", message_id="e", error="server_error"
    )
    synthetic = AssistantMessage(content=[TextBlock("No response")], model="<synthetic>")
    assert feed_all(t, api_error, synthetic) == []


def test_session_id_is_reported_once_per_change() -> None:
    t = Translator("t1", session_id="old")
    init = SystemMessage("init", {"session_id": "old"})
    assert t.feed(init) == []
    assert t.feed(SystemMessage("init", {"session_id": "new"})) == [ResumeToken(token="new")]
    assert t.feed(SystemMessage("init", {"session_id": "new"})) == []
    assert t.session_id == "new"


def test_manual_compaction_with_boundary_and_summary() -> None:
    t = Translator("t1", manual_compaction=True, session_id="s")
    out = feed_all(
        t,
        SystemMessage("status", {"status": "compacting"}),
        SystemMessage("status", {"status": None, "compact_result": "success"}),
        SystemMessage("init", {"session_id": "s"}),
        SystemMessage(
            "compact_boundary",
            {
                "compact_metadata": {
                    "trigger": "manual",
                    "pre_tokens": 1049,
                    "post_tokens": 300,
                    "duration_ms": 44,
                }
            },
        ),
    )
    assert out == [CompactionStart(turn_id="t1", trigger="manual")]
    assert t.feed(UserMessage(content="This session is being continued. Summary: x")) == [
        CompactionComplete(
            turn_id="t1",
            anchor=CompactionAnchor(
                trigger="manual",
                tokens_before=1049,
                tokens_after=300,
                duration_ms=44,
                summary="This session is being continued. Summary: x",
            ),
        )
    ]
    assert (
        t.feed(UserMessage(content="<local-command-stdout>Compacted</local-command-stdout>")) == []
    )
    assert not t.compacting


def test_compaction_success_without_boundary_completes_without_anchor() -> None:
    t = Translator("t1")
    out = feed_all(
        t,
        SystemMessage("status", {"status": "compacting"}),
        delta(0, {"type": "text_delta", "text": "summary text"}),  # never a chunk
        SystemMessage("status", {"compact_result": "success"}),
        start("msg_2"),
        delta(0, {"type": "text_delta", "text": "answer"}),
    )
    assert out == [
        CompactionStart(turn_id="t1", trigger="auto"),
        CompactionComplete(turn_id="t1"),
        MESSAGE_START,
        TextDelta(text="answer"),
    ]


def test_compaction_failure_and_skip() -> None:
    t = Translator("t1")
    assert t.feed(
        SystemMessage("status", {"compact_result": "failed", "compact_error": "too_few_groups"})
    ) == [Log(level="info", message="compaction skipped: too_few_groups")]
    out = feed_all(
        t,
        SystemMessage("status", {"status": "compacting"}),
        SystemMessage("status", {"compact_result": "failed", "compact_error": "boom"}),
    )
    assert out == [CompactionStart(turn_id="t1"), CompactionError(turn_id="t1", message="boom")]
    assert not t.compacting


def test_a_turn_that_ends_while_compacting_leaves_compaction() -> None:
    t = Translator("t1")
    t.feed(SystemMessage("status", {"status": "compacting"}))
    assert t.finish() == [CompactionError(turn_id="t1", message="the turn ended while compacting")]
    assert t.finish() == []


def test_api_retry_and_result_usage() -> None:
    t = Translator("t1", cost_base=0.25)
    assert t.feed(
        SystemMessage(
            "api_retry",
            {"attempt": 1, "max_retries": 2, "retry_delay_ms": 600, "error_status": 529},
        )
    ) == [ApiRetry(turn_id="t1", attempt=1, max_retries=2, retry_delay_ms=600, error_status=529)]
    res = result(
        usage={
            "input_tokens": 10,
            "output_tokens": 5,
            "cache_read_input_tokens": 3,
            "cache_creation_input_tokens": 2,
        },
        total_cost_usd=0.75,
    )
    assert t.feed(res) == [
        UsageEvent(
            turn_id="t1",
            usage=Usage(
                input_tokens=10,
                output_tokens=5,
                cache_read_tokens=3,
                cache_write_tokens=2,
                cost_usd=0.5,
            ),
        )
    ]
    assert t.result is res


def test_error_results_always_say_why() -> None:
    assert (
        result_error_message(
            result(
                is_error=True,
                result="API Error: 529 Overloaded",
                terminal_reason="api_error",
                api_error_status=529,
            )
        )
        == "API Error: 529 Overloaded (subtype=success, terminal_reason=api_error, api_error_status=529)"
    )
    assert result_error_message(result(subtype="error_max_turns", is_error=True)) == (
        "Claude Code reported an error (subtype=error_max_turns)"
    )
    assert (
        result_error_message(result(is_error=True, errors=["a", "b"])) == "a; b (subtype=success)"
    )


def test_tool_result_text() -> None:
    assert tool_result_text(None) == ""
    assert tool_result_text([{"type": "text", "text": "a"}, {"type": "image"}]) == "a\n[image]"


def test_an_interrupted_turn_counts_the_streamed_tokens() -> None:
    """The CLI's result of an interrupted turn has a cost but no tokens: the tokens the
    streamed messages reported are used, so usage never reads "0 tokens, $0.01"."""
    t = Translator("t1")
    t.feed(ev({"type": "message_start",
               "message": {"id": "m1", "usage": {"input_tokens": 900, "output_tokens": 1,
                                                 "cache_read_input_tokens": 50}}}))
    t.feed(ev({"type": "message_delta", "delta": {}, "usage": {"output_tokens": 42}}))
    out = t.feed(result(usage={"input_tokens": 0, "output_tokens": 0}, total_cost_usd=0.01,
                        is_error=True, subtype="error_during_execution"))
    assert out == [UsageEvent(turn_id="t1", usage=Usage(
        input_tokens=900, output_tokens=42, cache_read_tokens=50, cost_usd=0.01))]


def test_todowrite_is_followed_by_the_plan_and_init_names_the_commands() -> None:
    t = Translator("t1", session_id="s")
    todos = {
        "todos": [
            {"content": "Read", "status": "completed", "activeForm": "Reading"},
            {"content": "Write", "status": "in_progress", "activeForm": "Writing"},
            {"content": "Test", "status": "pending", "activeForm": "Testing"},
        ]
    }
    streamed = feed_all(
        t,
        start(),
        block_start(0, {"type": "tool_use", "id": "c1", "name": "TodoWrite"}),
        delta(0, {"type": "input_json_delta", "partial_json": json.dumps(todos)}),
        stop(0),
    )
    plan = PlanChunk(
        entries=[
            PlanEntry(content="Read", status="completed"),
            PlanEntry(content="Write", status="in_progress"),
            PlanEntry(content="Test", status="pending"),
        ]
    )
    assert streamed[-2:] == [ToolCall(call_id="c1", name="TodoWrite", input=todos), plan]
    # Not streamed: the whole message gives the same.
    whole = AssistantMessage(
        content=[ToolUseBlock(id="c2", name="TodoWrite", input=todos)], model="m"
    )
    assert Translator("t2").feed(whole) == [
        ToolCall(call_id="c2", name="TodoWrite", input=todos),
        plan,
    ]
    init = SystemMessage("init", {"session_id": "s", "slash_commands": ["compact", "/review"]})
    assert t.feed(init) == [
        CommandsEvent(commands=[CommandInfo(name="compact"), CommandInfo(name="review")])
    ]


def test_a_tracing_host_gets_each_streamed_message_as_a_model_call() -> None:
    t = Translator("t1", model_calls=True)
    out = feed_all(
        t,
        ev(
            {
                "type": "message_start",
                "message": {"id": "msg_1", "model": "claude-x", "usage": {"input_tokens": 9}},
            }
        ),
        block_start(0, {"type": "tool_use", "id": "tu1", "name": "Bash", "input": {}}),
        stop(0),
        ev(
            {
                "type": "message_delta",
                "delta": {"stop_reason": "tool_use"},
                "usage": {"output_tokens": 4},
            }
        ),
        ev({"type": "message_stop"}),
        ev({"type": "message_start", "message": {"id": "msg_2", "model": "claude-x"}}),
    )
    assert out == [
        MESSAGE_START,
        ModelCallStart(turn_id="t1", call_id="msg_1", model="claude-x", provider="anthropic"),
        ToolCall(call_id="tu1", name="Bash", input={}),
        ModelCallEnd(
            turn_id="t1",
            call_id="msg_1",
            finish_reason="tool_use",
            usage=Usage(input_tokens=9, output_tokens=4),
            response_model="claude-x",
            response_id="msg_1",
        ),
        MESSAGE_START,
        ModelCallStart(turn_id="t1", call_id="msg_2", model="claude-x", provider="anthropic"),
    ]
    # A turn that ends mid-message (an interrupt) still closes its call; without the flag
    # (a host that does not trace) there are none.
    (end,) = t.finish()
    assert isinstance(end, ModelCallEnd) and end.call_id == "msg_2" and end.finish_reason == ""
    plain = Translator("t2")
    assert feed_all(plain, start(), ev({"type": "message_stop"})) == [MESSAGE_START]
