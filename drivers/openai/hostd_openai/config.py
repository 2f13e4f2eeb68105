"""The OpenAI driver's options (`Init.options`), validated once at `Init` (no I/O here).

Rules this module guards:

- The API key is read from exactly one environment variable, the one `api_key_env` names;
  it is never an option value (options are stored and logged by the host) and never logged.
- A bad option is a clear `InvalidArgument` naming it; the harness turns it into
  `DriverFatal`, so a misconfigured assistant fails at connect, not in the middle of a turn.
- Tool names the model sees are `<server>__<tool>`, restricted to the characters and length
  the Chat Completions API accepts; two servers can never collide.
- MCP servers are written the way Claude Desktop, Cursor and VS Code `mcp.json` files write
  them (`command`/`args`/`env`, `url`/`headers`, `type`), under `mcp_servers` or
  `mcpServers`, names of letters, digits, `-` and `_`; an unknown key is an error naming it
  (`transport = "sse"` never quietly becomes something else). A file holding such an object
  (`mcp_config`) is read by `mcp_config`, not here.
"""

from __future__ import annotations

import fnmatch
import re
from typing import Any, Literal

import msgspec

from hostd_protocol.errors import InvalidArgument

#: What OpenAI accepts as a function name; local servers are laxer, so this is the safe set.
TOOL_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
SERVER_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,32}$")
NAMESPACE_SEP = "__"

Transport = Literal["stdio", "sse", "http"]
#: `type` as the mcp.json files of the tools people use spell it.
TRANSPORTS: dict[str, Transport] = {
    "stdio": "stdio",
    "sse": "sse",
    "http": "http",
    "streamable-http": "http",
    "streamable_http": "http",
    "streamableHttp": "http",
}


class McpServerConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One MCP server, as an `mcp.json` entry: a stdio subprocess (`command`), or an HTTP
    endpoint (`url`: streamable HTTP, or SSE with `type = "sse"`)."""

    #: "stdio", "sse", "http" (also "streamable-http", "streamableHttp"); "" = from the
    #: other keys (`command`: stdio, `url`: streamable HTTP).
    type: str = ""
    command: str = ""
    args: list[str] = []
    #: Extra environment for a stdio server (over the MCP SDK's minimal default environment).
    env: dict[str, str] = {}
    cwd: str = ""
    url: str = ""
    headers: dict[str, str] = {}
    #: Bound on connecting + listing tools; a slower server is left out of the turn (notice).
    connect_timeout: float = 15.0
    #: Bound on one tool call of this server (overrides `tool_timeout`); 0: use `tool_timeout`.
    tool_timeout: float = 0.0

    @property
    def transport(self) -> Transport:
        if self.type:
            return TRANSPORTS[self.type]
        return "stdio" if self.command else "http"


class Prices(msgspec.Struct, frozen=True, kw_only=True):
    """USD per million tokens, for `Usage.cost_usd`."""

    input: float = 0.0
    output: float = 0.0
    cached_input: float = 0.0


class OpenAIOptions(msgspec.Struct, frozen=True, kw_only=True):
    """`Init.options` understood by this driver. Unknown keys are ignored (and logged)."""

    #: The server's API root, e.g. `http://127.0.0.1:11434/v1` for Ollama.
    base_url: str = "https://api.openai.com/v1"
    #: "chat": Chat Completions (every OpenAI-compatible server); "responses": the Responses
    #: API, for servers that offer it (sent stateless: `store` false, the history every turn).
    api: Literal["chat", "responses"] = "chat"
    #: Name of the environment variable holding the key; "" (or an unset variable): no key,
    #: as local servers want.
    api_key_env: str = "OPENAI_API_KEY"
    #: Model calls per turn before the turn ends with a clear reason.
    max_steps: int = 25
    temperature: float | None = None
    max_tokens: int | None = None
    #: Extra fields merged into every request body (e.g. `{"top_p": 0.9}`).
    extra_body: dict[str, Any] = {}
    #: Ask for a final usage chunk (`stream_options.include_usage`). Turn off for servers that
    #: refuse the field.
    stream_usage: bool = True
    #: Seconds between two bytes of a response before it counts as a timeout.
    read_timeout: float = 300.0
    connect_timeout: float = 10.0
    #: 429 / 5xx / transport failures of a model call: retries, with exponential backoff from
    #: `retry_base_delay` capped at `retry_max_delay` (a `Retry-After` header wins, capped too).
    model_retries: int = 4
    retry_base_delay: float = 0.5
    retry_max_delay: float = 20.0
    mcp_servers: dict[str, McpServerConfig] = {}
    #: The same, under the key mcp.json files use, so their object can be pasted as is.
    mcp_servers_json: dict[str, McpServerConfig] = msgspec.field(
        default_factory=dict, name="mcpServers"
    )
    #: Path of a Claude Desktop / Cursor / VS Code `mcp.json` file whose `mcpServers` (or
    #: VS Code's `servers`) object adds servers (read when the driver starts).
    mcp_config: str = ""
    #: Tool names (`server__tool`, shell-style patterns like `time__*` or `*`) that run
    #: without asking the user. Every other tool call goes through hostd approvals.
    allowed_tools: list[str] = []
    #: Retries of a retryable tool failure (transport error, timeout, server restart).
    tool_retries: int = 3
    tool_timeout: float = 120.0
    tool_retry_delay: float = 0.2
    #: A tool result longer than this is cut (with a note the model can read).
    max_tool_result_chars: int = 100_000
    #: The model takes images: image blocks of tool results go to it as image parts; False:
    #: it reads a text placeholder for each.
    vision: bool = False
    #: Seconds between background refreshes of each MCP server's tool list.
    catalog_refresh: float = 300.0
    #: A turn may wait for MCP servers still making their first connection attempt until
    #: this long after the driver process started; no turn waits longer, and a turn sent
    #: later not at all (servers that become ready later join at the next model step).
    mcp_startup_wait: float = 2.0
    #: On a context-overflow error: summarise the older messages with the model and retry
    #: once (compaction events); False: fail the turn with a clear reason.
    compact_on_overflow: bool = True
    #: Messages kept verbatim after a compaction (the rest is summarised).
    compact_keep_last: int = 4
    #: A catalog whose schemas cost more tokens than this defers the tools that run unasked
    #: behind one `tool_search` tool (only when that saves tokens); 0: never.
    tool_search_over_tokens: int = 8000
    prices: Prices | None = None
    #: Headers added to every model request (never logged).
    headers: dict[str, str] = {}

    def __post_init__(self) -> None:
        # Here, not in `parse_options`: the daemon converts a topic's options to this Struct
        # when the topic is created (`DriverSpec.check_options`), so a bad value is refused
        # then rather than by the driver at the first send. A ValueError becomes msgspec's
        # ValidationError with this message.
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError(
                f"base_url must start with http:// or https://, got {self.base_url!r}"
            )
        for name in _AT_LEAST_ONE + _AT_LEAST_ZERO:
            if getattr(self, name) < (1 if name in _AT_LEAST_ONE else 0):
                raise ValueError(f"{name} is out of range")
        for name in ("read_timeout", "connect_timeout", "tool_timeout", "catalog_refresh"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0")


_AT_LEAST_ONE = ("max_steps", "max_tool_result_chars")
_AT_LEAST_ZERO = ("model_retries", "tool_retries", "tool_search_over_tokens")


def parse_options(raw: dict[str, Any]) -> tuple[OpenAIOptions, list[str]]:
    """Validate `Init.options`; returns the options and the names of ignored keys."""
    known = set(OpenAIOptions.__struct_encode_fields__)
    unknown = sorted(k for k in raw if k not in known)
    for key in ("mcp_servers", "mcpServers"):
        servers = raw.get(key)
        if isinstance(servers, dict):
            check_server_keys(servers, "invalid openai option: ")
    try:
        opts = msgspec.convert(
            {k: v for k, v in raw.items() if k in known}, OpenAIOptions, strict=False
        )
    except msgspec.ValidationError as exc:
        raise InvalidArgument(f"invalid openai option: {exc}") from None
    for servers in (opts.mcp_servers, opts.mcp_servers_json):
        for server, cfg in servers.items():
            check_server(server, cfg, "invalid openai option: ")
    both = sorted(set(opts.mcp_servers) & set(opts.mcp_servers_json))
    if both:
        raise InvalidArgument(
            f"invalid openai option: mcp server {both[0]!r} is in both mcp_servers and "
            "mcpServers; keep one"
        )
    return opts, unknown


def check_server_keys(servers: dict[str, Any], prefix: str) -> None:
    """Raise `InvalidArgument` naming the first unknown key of a server entry (before the
    conversion, whose message would not name the server)."""
    known = McpServerConfig.__struct_encode_fields__
    for name, entry in servers.items():
        if not isinstance(entry, dict):
            continue
        for key in entry:
            if key not in known:
                raise InvalidArgument(
                    f"{prefix}mcp server {name!r}: unknown key {key!r} (known: {', '.join(known)})"
                )


def check_server(name: str, cfg: McpServerConfig, prefix: str) -> None:
    """Raise `InvalidArgument` (message starting with `prefix`) for a bad server entry."""
    if not SERVER_NAME_RE.match(name):
        raise InvalidArgument(
            f"{prefix}mcp server name {name!r} must be 1-32 letters, digits, '-' or '_' "
            "(it prefixes the tool names the model sees)"
        )
    if cfg.type and cfg.type not in TRANSPORTS:
        raise InvalidArgument(
            f"{prefix}mcp server {name!r}: unknown type {cfg.type!r} (use stdio, sse or http)"
        )
    if bool(cfg.command) == bool(cfg.url):
        raise InvalidArgument(
            f"{prefix}mcp server {name!r} needs exactly one of 'command' (stdio) or 'url' "
            "(http, sse)"
        )
    if cfg.command and cfg.transport != "stdio":
        raise InvalidArgument(
            f"{prefix}mcp server {name!r}: type {cfg.type!r} needs a 'url', not a 'command'"
        )
    if cfg.url and cfg.transport == "stdio":
        raise InvalidArgument(
            f"{prefix}mcp server {name!r}: type 'stdio' needs a 'command', not a 'url'"
        )


def namespaced(server: str, tool: str) -> str | None:
    """The name the model sees for `tool` of `server`, or None if it cannot be expressed."""
    name = f"{server}{NAMESPACE_SEP}{tool}"
    return name if TOOL_NAME_RE.match(name) else None


def is_allowed(name: str, patterns: list[str]) -> bool:
    """Whether the namespaced tool `name` runs without an approval."""
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)
