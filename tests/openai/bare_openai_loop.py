"""The yardstick for the OpenAI driver: a bare `openai` SDK agent loop with one MCP server.

What a careful hand-written loop does, and nothing more: `AsyncOpenAI` (retries off), the MCP
server connected once and its tools listed once, tool calls run concurrently, results sent
back in one request. Runs on asyncio, the SDK's usual home.

    python -m tests.openai.bare_openai_loop BASE_URL MODEL MCP_STATE_DIR

Commands on stdin, one per line; answers on stdout:
- `new TEXT`: a new conversation with TEXT; `next TEXT`: the same conversation, one more turn.
  Prints `first` at the first text chunk, then `done` at the end of the turn.
- `rss`: prints `rss <MiB>` (VmRSS of this process).
Prints `ready` once the client and the MCP server are set up (and one request has warmed
the SDK and its connection, as the driver's prewarm does).
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

REPO = str(Path(__file__).resolve().parents[2])


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def main() -> None:
    from mcp import ClientSession, StdioServerParameters, stdio_client
    from openai import AsyncOpenAI

    base_url, model, state = sys.argv[1], sys.argv[2], sys.argv[3]
    client = AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0)
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "tests.fakes.mcp_test_server", "--state", state],
        cwd=REPO,
    )
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    out = sys.stdout

    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        listed = await session.list_tools()
        tools: list[Any] = [
            {
                "type": "function",
                "function": {
                    "name": f"t__{t.name}",
                    "description": t.description or "",
                    "parameters": t.input_schema,
                },
            }
            for t in listed.tools
        ]
        # Prewarm like the driver does: the SDK's lazy imports and a kept-alive connection.
        await client.models.list()
        out.write("ready\n")
        out.flush()
        messages: list[dict[str, Any]] = []

        async def call(tc: Any) -> dict[str, Any]:
            name = tc.function.name.removeprefix("t__")
            result = await session.call_tool(name, json.loads(tc.function.arguments or "{}"))
            text = "".join(getattr(b, "text", "") for b in result.content)
            return {"role": "tool", "tool_call_id": tc.id, "content": text}

        while line := (await reader.readline()).decode():
            cmd, _, arg = line.rstrip("\n").partition(" ")
            if cmd == "rss":
                out.write(f"rss {rss_mib():.1f}\n")
                out.flush()
                continue
            if cmd == "new":
                messages = []
            messages.append({"role": "user", "content": arg})
            first = False
            while True:
                stream = await client.chat.completions.create(
                    model=model,
                    messages=messages,  # type: ignore[arg-type]
                    tools=tools,
                    stream=True,
                    stream_options={"include_usage": True},
                )
                text: list[str] = []
                calls: dict[int, Any] = {}
                async for chunk in stream:
                    if not chunk.choices:
                        continue
                    delta = chunk.choices[0].delta
                    if delta.content:
                        if not first:
                            first = True
                            out.write("first\n")
                            out.flush()
                        text.append(delta.content)
                    for tc in delta.tool_calls or ():
                        if tc.index not in calls:
                            calls[tc.index] = tc
                            tc.function.arguments = tc.function.arguments or ""
                        else:
                            calls[tc.index].function.arguments += tc.function.arguments or ""
                assistant: dict[str, Any] = {"role": "assistant", "content": "".join(text)}
                if calls:
                    ordered = [calls[i] for i in sorted(calls)]
                    assistant["tool_calls"] = [
                        {
                            "id": c.id,
                            "type": "function",
                            "function": {
                                "name": c.function.name,
                                "arguments": c.function.arguments,
                            },
                        }
                        for c in ordered
                    ]
                    messages.append(assistant)
                    messages.extend(await asyncio.gather(*(call(c) for c in ordered)))
                    continue
                messages.append(assistant)
                break
            out.write("done\n")
            out.flush()


if __name__ == "__main__":
    asyncio.run(main())
