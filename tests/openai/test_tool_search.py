"""Deferring tools behind `tool_search`: only when it saves tokens, never an approval tool."""

from __future__ import annotations

from pathlib import Path

import trio

from hostd_openai.mcp_tools import CatalogTool
from hostd_openai.tool_search import SEARCH_TOOL, plan, search
from tests.fakes.openai_api import FakeOpenAI, Rule, Text, ToolCalls, user_says
from tests.openai.peer import driver, end_of, time_server, tool_results, tools_server


def tool(name: str, description: str = "does things", size: int = 400) -> CatalogTool:
    server, _, short = name.partition("__")
    params = {"type": "object", "properties": {"x": {"type": "string", "description": "y" * size}}}
    return CatalogTool(
        name=name, server=server, tool=short, description=description, parameters=params
    )


TOOLS = {
    t.name: t
    for t in (
        tool("fs__read", "read a file"),
        tool("fs__write", "write a file"),
        tool("web__fetch", "fetch a web page"),
    )
}


def test_small_catalogs_and_zero_threshold_defer_nothing() -> None:
    assert plan(TOOLS, ["*"], 100_000).deferred == {}
    assert plan(TOOLS, ["*"], 0).deferred == {}


def test_only_tools_that_run_unasked_are_folded() -> None:
    p = plan(TOOLS, ["fs__*"], 10)
    assert set(p.deferred) == {"fs__read", "fs__write"}
    assert set(p.visible) == {"web__fetch"}  # needs approval: never hidden
    names = [s["function"]["name"] for s in p.schemas()]
    assert names == ["web__fetch", SEARCH_TOOL]
    assert "fs__read, fs__write" in p.schemas()[-1]["function"]["description"]


def test_folding_that_saves_nothing_is_not_done() -> None:
    tiny = {"a__b": tool("a__b", "b", size=0)}
    assert plan(tiny, ["*"], 1).deferred == {}


def test_search_ranks_by_words_and_activates() -> None:
    p = plan(TOOLS, ["*"], 10)
    text, found = search("write a file please", p.deferred)
    assert found[0] == "fs__write" and "fs__write" in text
    p.activate(found)
    assert "fs__write" in p.visible and "fs__write" not in p.deferred
    text, found = search("teleport", {"x__y": tool("x__y")})
    assert found == [] and text.startswith("No tool matches 'teleport'")


async def test_the_model_finds_a_deferred_tool_and_calls_it(tmp_path: Path) -> None:
    rules = [
        Rule(user_says("echo it"), ToolCalls([(SEARCH_TOOL, {"query": "echo text"})])),
        Rule(
            lambda r: (
                r.last_role == "tool"
                and "t__echo" in r.tool_names
                and not any("echoed" in t for t in r.tool_results)
            ),
            ToolCalls([("t__echo", {"text": "echoed"})]),
        ),
        Rule(lambda r: r.last_role == "tool", Text("done")),
    ]
    servers = {"t": tools_server(tmp_path / "state"), "time": time_server()}
    with FakeOpenAI(rules) as api, trio.fail_after(40):
        async with driver(
            api.base_url, mcp_servers=servers, allowed_tools=["t__*"], tool_search_over_tokens=50
        ) as (peer, _):
            events = await peer.turn("t1", "echo it")
    assert end_of(events).status == "success"
    first = api.chat_requests[0]
    assert set(first.tool_names) == {"time__get_current_time", "time__convert_time", SEARCH_TOOL}
    assert "t__echo" in api.chat_requests[1].tool_names
    assert [r.output for r in tool_results(events)][-1] == "echoed"
