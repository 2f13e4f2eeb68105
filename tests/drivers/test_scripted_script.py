"""The scripted driver's directive language (sans-IO)."""

from __future__ import annotations

import time

import pytest

from hostd_scripted.driver import bench_text, split_words, words_text
from hostd_scripted.script import SCENARIOS, Script, ScriptError, Step, parse, resolve


def test_plain_text_is_not_a_script() -> None:
    assert parse("hello there\nhow are you") is None


def test_directives_and_prompt() -> None:
    script = parse("what is up?\n/chunks 50 size=8 rate=200\n/crash")
    assert script == Script(
        (Step("chunks", ("50",), {"size": "8", "rate": "200"}), Step("crash")),
        "what is up?",
    )


def test_free_text_directives_keep_their_text() -> None:
    script = parse("/text a=b  c 'd'\n/error it broke: badly")
    assert script is not None
    assert script.steps[0] == Step("text", ("a=b  c 'd'",))
    assert script.steps[1].rest() == "it broke: badly"


def test_double_slash_escapes_a_directive() -> None:
    assert parse("//not a directive") is None


def test_unknown_directive_is_a_clear_error() -> None:
    with pytest.raises(ScriptError, match=r"^unknown directive /frobnicate \(known: "):
        parse("/frobnicate")


def test_too_many_arguments() -> None:
    with pytest.raises(ScriptError, match=r"^/crash takes at most 1 argument\(s\), got 2$"):
        parse("/crash 1 2")


def test_bad_number() -> None:
    script = parse("/chunks many")
    assert script is not None
    with pytest.raises(ScriptError, match=r"^/chunks: n must be a number, got 'many'$"):
        script.steps[0].num("n", 1, pos=0)


def test_scenario_directive_expands() -> None:
    script = parse("/scenario tool")
    assert script is not None
    assert [s.op for s in script.steps] == ["text", "tool", "text"]


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_builtin_scenario_parses(name: str) -> None:
    assert parse(SCENARIOS[name]) is not None


def test_resolution_order() -> None:
    # Directives in the text win, then Send.options, then Init.options, then default.
    assert resolve("/crash", {"scenario": "tool"}, {"scenario": "think"}).steps == (Step("crash"),)
    assert [s.op for s in resolve("hi", {"scenario": "echo"}, {"scenario": "think"}).steps] == [
        "echo"
    ]
    assert [s.op for s in resolve("hi", {}, {"scenario": "think"}).steps] == ["think", "text"]
    default = resolve("hi", {}, {})
    assert "tool" in [s.op for s in default.steps]
    assert default.prompt == "hi"


def test_scenario_option_may_be_a_script() -> None:
    assert resolve("hi", {}, {"scenario": "/whoami"}).steps == (Step("whoami"),)


def test_bench_options_pick_bench() -> None:
    assert resolve("go", {}, {"bench_chunks": 10}).steps == (Step("bench"),)


def test_unknown_scenario() -> None:
    with pytest.raises(ScriptError, match=r"^unknown scenario 'nope' \(known: "):
        resolve("hi", {"scenario": "nope"}, {})


def test_text_generators_are_deterministic() -> None:
    assert words_text(40) == words_text(40)
    assert len(words_text(40)) == 40
    text = "one two three four five six seven"
    assert "".join(split_words(text)) == text


def test_bench_text_carries_a_monotonic_stamp() -> None:
    before = time.monotonic_ns()
    text = bench_text(64)
    stamp = int(text.split(":", 1)[0])
    assert len(text) == 64
    assert before <= stamp <= time.monotonic_ns()
