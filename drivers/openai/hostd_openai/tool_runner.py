"""Running the tool calls of one model response: approvals, bounded retries, visible attempts.

Rules this module guards (the seed's tool step):

- Every call of a response is announced (`ToolCall` chunk) in the model's order before any
  runs; then they run concurrently, each ending with exactly one `ToolResult` for its id.
- A tool not in this turn's catalog, arguments that are not a JSON object, and a denied
  approval are final: no call is made, the error goes to the model as the tool result.
- A call needs the user's approval (through the host: any window may answer) unless its
  namespaced name matches `allowed_tools`. One approval covers the call's retries.
- A retryable failure (transport, timeout, server restart: `mcp_tools.ToolFailure`) is tried
  again at most `tool_retries` times, with a short backoff. A retried call stays the one call
  the model made: one `ToolCall`, one `ToolResult` (its id, the last attempt's result, with
  `attempts`), and a `tool_retry` notice per failed attempt saying what failed. No id is
  invented. The model gets the last result, errors included.
- Image blocks of a result go to a model that takes images (`vision`) as image parts: the
  Chat Completions API allows only text in a `tool` message, so they follow the step's tool
  messages in one user message naming their call; other models read a text placeholder.
- A result longer than `max_tool_result_chars` is cut, with a note the model can read.
- Stop cancels the running calls (the enclosing cancel scope); nothing is retried then.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import trio

from hostd_openai.chat_stream import AssembledToolCall
from hostd_openai.config import OpenAIOptions, is_allowed
from hostd_openai.mcp_tools import CatalogSnapshot, McpServer, ToolFailure, ToolOutput
from hostd_openai.tool_search import SEARCH_TOOL, ToolPlan, search
from hostd_protocol.common import ToolCall, ToolResult
from hostd_protocol.driver_harness import TurnContext
from hostd_protocol.driver_messages import Notice


@dataclass
class ToolRun:
    """One tool call of a response and what the model will read back."""

    call: AssembledToolCall
    arguments: dict[str, Any] | None
    argument_error: str = ""
    output: str = ""
    is_error: bool = False
    attempts: int = 0
    #: (mime type, base64 data) of the result's images (`ToolOutput.images`).
    images: list[tuple[str, str]] = field(default_factory=list)


def parse_arguments(raw: str) -> tuple[dict[str, Any] | None, str]:
    """The call's arguments as a JSON object, or (None, why not)."""
    if not raw.strip():
        return {}, ""
    try:
        value = json.loads(raw)
    except ValueError as exc:
        return None, f"the arguments are not valid JSON ({exc})"
    if not isinstance(value, dict):
        return None, "the arguments must be a JSON object"
    return value, ""


def clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[... tool result cut: {len(text) - limit} more characters not shown]"


class ToolRunner:
    """Runs the tool calls of one response for one turn."""

    def __init__(
        self,
        turn: TurnContext,
        opts: OpenAIOptions,
        snapshot: CatalogSnapshot,
        plan: ToolPlan | None = None,
    ) -> None:
        self._turn = turn
        self._opts = opts
        self._snapshot = snapshot
        self._plan = plan

    async def run_all(self, calls: list[AssembledToolCall]) -> list[ToolRun]:
        runs = []
        for call in calls:
            arguments, error = parse_arguments(call.arguments)
            runs.append(ToolRun(call=call, arguments=arguments, argument_error=error))
            await self._turn.chunk(
                ToolCall(call_id=call.call_id, name=call.name, input=arguments or {})
            )
        async with trio.open_nursery() as nursery:
            for run in runs:
                nursery.start_soon(self._run, run)
        return runs

    async def _run(self, run: ToolRun) -> None:
        call = run.call
        if call.name == SEARCH_TOOL and self._plan is not None and run.arguments is not None:
            # Runs nothing: it only makes deferred tools callable, so it needs no approval.
            text, found = search(str(run.arguments.get("query", "")), self._plan.deferred)
            self._plan.activate(found)
            await self._finish(run, text, False)
            return
        tool = self._snapshot.tools.get(call.name)
        if tool is None:
            known = ", ".join(sorted(self._snapshot.tools)) or "none"
            await self._finish(
                run,
                f"Error: unknown tool {call.name!r}. Available tools: {known}.",
                True,
            )
            return
        if run.arguments is None:
            await self._finish(
                run,
                f"Error: invalid arguments for {call.name}: {run.argument_error}.",
                True,
            )
            return
        if not is_allowed(call.name, self._opts.allowed_tools):
            answer = await self._turn.request_approval(call.name, run.arguments, tool.description)
            if not answer.allow:
                reason = answer.reason or "the user denied this tool call"
                await self._finish(run, f"Error: denied: {reason}.", True)
                return
        server = self._snapshot_server(tool.server)
        timeout = (
            server.timeout
            if server is not None and server.timeout > 0
            else (self._opts.tool_timeout)
        )
        retries = self._opts.tool_retries
        for attempt in range(retries + 1):
            run.attempts = attempt + 1
            try:
                if server is None:
                    raise ToolFailure(f"MCP server {tool.server!r} is gone", retryable=False)
                output: ToolOutput = await server.call(tool.tool, run.arguments, timeout)
            except ToolFailure as failure:
                if failure.retryable and attempt < retries:
                    await self._turn.emit(
                        Notice(
                            code="tool_retry",
                            message=f"Tool call {call.name} ({call.call_id}): attempt "
                            f"{attempt + 1} of {retries + 1} failed: {failure.message}; "
                            "retrying.",
                            turn_id=self._turn.turn_id,
                        )
                    )
                    await trio.sleep(self._opts.tool_retry_delay * (2**attempt))
                    continue
                tried = f" (after {attempt + 1} attempts)" if attempt else ""
                await self._finish(run, f"Error: {failure.message}{tried}.", True)
                return
            run.images = output.images
            await self._finish(run, output.text, output.is_error)
            return

    def _snapshot_server(self, name: str) -> McpServer | None:
        return self._snapshot.servers.get(name)

    async def _finish(self, run: ToolRun, output: str, is_error: bool) -> None:
        run.output = clip(output, self._opts.max_tool_result_chars)
        run.is_error = is_error
        await self._turn.chunk(
            ToolResult(
                call_id=run.call.call_id,
                output=run.output,
                is_error=is_error,
                attempts=run.attempts if run.attempts > 1 else 0,
            )
        )
