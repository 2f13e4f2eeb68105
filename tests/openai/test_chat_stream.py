"""The sans-IO stream decoder and the pure parts of the driver (options, error classes)."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hostd_openai.chat_client import _error_fields, classify
from hostd_openai.chat_stream import (
    ChatStreamDecoder,
    Finished,
    ReasoningPiece,
    ServerError,
    StreamDecodeError,
    TextPiece,
    UsageReport,
)
from hostd_openai.config import is_allowed, namespaced, parse_options
from hostd_openai.tool_runner import clip, parse_arguments
from hostd_protocol.errors import InvalidArgument


def event(delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any) -> bytes:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    return b"data: " + json.dumps({"choices": choices, **extra}).encode() + b"\n\n"


STREAM = b"".join(
    [
        b": keep-alive comment\n\n",
        event({"role": "assistant", "reasoning_content": "hmm"}),
        event({"content": "Hel"}),
        event({"content": "lo"}),
        event(
            {
                "tool_calls": [
                    {"index": 0, "id": "c0", "function": {"name": "a__x", "arguments": '{"k"'}},
                    {"index": 1, "id": "c1", "function": {"name": "b__y", "arguments": ""}},
                ]
            }
        ),
        event({"tool_calls": [{"index": 1, "function": {"arguments": "{}"}}]}),
        event({"tool_calls": [{"index": 0, "function": {"arguments": ': "v"}'}}]}),
        event({}, finish="tool_calls"),
        event(None, usage={"prompt_tokens": 9, "completion_tokens": 4}),
        b"data: [DONE]\n\n",
        b"data: ignored after done\n\n",
    ]
)
EXPECTED = [
    ReasoningPiece("hmm"),
    TextPiece("Hel"),
    TextPiece("lo"),
    Finished("tool_calls"),
    UsageReport(input_tokens=9, output_tokens=4, cached_tokens=0),
]


def decode(pieces: list[bytes]) -> tuple[list[Any], ChatStreamDecoder]:
    decoder = ChatStreamDecoder()
    items: list[Any] = []
    for piece in pieces:
        items.extend(decoder.feed(piece))
    items.extend(decoder.close())
    return items, decoder


def test_whole_stream() -> None:
    items, decoder = decode([STREAM])
    assert items == EXPECTED
    assert decoder.done
    calls = decoder.tool_calls()
    assert [(c.call_id, c.name, c.arguments) for c in calls] == [
        ("c0", "a__x", '{"k": "v"}'),
        ("c1", "b__y", "{}"),
    ]


def test_one_byte_at_a_time() -> None:
    items, decoder = decode([STREAM[i : i + 1] for i in range(len(STREAM))])
    assert items == EXPECTED
    assert len(decoder.tool_calls()) == 2


@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=12))
def test_any_split(cuts: list[int]) -> None:
    bounds = [0, *sorted(cuts), len(STREAM)]
    items, _ = decode([STREAM[a:b] for a, b in itertools.pairwise(bounds)])
    assert items == EXPECTED


def test_crlf_and_cr_line_ends() -> None:
    for sep in (b"\r\n", b"\r"):
        data = event({"content": "x"}).replace(b"\n", sep)
        items, _ = decode([data[i : i + 1] for i in range(len(data))])
        assert items == [TextPiece("x")]


def test_calls_without_index_are_told_apart_by_id() -> None:
    data = event(
        {"tool_calls": [{"id": "a", "function": {"name": "s__one", "arguments": "{}"}}]}
    ) + event({"tool_calls": [{"id": "b", "function": {"name": "s__two", "arguments": "{}"}}]})
    _, decoder = decode([data])
    assert [(c.call_id, c.name) for c in decoder.tool_calls()] == [("a", "s__one"), ("b", "s__two")]


def test_ollama_reasoning_field_and_an_error_event() -> None:
    data = event({"reasoning": "think"}) + b'data: {"error": {"message": "overloaded"}}\n\n'
    items, _ = decode([data])
    assert items == [ReasoningPiece("think"), ServerError("overloaded")]


def test_garbage_raises() -> None:
    with pytest.raises(StreamDecodeError, match=r"^a stream event is not a chunk"):
        ChatStreamDecoder().feed(b"data: {nope\n\n")


def test_a_cut_stream_is_not_done() -> None:
    _, decoder = decode([event({"content": "partial"})])
    assert not decoder.done


@pytest.mark.parametrize(
    ("status", "body", "kind"),
    [
        (401, '{"error": {"message": "bad key"}}', "auth"),
        (429, "{}", "rate_limit"),
        (503, "busy", "server"),
        (400, '{"error": {"message": "x", "code": "context_length_exceeded"}}', "overflow"),
        (400, '{"error": "prompt is too long: 9000 tokens"}', "overflow"),
        (404, '{"error": {"message": "model \\"q\\" not found, try pulling it"}}', "unknown_model"),
        (400, '{"error": {"message": "bad temperature"}}', "bad_request"),
    ],
)
def test_error_classes(status: int, body: str, kind: str) -> None:
    message, code = _error_fields(body.encode())
    assert classify(status, message, code) == kind


def test_options() -> None:
    opts, unknown = parse_options({"base_url": "http://127.0.0.1:1/v1", "colour": "red"})
    assert unknown == ["colour"] and opts.api_key_env == "OPENAI_API_KEY"
    with pytest.raises(InvalidArgument, match=r"^invalid openai option: base_url must start"):
        parse_options({"base_url": "ftp://x"})
    with pytest.raises(InvalidArgument, match=r"needs exactly one of 'command'"):
        parse_options({"mcp_servers": {"s": {}}})
    with pytest.raises(InvalidArgument, match=r"mcp server name 'a.b' must be"):
        parse_options({"mcp_servers": {"a.b": {"command": "x"}}})
    with pytest.raises(InvalidArgument, match=r"^invalid openai option: Expected `int`"):
        parse_options({"max_steps": "many"})


def test_names_and_patterns() -> None:
    assert namespaced("time", "get_current_time") == "time__get_current_time"
    assert namespaced("time", "has space") is None
    assert is_allowed("time__now", ["time__*"]) and not is_allowed("fs__rm", ["time__*"])
    assert parse_arguments("") == ({}, "")
    assert parse_arguments("[1]") == (None, "the arguments must be a JSON object")
    assert clip("abc", 5) == "abc"
    assert clip("abcdef", 2).startswith("ab\n[... tool result cut: 4 more")
