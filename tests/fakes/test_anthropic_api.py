"""Self-tests of the fake Messages API (stdlib HTTP client, no Claude CLI needed)."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from typing import Any

import pytest
import trio

from tests.fakes.anthropic_api import (
    FakeAnthropicAPI,
    Rule,
    compact_summary,
    hang,
    has_tool_result,
    last_user_text,
    overloaded,
    prompt_too_long,
    system_reminders_after_tool_result,
    text,
    thinking,
    tool_use,
    user_says,
)

TOOLS = [{"name": "Bash", "input_schema": {"type": "object"}}]


def post(
    api: FakeAnthropicAPI, path: str, body: dict[str, Any], headers: dict[str, str] | None = None
) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", api.port, timeout=10)
    try:
        conn.request(
            "POST",
            path,
            body=json.dumps(body),
            headers={"content-type": "application/json", **(headers or {})},
        )
        resp = conn.getresponse()
        return resp.status, resp.read().decode()
    finally:
        conn.close()


def sse(raw: str) -> list[dict[str, Any]]:
    events = []
    for chunk in raw.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in chunk.splitlines())
        data = json.loads(lines["data"])
        assert data["type"] == lines["event"]
        events.append(data)
    return events


def user(*blocks: Any) -> dict[str, Any]:
    return {"role": "user", "content": list(blocks)}


def tb(t: str) -> dict[str, str]:
    return {"type": "text", "text": t}


def req(*messages: dict[str, Any], tools: bool = True, stream: bool = True) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "claude-x", "stream": stream, "messages": list(messages)}
    if tools:
        body["tools"] = TOOLS
    return body


def test_text_stream_event_sequence() -> None:
    with FakeAnthropicAPI([Rule(user_says("hi"), text("Hello world!", chunks=3))]) as api:
        status, raw = post(
            api,
            "/v1/messages?beta=true",
            req(user(tb("<system-reminder>ctx</system-reminder>"), tb("hi"))),
            {"x-api-key": "secret-value", "anthropic-version": "2023-06-01"},
        )
    assert status == 200
    ev = sse(raw)
    assert [e["type"] for e in ev] == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert "".join(e["delta"]["text"] for e in ev if e["type"] == "content_block_delta") == (
        "Hello world!"
    )
    assert ev[0]["message"]["model"] == "claude-x"
    assert ev[-2]["delta"]["stop_reason"] == "end_turn"
    assert set(ev[-2]["usage"]) >= {"input_tokens", "output_tokens"}
    (r,) = api.requests
    assert r.path == "/v1/messages" and r.query == "beta=true"
    assert r.last_user_text == "hi" and r.reply_kind == "text" and r.finished
    assert "x-api-key" not in r.headers and r.headers["anthropic-version"] == "2023-06-01"
    assert "secret-value" not in json.dumps(r.headers)


def test_tool_use_and_never_without_tools() -> None:
    rules = [Rule(user_says("run"), tool_use("Bash", {"command": "echo hi"}))]
    with FakeAnthropicAPI(rules) as api:
        _, raw = post(api, "/v1/messages", req(user(tb("run"))))
        _, raw_no_tools = post(api, "/v1/messages", req(user(tb("run")), tools=False))
    ev = sse(raw)
    assert ev[1]["content_block"]["type"] == "tool_use"
    assert ev[1]["content_block"]["name"] == "Bash"
    js = "".join(e["delta"]["partial_json"] for e in ev if e["type"] == "content_block_delta")
    assert json.loads(js) == {"command": "echo hi"}
    assert ev[-2]["delta"]["stop_reason"] == "tool_use"
    assert all(e.get("content_block", {}).get("type") != "tool_use" for e in sse(raw_no_tools))
    assert api.requests[1].tool_use_suppressed


def test_thinking_and_json_mode() -> None:
    with FakeAnthropicAPI([Rule(user_says("t"), thinking("hmm", "answer"))]) as api:
        _, raw = post(api, "/v1/messages", req(user(tb("t"))))
        _, js = post(api, "/v1/messages", req(user(tb("t")), stream=False))
    deltas = [e["delta"]["type"] for e in sse(raw) if e["type"] == "content_block_delta"]
    assert "thinking_delta" in deltas and "signature_delta" in deltas and "text_delta" in deltas
    msg = json.loads(js)
    assert [b["type"] for b in msg["content"]] == ["thinking", "text"]


def test_errors_count_tokens_and_404() -> None:
    rules = [Rule(user_says("busy"), overloaded()), Rule(user_says("big"), prompt_too_long())]
    with FakeAnthropicAPI(rules) as api:
        s1, b1 = post(api, "/v1/messages", req(user(tb("busy"))))
        s2, b2 = post(api, "/v1/messages", req(user(tb("big"))))
        s3, b3 = post(api, "/v1/messages/count_tokens?beta=true", req(user(tb("x"))))
        s4, b4 = post(api, "/v1/other", {})
    assert s1 == 529 and json.loads(b1)["error"]["type"] == "overloaded_error"
    assert s2 == 400 and "prompt is too long" in json.loads(b2)["error"]["message"]
    assert s3 == 200 and json.loads(b3)["input_tokens"] > 0
    assert s4 == 404 and json.loads(b4)["type"] == "error"


def test_rule_order_times_default_and_summary() -> None:
    rules = [
        Rule(user_says("a"), text("first"), times=1),
        (has_tool_result, text("after tool")),
    ]
    with FakeAnthropicAPI(rules) as api:
        texts = []
        for body in (
            req(user(tb("a"))),
            req(user(tb("a"))),
            req(
                user(tb("a")),
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "t1", "name": "Bash"}],
                },
                user({"type": "tool_result", "tool_use_id": "t1", "content": "hi"}),
            ),
            req(user(tb("Your task is to create a detailed summary of the conversation so far"))),
        ):
            _, raw = post(api, "/v1/messages", body)
            texts.append(
                "".join(
                    e["delta"].get("text", "")
                    for e in sse(raw)
                    if e["type"] == "content_block_delta"
                )
            )
    assert texts[:3] == ["first", "OK.", "after tool"]
    assert texts[3].startswith("<analysis>") and "<summary>" in texts[3]
    assert api.requests[3].is_summary_request
    assert compact_summary("x").text.endswith("</summary>")


def test_reminder_helpers_both_forms() -> None:
    tool_turn = [
        user(tb("<system-reminder>r</system-reminder>"), tb("go")),
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Bash"}]},
    ]
    inline = {
        "messages": [
            *tool_turn,
            user(
                {"type": "tool_result", "tool_use_id": "t1", "content": "x"},
                tb(
                    "<system-reminder>\nPreToolUse:Bash hook additional context: S\n</system-reminder>"
                ),
            ),
        ]
    }
    system_role = {
        "messages": [
            *tool_turn,
            user({"type": "tool_result", "tool_use_id": "t1", "content": "x"}),
            {"role": "system", "content": [tb("PreToolUse:Bash hook additional context: S")]},
        ]
    }
    for body in (inline, system_role):
        assert last_user_text(body) == "go"
        rem = system_reminders_after_tool_result(body)
        assert len(rem) == 1 and "additional context: S" in rem[0]


def test_hang_release_and_disconnect() -> None:
    h = hang("wait", " done")
    released = threading.Event()

    def release_once_hung() -> None:
        assert h.wait_started(30)
        released.set()
        h.release()

    with FakeAnthropicAPI([Rule(user_says("h"), h, times=1)]) as api:
        threading.Thread(target=release_once_hung, daemon=True).start()
        _, raw = post(api, "/v1/messages", req(user(tb("h"))))
        assert released.is_set()  # the answer was held until released
        assert "".join(
            e["delta"]["text"] for e in sse(raw) if e["type"] == "content_block_delta"
        ) == ("wait done")

        h2 = hang()
        api.add_rule(user_says("h2"), h2, times=1, first=True)
        sock = socket.create_connection(("127.0.0.1", api.port))
        body = json.dumps(req(user(tb("h2")))).encode()
        sock.sendall(
            b"POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
        )
        assert h2.wait_started(5)
        sock.close()  # the client goes away mid-answer, like an interrupt
        deadline = time.monotonic() + 5
        while not api.requests[-1].client_disconnected and time.monotonic() < deadline:
            time.sleep(0.02)
        assert api.requests[-1].client_disconnected and not api.requests[-1].finished


def test_delay_between_deltas() -> None:
    with FakeAnthropicAPI(default_reply=text("abcd", chunks=4, delay=0.05)) as api:
        _, raw = post(api, "/v1/messages", req(user(tb("x"))))
        assert [e["delta"]["text"] for e in sse(raw) if e["type"] == "content_block_delta"] == list("abcd")
        assert api.requests[-1].pauses == [0.05] * 4  # one pause before each delta


async def test_usable_from_trio() -> None:
    with FakeAnthropicAPI() as api:
        status, raw = await trio.to_thread.run_sync(post, api, "/v1/messages", req(user(tb("x"))))
        got = await trio.to_thread.run_sync(lambda: api.wait_for_requests(1, timeout=5))
    assert status == 200 and len(got) == 1
    assert [e["type"] for e in sse(raw)][-1] == "message_stop"


def test_wait_for_requests_timeout() -> None:
    with FakeAnthropicAPI() as api, pytest.raises(TimeoutError):
        api.wait_for_requests(1, timeout=0.05)
