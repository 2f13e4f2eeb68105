"""The host's history as Chat Completions messages (`hostd_openai.history`), without I/O."""

from __future__ import annotations

from hostd_openai.history import history_messages
from hostd_protocol.common import HistoryMessage, TextDelta, ToolCall, ToolResult


def answer(*parts: object, text: str = "") -> HistoryMessage:
    return HistoryMessage(role="assistant", text=text, parts=list(parts))  # type: ignore[arg-type]


def call(call_id: str, name: str = "t__echo", **args: object) -> ToolCall:
    return ToolCall(call_id=call_id, name=name, input=dict(args))


def result(call_id: str, output: str) -> ToolResult:
    return ToolResult(call_id=call_id, output=output)


def assistant_calls(content: str | None, *ids: str) -> dict[str, object]:
    return {
        "role": "assistant",
        "content": content,
        "tool_calls": [
            {"id": i, "type": "function", "function": {"name": "t__echo", "arguments": "{}"}}
            for i in ids
        ],
    }


def tool(call_id: str, content: str) -> dict[str, object]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def test_steps_of_an_answer_in_order_each_once() -> None:
    history = [
        HistoryMessage(role="user", text="go"),
        answer(
            TextDelta(text="Looking. "),
            call("a"),
            call("b"),
            result("b", "B"),
            result("a", "A"),
            TextDelta(text="Then "),
            call("c"),
            result("c", "C"),
            TextDelta(text="done."),
            text="Looking. Then done.",
        ),
        HistoryMessage(role="user", text="next"),
    ]
    assert history_messages(history) == [
        {"role": "user", "content": "go"},
        assistant_calls("Looking. ", "a", "b"),
        tool("a", "A"),  # in the order of the calls, whatever order the results came in
        tool("b", "B"),
        assistant_calls("Then ", "c"),
        tool("c", "C"),
        {"role": "assistant", "content": "done."},
        {"role": "user", "content": "next"},
    ]


def test_a_call_without_its_result_is_left_out() -> None:
    # Stopped while the second call ran: the API refuses a call without a result.
    history = [answer(call("a"), call("b"), result("a", "A"))]
    assert history_messages(history) == [assistant_calls(None, "a"), tool("a", "A")]
    assert history_messages([answer(call("a"))]) == []


def test_old_style_retry_attempts_fold_into_the_call() -> None:
    history = [
        answer(
            call("a"),
            ToolResult(call_id="a", output="attempt 1 failed: gone; retrying", is_error=True),
            call("a#2"),
            result("a#2", "worked"),
            TextDelta(text="ok"),
        )
    ]
    assert history_messages(history) == [
        assistant_calls(None, "a"),
        tool("a", "worked"),
        {"role": "assistant", "content": "ok"},
    ]


def test_an_id_with_a_hash_of_its_own_is_kept() -> None:
    assert history_messages([answer(call("x#1"), result("x#1", "R"))]) == [
        assistant_calls(None, "x#1"),
        tool("x#1", "R"),
    ]


def test_arguments_are_json() -> None:
    (first, _) = history_messages([answer(call("a", text="hi"), result("a", "hi"))])
    assert first["tool_calls"][0]["function"]["arguments"] == '{"text": "hi"}'
