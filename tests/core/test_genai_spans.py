"""The sans-IO span mapper (`hostd.core.genai_spans`): which spans a turn's events open and
close, with which GenAI attributes, and that every span opened is closed exactly once."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from hostd.core.genai_spans import (
    MAX_CONTENT,
    STEER_POSITION,
    CloseSpan,
    OpenSpan,
    SpanEvent,
    SpanMapper,
    SpanOp,
)
from hostd_protocol.client_messages import (
    ApprovalInfo,
    ApprovalRequested,
    ApprovalResolved,
    MessageRow,
    Rolled,
    RowAppended,
    RowOpened,
    RowUpdated,
    TopicDeleted,
    TurnEnded,
    TurnStarted,
    UsageUpdated,
)
from hostd_protocol.common import TextDelta, ToolCall, ToolResult, Usage
from hostd_protocol.driver_messages import (
    ApiRetry,
    ChunkEvent,
    CompactionComplete,
    CompactionStart,
    ModelCallEnd,
    ModelCallStart,
    SteerInjected,
)

T = "topic-1"


def started(turn: str = "u1", driver: str = "claude-code", model: str = "sonnet") -> TurnStarted:
    return TurnStarted(topic_id=T, seq=1, turn_id=turn, driver=driver, model=model)


def ended(turn: str = "u1", status: str = "success", error: str = "", code: str = "") -> TurnEnded:
    return TurnEnded(topic_id=T, seq=9, turn_id=turn, status=status, error=error, error_code=code)  # type: ignore[arg-type]


def chunk(c: object) -> RowAppended:
    return RowAppended(topic_id=T, seq=2, row_id="a1", chunk=c)  # type: ignore[arg-type]


def user_row(
    text: str, status: str = "success", position: int = 1, row_id: str = "r1"
) -> RowOpened:
    row = MessageRow(
        id=row_id,
        topic_id=T,
        role="user",
        status=status,
        position=position,  # type: ignore[arg-type]
        parts=[TextDelta(text=text)],
    )
    return RowOpened(topic_id=T, seq=1, row=row)


def play(m: SpanMapper, *events: object) -> list[SpanOp]:
    ops: list[SpanOp] = []
    for i, e in enumerate(events):
        if isinstance(
            e,
            ModelCallStart
            | ModelCallEnd
            | ApiRetry
            | SteerInjected
            | CompactionStart
            | CompactionComplete
            | ChunkEvent,
        ):
            ops += m.driver_event(e, 1000 + i)
        else:
            ops += m.topic_event(T, e, 1000 + i, agent="coder")  # type: ignore[arg-type]
    return ops


def opened(ops: list[SpanOp]) -> dict[str, OpenSpan]:
    return {op.key: op for op in ops if isinstance(op, OpenSpan)}


def closed(ops: list[SpanOp]) -> dict[str, CloseSpan]:
    return {op.key: op for op in ops if isinstance(op, CloseSpan)}


def test_a_turn_with_a_model_call_and_a_tool_call() -> None:
    m = SpanMapper()
    ops = play(
        m,
        user_row("read the README"),
        started(),
        ModelCallStart(turn_id="u1", call_id="m1", model="sonnet-4", provider="anthropic"),
        chunk(TextDelta(text="Let me look.")),
        chunk(ToolCall(call_id="c1", name="Read", input={"file_path": "README.md"})),
        ModelCallEnd(
            turn_id="u1",
            call_id="m1",
            finish_reason="tool_use",
            usage=Usage(input_tokens=10, output_tokens=3),
            response_id="msg_1",
        ),
        chunk(ToolResult(call_id="c1", output="# hostd")),
        UsageUpdated(
            topic_id=T,
            seq=5,
            turn_id="u1",
            usage=Usage(input_tokens=10, output_tokens=3, cache_read_tokens=7),
        ),
        ended(),
    )
    spans = opened(ops)
    assert sorted(spans) == ["chat:u1:m1", "tool:u1:c1", "turn:u1"]
    turn = spans["turn:u1"]
    assert turn.name == "invoke_agent coder" and turn.parent is None
    assert turn.attrs == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.provider.name": "anthropic",
        "gen_ai.agent.name": "coder",
        "gen_ai.conversation.id": T,
        "gen_ai.request.model": "sonnet",
        "hostd.driver": "claude-code",
        "hostd.turn.id": "u1",
    }
    chat = spans["chat:u1:m1"]
    assert (chat.name, chat.parent, chat.kind) == ("chat sonnet-4", "turn:u1", "client")
    tool = spans["tool:u1:c1"]
    assert (tool.name, tool.parent) == ("execute_tool Read", "turn:u1")
    assert tool.attrs["gen_ai.tool.call.id"] == "c1" and tool.attrs["hostd.tool.retries"] == 0
    ends = closed(ops)
    assert ends["chat:u1:m1"].attrs == {
        "hostd.api_retries": 0,
        "gen_ai.response.finish_reasons": ["tool_use"],
        "gen_ai.response.id": "msg_1",
        "gen_ai.usage.input_tokens": 10,
        "gen_ai.usage.output_tokens": 3,
    }
    assert ends["tool:u1:c1"].attrs == {"hostd.tool.status": "success"}
    assert ends["turn:u1"].attrs == {
        "gen_ai.response.finish_reasons": ["tool_use"],
        "hostd.turn.status": "success",
        "gen_ai.usage.input_tokens": 10,
        "gen_ai.usage.output_tokens": 3,
        "gen_ai.usage.cache_read.input_tokens": 7,
    }
    assert all(c.error is None for c in ends.values())
    # Nothing of the content without capture.
    assert not any(
        "messages" in k or "arguments" in k
        for op in ops
        if isinstance(op, OpenSpan | CloseSpan)
        for k in op.attrs
    )
    assert m.open_spans() == 0


def test_content_is_captured_only_when_asked_and_capped() -> None:
    m = SpanMapper(capture_content=True)
    long = "x" * (MAX_CONTENT + 50)
    ops = play(
        m,
        user_row("what is 2+2?"),
        started(),
        chunk(ToolCall(call_id="c1", name="calc", input={"expr": "2+2"})),
        chunk(ToolResult(call_id="c1", output=long)),
        chunk(TextDelta(text="It is ")),
        chunk(TextDelta(text="4.")),
        ended(),
    )
    turn_open, turn_close = opened(ops)["turn:u1"], closed(ops)["turn:u1"]
    assert json.loads(turn_open.attrs["gen_ai.input.messages"]) == [
        {"role": "user", "parts": [{"type": "text", "content": "what is 2+2?"}]}
    ]
    assert json.loads(turn_close.attrs["gen_ai.output.messages"]) == [
        {
            "role": "assistant",
            "parts": [{"type": "text", "content": "It is 4."}],
            "finish_reason": "stop",
        }
    ]
    assert json.loads(opened(ops)["tool:u1:c1"].attrs["gen_ai.tool.call.arguments"]) == {
        "expr": "2+2"
    }
    result = closed(ops)["tool:u1:c1"].attrs["gen_ai.tool.call.result"]
    assert len(result) == MAX_CONTENT + 1 and result.endswith("…")


def test_a_queued_rows_text_is_the_prompt_of_the_turn_it_starts() -> None:
    m = SpanMapper(capture_content=True)
    ops = play(
        m,
        user_row("first"),
        started("u1"),
        user_row("second, queued", status="queued", position=2, row_id="r2"),
        ended("u1"),
        RowUpdated(topic_id=T, seq=5, row_id="r2", status="success", turn_id="u2"),
        started("u2"),
        ended("u2"),
    )
    assert [e.name for e in ops if isinstance(e, SpanEvent)] == ["hostd.queue"]
    second = opened(ops)["turn:u2"]
    assert (
        json.loads(second.attrs["gen_ai.input.messages"])[0]["parts"][0]["content"]
        == "second, queued"
    )


def test_steer_roll_approvals_compaction_and_retries_are_span_events() -> None:
    m = SpanMapper()
    approval = ApprovalInfo(id="ap1", topic_id=T, turn_id="u1", tool="Bash")
    ops = play(
        m,
        started(),
        ModelCallStart(turn_id="u1", call_id="m1"),
        ApiRetry(turn_id="u1", attempt=1, max_retries=3, error_status=529),
        user_row("shorter please", status="queued", position=STEER_POSITION + 1, row_id="s1"),
        SteerInjected(turn_id="u1", steer_id="s1"),
        Rolled(
            topic_id=T,
            seq=4,
            turn_id="u1",
            closed_row_id="a1",
            steer_row_ids=["s1"],
            new_row_id="a2",
        ),
        ApprovalRequested(topic_id=T, seq=5, approval=approval),
        ApprovalResolved(
            topic_id=T, seq=6, approval_id="ap1", status="allowed", answered_by="window-2"
        ),
        CompactionStart(turn_id="u1", trigger="auto"),
        CompactionComplete(turn_id="u1"),
        ModelCallEnd(turn_id="u1", call_id="m1", finish_reason="end_turn"),
        ended(),
    )
    events = [(e.name, e.attrs) for e in ops if isinstance(e, SpanEvent)]
    assert [n for n, _ in events] == [
        "hostd.api_retry",
        "hostd.steer",
        "hostd.steer.injected",
        "hostd.roll",
        "hostd.approval.requested",
        "hostd.approval.resolved",
        "hostd.compaction.start",
        "hostd.compaction.complete",
    ]
    assert all(e.key == "turn:u1" for e in ops if isinstance(e, SpanEvent))
    assert events[0][1] == {
        "hostd.attempt": 1,
        "hostd.max_retries": 3,
        "http.response.status_code": 529,
    }
    assert events[5][1] == {
        "hostd.approval.id": "ap1",
        "hostd.approval.status": "allowed",
        "hostd.approval.answered_by": "window-2",
    }
    assert closed(ops)["chat:u1:m1"].attrs["hostd.api_retries"] == 1


def test_a_tool_tried_again_after_failing_counts_its_retries() -> None:
    m = SpanMapper()
    ops = play(
        m,
        started(),
        chunk(ToolCall(call_id="c1", name="Bash")),
        chunk(ToolResult(call_id="c1", output="exit 1", is_error=True)),
        chunk(ToolCall(call_id="c2", name="Bash")),
        chunk(ToolResult(call_id="c2", output="exit 1", is_error=True)),
        chunk(ToolCall(call_id="c3", name="Bash")),
        chunk(ToolResult(call_id="c3", output="ok")),
        chunk(ToolCall(call_id="c4", name="Bash")),
        ended(),
    )
    spans = opened(ops)
    assert [spans[f"tool:u1:c{i}"].attrs["hostd.tool.retries"] for i in (1, 2, 3, 4)] == [
        0,
        1,
        2,
        0,
    ]
    ends = closed(ops)
    assert ends["tool:u1:c1"].error == "exit 1"
    assert ends["tool:u1:c1"].attrs == {"hostd.tool.status": "error"}
    assert ends["tool:u1:c3"].error is None


def test_a_failed_turn_closes_what_is_open_as_failed() -> None:
    m = SpanMapper()
    ops = play(
        m,
        started(),
        ModelCallStart(turn_id="u1", call_id="m1"),
        chunk(ToolCall(call_id="c1", name="Read")),
        ended(status="error", error="driver crashed", code="driver_crashed"),
    )
    ends = closed(ops)
    assert set(ends) == {"chat:u1:m1", "tool:u1:c1", "turn:u1"}
    assert {c.error for c in ends.values()} == {"driver crashed"}
    assert ends["turn:u1"].attrs["error.type"] == "driver_crashed"
    assert ends["turn:u1"].attrs["gen_ai.response.finish_reasons"] == ["error"]
    assert ends["tool:u1:c1"].attrs == {"hostd.tool.status": "error"}
    # Children close before their parent.
    keys = [op.key for op in ops if isinstance(op, CloseSpan)]
    assert keys[-1] == "turn:u1"


def test_a_stopped_turn_is_not_an_error_and_a_deleted_topic_ends_its_turn() -> None:
    m = SpanMapper()
    ops = play(m, started(), ended(status="stopped"))
    assert closed(ops)["turn:u1"].error is None
    assert closed(ops)["turn:u1"].attrs["gen_ai.response.finish_reasons"] == ["cancelled"]
    ops = play(m, started("u2"), TopicDeleted(topic_id=T, seq=3))
    assert "turn:u2" in closed(ops) and m.open_spans() == 0


def test_events_of_turns_not_traced_produce_nothing() -> None:
    m = SpanMapper()
    assert (
        play(
            m,
            chunk(TextDelta(text="stray")),
            ModelCallStart(turn_id="nope", call_id="m1"),
            ModelCallEnd(turn_id="nope", call_id="m1"),
            ended("nope"),
            Rolled(
                topic_id=T, seq=4, turn_id="x", closed_row_id="a", steer_row_ids=[], new_row_id="b"
            ),
        )
        == []
    )


# --- every span opened is closed once, whatever the order -----------------------------------------

_STEPS = st.sampled_from(
    [
        "start",
        "end",
        "end-error",
        "delete",
        "model-start",
        "model-end",
        "tool-call",
        "tool-result",
        "text",
        "retry",
        "steer",
    ]
)


def _event(step: str, n: int) -> object:
    turn = f"u{n // 4}"
    call = f"m{n % 3}"
    tool = f"c{n % 3}"
    return {
        "start": started(turn),
        "end": ended(turn),
        "end-error": ended(turn, "error", "boom"),
        "delete": TopicDeleted(topic_id=T, seq=n),
        "model-start": ModelCallStart(turn_id=turn, call_id=call),
        "model-end": ModelCallEnd(turn_id=turn, call_id=call),
        "tool-call": chunk(ToolCall(call_id=tool, name="t")),
        "tool-result": chunk(ToolResult(call_id=tool, output="o")),
        "text": chunk(TextDelta(text="t")),
        "retry": ApiRetry(turn_id=turn),
        "steer": user_row("s", status="queued", position=STEER_POSITION),
    }[step]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(_STEPS, st.integers(0, 11)), max_size=40))
def test_every_span_is_opened_once_and_closed_once(steps: list[tuple[str, int]]) -> None:
    m = SpanMapper(capture_content=True)
    ops = play(m, *(_event(s, n) for s, n in steps), TopicDeleted(topic_id=T, seq=99))
    live: set[str] = set()
    for op in ops:
        if isinstance(op, OpenSpan):
            assert op.key not in live, op
            assert op.parent is None or op.parent in live, op
            live.add(op.key)
        elif isinstance(op, CloseSpan):
            assert op.key in live, op
            live.remove(op.key)
            if op.key.startswith("turn:"):  # a turn's span closes after its children
                turn_id = op.key.split(":")[1]
                assert not [k for k in live if k.split(":")[1] == turn_id], op
        else:
            assert op.key in live, op
    assert live == set()
    assert m.open_spans() == 0
