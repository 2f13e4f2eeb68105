"""MCP servers as tool providers: each kept connected by its own task, tools served from a cache.

Rules this module guards:

- A turn never waits on an MCP server: `ToolCatalog.snapshot()` answers at once with the tools
  of the servers that are connected now, and names the others (starting, failed) so the turn
  can say which tools are missing. Each server's task connects, lists its tools, refreshes the
  list every `catalog_refresh` seconds, and reconnects with backoff when it breaks. The one
  wait is bounded by the driver (`wait_started`: at most `mcp_startup_wait`, 2 s, after the
  process started). `version` changes whenever a server's state or tools do, so the agent
  loop re-reads the catalog before a model step only when something changed: a server that
  becomes ready mid-turn is offered at the next model step.
- A tool call fails in one of two ways (`ToolFailure.retryable`), decided here and only here:
  retryable when the transport broke, the call timed out or the server is restarting (the
  server is then marked broken and its task reconnects); final for an unknown tool or invalid
  arguments (JSON-RPC -32601 / -32602). A tool that ran and reported an error
  (`isError`) is a normal result: the model reads it.
- The `mcp` package is imported lazily: a driver without MCP servers never pays for it.
- Every task lives in the nursery the driver gives (`ToolCatalog.start`); closing the driver
  cancels them, which ends each stdio server's process through the SDK's own shutdown.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import trio

from hostd_openai.config import McpServerConfig, OpenAIOptions, namespaced

if TYPE_CHECKING:
    from mcp import ClientSession

log = logging.getLogger("hostd_openai.mcp")

ServerState = Literal["starting", "ready", "failed"]

#: JSON-RPC codes that mean "this call can never work as sent".
_FINAL_CODES = frozenset({-32601, -32602, -32600})
#: Reconnect backoff of a broken server: first delay, cap.
RECONNECT_FIRST = 0.2
RECONNECT_MAX = 30.0


class ToolFailure(Exception):
    """A tool call that produced no result. `retryable` decides whether it is tried again."""

    def __init__(self, message: str, *, retryable: bool) -> None:
        super().__init__(message)
        self.message = message
        self.retryable = retryable


@dataclass(frozen=True)
class CatalogTool:
    """A tool as the model sees it (`name` is namespaced) and where it lives."""

    name: str
    server: str
    tool: str
    description: str
    parameters: dict[str, Any]

    def openai_schema(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters or {"type": "object", "properties": {}},
            },
        }


@dataclass(frozen=True)
class CatalogSnapshot:
    """What a turn may use: the ready servers' tools; `missing` maps server -> why absent."""

    tools: dict[str, CatalogTool]
    missing: dict[str, str]
    servers: dict[str, McpServer] = field(default_factory=dict)


@dataclass
class ToolOutput:
    text: str
    is_error: bool
    #: Image blocks of the result, (mime type, base64 data), in order; the text holds a
    #: placeholder for each (`[image 1: image/png]`), so a model without images reads that.
    images: list[tuple[str, str]] = field(default_factory=list)


class McpServer:
    """One configured MCP server and the task that keeps it connected."""

    def __init__(self, name: str, config: McpServerConfig, opts: OpenAIOptions) -> None:
        self.name = name
        self.config = config
        self._refresh_every = opts.catalog_refresh
        self.state: ServerState = "starting"
        self.error = ""
        self.tools: dict[str, CatalogTool] = {}
        self.first_attempt_done = trio.Event()
        self._session: ClientSession | None = None
        self._ready = trio.Event()
        self._broken = trio.Event()
        self._kick = trio.Event()
        #: Connections made so far (a restart makes it grow; tests and logs read it).
        self.connections = 0
        #: Grows at every change of `state` or `tools` (`ToolCatalog.version`).
        self.generation = 0

    @property
    def timeout(self) -> float:
        return self.config.tool_timeout

    async def serve(self) -> None:
        """Connect, serve, reconnect with backoff; runs until cancelled."""
        delay = RECONNECT_FIRST
        while True:
            self._broken = trio.Event()
            failed = False
            try:
                async with self._connect() as session:
                    try:
                        with trio.fail_after(self.config.connect_timeout):
                            await session.initialize()
                            await self._list(session)
                    except trio.TooSlowError:
                        # Say so now: ending the server's process (the SDK's shutdown, on
                        # leaving this block) can take seconds, and a turn may be waiting.
                        self._failed(f"did not answer within {self.config.connect_timeout:g} s")
                        failed = True
                    else:
                        self._session = session
                        self.state = "ready"
                        self.error = ""
                        self.connections += 1
                        self.generation += 1
                        self._ready.set()
                        self.first_attempt_done.set()
                        delay = RECONNECT_FIRST
                        await self._refresh_loop(session)
            except Exception as exc:  # the SDK raises groups, OSError, MCPError, ...
                if self.state == "ready":
                    self._failed(f"disconnected: {_describe(exc)}")
                elif not failed:
                    self._failed(_describe(exc))
            else:
                if not failed:
                    self._failed("disconnected")
            # Wait before reconnecting, unless a turn needs the server now.
            with trio.move_on_after(delay):
                await self._kick.wait()
            self._kick = trio.Event()
            delay = min(delay * 2, RECONNECT_MAX)

    def _failed(self, error: str) -> None:
        self._session = None
        self.state = "failed"
        self.error = error
        self.tools = {}
        self.generation += 1
        self._not_ready()
        self.first_attempt_done.set()
        log.warning("mcp server %s: %s", self.name, error)

    def _not_ready(self) -> None:
        # Callers may be waiting on the current event: replace it only once it has fired.
        if self._ready.is_set():
            self._ready = trio.Event()

    async def wait_ready(self) -> None:
        """Until the server is connected with its tools listed."""
        await self._ready.wait()

    def kick(self) -> None:
        """Reconnect a failed server now rather than after its backoff."""
        self._kick.set()

    async def _refresh_loop(self, session: ClientSession) -> None:
        while True:
            with trio.move_on_after(self._refresh_every):
                await self._broken.wait()
                return
            with trio.fail_after(self.config.connect_timeout):
                await self._list(session)

    async def _list(self, session: ClientSession) -> None:
        result = await session.list_tools()
        tools: dict[str, CatalogTool] = {}
        for tool in result.tools:
            name = namespaced(self.name, tool.name)
            if name is None:
                log.warning("mcp server %s: tool %r has an unusable name", self.name, tool.name)
                continue
            tools[name] = CatalogTool(
                name=name,
                server=self.name,
                tool=tool.name,
                description=tool.description or "",
                parameters=dict(tool.input_schema or {}),
            )
        if tools != self.tools:
            self.tools = tools
            self.generation += 1

    @asynccontextmanager
    async def _connect(self) -> AsyncIterator[ClientSession]:
        from mcp import ClientSession

        cfg = self.config
        if cfg.transport == "stdio":
            from mcp import StdioServerParameters, stdio_client

            params = StdioServerParameters(
                command=cfg.command,
                args=list(cfg.args),
                env=dict(cfg.env) or None,
                cwd=cfg.cwd or None,
            )
            async with stdio_client(params, errlog=sys.stderr) as (read, write):
                async with ClientSession(read, write) as session:
                    yield session
        elif cfg.transport == "sse":
            from mcp.client.sse import sse_client

            async with sse_client(cfg.url, headers=dict(cfg.headers)) as (read, write):
                async with ClientSession(read, write) as session:
                    yield session
        else:
            import httpx2
            from mcp.client.streamable_http import streamable_http_client

            async with httpx2.AsyncClient(headers=dict(cfg.headers), timeout=30.0) as http:
                async with streamable_http_client(cfg.url, http_client=http) as streams:
                    read, write = streams[0], streams[1]
                    async with ClientSession(read, write) as session:
                        yield session

    async def call(self, tool: str, arguments: dict[str, Any], timeout: float) -> ToolOutput:
        """Call `tool`; raises `ToolFailure`. Waits (within `timeout`) for a restarting server."""
        with trio.move_on_after(timeout) as scope:
            if self._session is None:
                self.kick()
                await self._ready.wait()
            session = self._session
            assert session is not None
            try:
                result = await session.call_tool(tool, arguments)
            except Exception as exc:
                raise self._call_failure(exc) from None
            return _output(result)
        assert scope.cancelled_caught
        if self._session is None:
            raise ToolFailure(
                f"MCP server {self.name!r} is not available ({self.error or 'starting'})",
                retryable=True,
            )
        raise ToolFailure(f"the tool call timed out after {timeout:g} s", retryable=True)

    def _call_failure(self, exc: Exception) -> ToolFailure:
        from mcp import MCPError

        if isinstance(exc, MCPError) and exc.code in _FINAL_CODES:
            return ToolFailure(exc.message, retryable=False)
        # Anything else means the connection can no longer be trusted: reconnect.
        self._broken.set()
        self._session = None
        self._not_ready()
        self.state = "failed"
        self.generation += 1
        self.error = _describe(exc)
        return ToolFailure(f"MCP server {self.name!r} failed: {_describe(exc)}", retryable=True)


def _describe(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:300]


def _output(result: Any) -> ToolOutput:
    parts: list[str] = []
    images: list[tuple[str, str]] = []
    for block in result.content or ():
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(block.text)
        elif kind == "resource":
            resource = block.resource
            parts.append(getattr(resource, "text", None) or f"[resource {resource.uri}]")
        elif kind == "image":
            images.append((block.mime_type, block.data))
            parts.append(f"[image {len(images)}: {block.mime_type}]")
        elif kind == "audio":
            parts.append(f"[audio: {getattr(block, 'mime_type', '')}]")
        elif kind == "resource_link":
            parts.append(f"[resource {block.uri}]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content))
    return ToolOutput(text="\n".join(parts), is_error=bool(result.is_error), images=images)


@dataclass
class ToolCatalog:
    """Every configured MCP server; the tools of the connected ones."""

    servers: dict[str, McpServer] = field(default_factory=dict)
    _started: bool = False

    @classmethod
    def from_options(cls, opts: OpenAIOptions, servers: dict[str, McpServerConfig]) -> ToolCatalog:
        """One `McpServer` per entry of `servers` (`mcp_config.configured_servers`)."""
        return cls({name: McpServer(name, cfg, opts) for name, cfg in servers.items()})

    def start(self, nursery: trio.Nursery) -> None:
        """Start each server's task (idempotent)."""
        if self._started:
            return
        self._started = True
        for server in self.servers.values():
            nursery.start_soon(server.serve, name=f"mcp:{server.name}")

    async def wait_started(self, deadline: float) -> None:
        """Wait until every server has made its first connection attempt, or `deadline`
        (trio clock) has passed, whichever comes first."""
        with trio.move_on_at(deadline):
            for server in self.servers.values():
                await server.first_attempt_done.wait()

    @property
    def version(self) -> int:
        """Changes whenever a server's state or tool list does (each generation only grows)."""
        return sum(server.generation for server in self.servers.values())

    def snapshot(self, *, kick: bool = True) -> CatalogSnapshot:
        """The ready servers' tools now; `kick`: servers not ready reconnect at once."""
        tools: dict[str, CatalogTool] = {}
        missing: dict[str, str] = {}
        for server in self.servers.values():
            if server.state == "ready":
                tools.update(server.tools)
            else:
                missing[server.name] = server.error or "still starting"
                if kick:
                    server.kick()
        return CatalogSnapshot(tools=tools, missing=missing, servers=dict(self.servers))

    def server(self, name: str) -> McpServer | None:
        return self.servers.get(name)
