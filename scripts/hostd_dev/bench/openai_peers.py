"""The OpenAI driver's peers for `scripts/bench openai-loop`: openai-agents and pydantic-ai,
each as a small agent loop with one stdio MCP server, as their docs show it.

They speak the line protocol of tests/openai/bare_openai_loop.py (the bare SDK loop), so the
bench drives all loops alike:

    python -m hostd_dev.bench.openai_peers {openai-agents|pydantic-ai} BASE_URL MODEL STATE

run from the repository root (the MCP server is `tests.fakes.mcp_test_server`). Commands on
stdin: `new TEXT` (a new conversation), `next TEXT` (one more turn of it), `rss`; answers:
`ready` once set up, `first` at a turn's first text chunk, `done` at its end, `rss <MiB>`.

Set up as a careful user would: the openai SDK's retries off (as in the bare loop), tracing
off (openai-agents would export to OpenAI's servers), the MCP tool list cached (openai-agents
lists the tools again before every model call otherwise), one `models.list()` before
`ready` to open the kept-alive connection as the other loops' prewarm does. The MCP tools
keep their own names (`echo`), no prefix. Bench only: the packages are dev dependencies of
hostd-dev (scripts/pyproject.toml), never of hostd.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

#: A turn: (text, is_new_conversation, say_first) -> None.
Turn = Callable[[str, bool, Callable[[], None]], Awaitable[None]]


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _server_args(state: str) -> tuple[str, list[str]]:
    return sys.executable, ["-m", "tests.fakes.mcp_test_server", "--state", state]


async def _serve(turn: Turn) -> None:
    """Read commands from stdin until it closes; run each turn, reporting on stdout."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    out = sys.stdout
    out.write("ready\n")
    out.flush()
    while line := (await reader.readline()).decode():
        cmd, _, arg = line.rstrip("\n").partition(" ")
        if cmd == "rss":
            out.write(f"rss {rss_mib():.1f}\n")
            out.flush()
            continue
        said = False

        def first() -> None:
            nonlocal said
            if not said:
                said = True
                out.write("first\n")
                out.flush()

        await turn(arg, cmd == "new", first)
        out.write("done\n")
        out.flush()


async def openai_agents(base_url: str, model: str, state: str) -> None:
    from agents import Agent, OpenAIChatCompletionsModel, Runner, set_tracing_disabled
    from agents.mcp import MCPServerStdio
    from openai import AsyncOpenAI
    from openai.types.responses import ResponseTextDeltaEvent

    set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0)
    command, args = _server_args(state)
    server = MCPServerStdio(
        {"command": command, "args": args, "cwd": os.getcwd()}, cache_tools_list=True, name="t"
    )
    async with server:
        agent = Agent(
            name="bench",
            model=OpenAIChatCompletionsModel(model=model, openai_client=client),
            mcp_servers=[server],
        )
        await server.list_tools()
        await client.models.list()
        history: list[Any] = []

        async def turn(text: str, new: bool, first: Callable[[], None]) -> None:
            nonlocal history
            if new:
                history = []
            result = Runner.run_streamed(agent, [*history, {"role": "user", "content": text}])
            async for event in result.stream_events():
                if event.type == "raw_response_event" and isinstance(
                    event.data, ResponseTextDeltaEvent
                ):
                    first()
            history = result.to_input_list()

        await _serve(turn)


async def pydantic_ai(base_url: str, model: str, state: str) -> None:
    from fastmcp.client.transports import StdioTransport
    from openai import AsyncOpenAI
    from pydantic_ai import Agent
    from pydantic_ai.mcp import MCPToolset
    from pydantic_ai.messages import (
        AgentStreamEvent,
        PartDeltaEvent,
        PartStartEvent,
        TextPart,
        TextPartDelta,
    )
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider
    from pydantic_ai.run import AgentRunResultEvent

    client = AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0)
    command, args = _server_args(state)
    toolset = MCPToolset(StdioTransport(command=command, args=args, cwd=os.getcwd()))
    agent = Agent(
        OpenAIChatModel(model, provider=OpenAIProvider(openai_client=client)),
        toolsets=[toolset],
    )
    async with agent:  # connects the MCP server once, for every run
        await client.models.list()
        history: list[Any] | None = None

        def is_text(event: AgentStreamEvent | AgentRunResultEvent[Any]) -> bool:
            if isinstance(event, PartStartEvent):
                return isinstance(event.part, TextPart) and bool(event.part.content)
            return isinstance(event, PartDeltaEvent) and isinstance(event.delta, TextPartDelta)

        async def turn(text: str, new: bool, first: Callable[[], None]) -> None:
            nonlocal history
            if new:
                history = None
            async with agent.run_stream_events(text, message_history=history) as events:
                async for event in events:
                    if is_text(event):
                        first()
                    elif isinstance(event, AgentRunResultEvent):
                        history = event.result.all_messages()

        await _serve(turn)


PEERS: dict[str, Callable[[str, str, str], Coroutine[Any, Any, None]]] = {
    "openai-agents": openai_agents,
    "pydantic-ai": pydantic_ai,
}


def main() -> None:
    name, base_url, model, state = sys.argv[1:5]
    asyncio.run(PEERS[name](base_url, model, state))


if __name__ == "__main__":
    main()
