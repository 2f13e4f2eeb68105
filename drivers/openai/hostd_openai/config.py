"""The OpenAI driver's options (`Init.options`), validated once at `Init` (no I/O here).

Rules this module guards:

- The API key is read from exactly one environment variable, the one `api_key_env` names;
  it is never an option value (options are stored and logged by the host) and never logged.
- A bad option is a clear `InvalidArgument` naming it; the harness turns it into
  `DriverFatal`, so a misconfigured assistant fails at connect, not in the middle of a turn.
- Tool names the model sees are `<server>__<tool>`, restricted to the characters and length
  the Chat Completions API accepts; two servers can never collide.
"""

from __future__ import annotations

import fnmatch
import re
from typing import Any

import msgspec

from hostd_protocol.errors import InvalidArgument

#: What OpenAI accepts as a function name; local servers are laxer, so this is the safe set.
TOOL_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
SERVER_NAME_RE = re.compile(r"^[A-Za-z0-9-]{1,24}$")
NAMESPACE_SEP = "__"


class McpServerConfig(msgspec.Struct, frozen=True, kw_only=True):
    """One MCP server: a stdio subprocess (`command`) or a streamable HTTP endpoint (`url`)."""

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


class Prices(msgspec.Struct, frozen=True, kw_only=True):
    """USD per million tokens, for `Usage.cost_usd`."""

    input: float = 0.0
    output: float = 0.0
    cached_input: float = 0.0


class OpenAIOptions(msgspec.Struct, frozen=True, kw_only=True):
    """`Init.options` understood by this driver. Unknown keys are ignored (and logged)."""

    #: The server's API root, e.g. `http://127.0.0.1:11434/v1` for Ollama.
    base_url: str = "https://api.openai.com/v1"
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
    #: Tool names (`server__tool`, shell-style patterns like `time__*` or `*`) that run
    #: without asking the user. Every other tool call goes through hostd approvals.
    allowed_tools: list[str] = []
    #: Retries of a retryable tool failure (transport error, timeout, server restart).
    tool_retries: int = 3
    tool_timeout: float = 120.0
    tool_retry_delay: float = 0.2
    #: A tool result longer than this is cut (with a note the model can read).
    max_tool_result_chars: int = 100_000
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


def parse_options(raw: dict[str, Any]) -> tuple[OpenAIOptions, list[str]]:
    """Validate `Init.options`; returns the options and the names of ignored keys."""
    known = set(OpenAIOptions.__struct_fields__)
    unknown = sorted(k for k in raw if k not in known)
    try:
        opts = msgspec.convert(
            {k: v for k, v in raw.items() if k in known}, OpenAIOptions, strict=False
        )
    except msgspec.ValidationError as exc:
        raise InvalidArgument(f"invalid openai option: {exc}") from None
    if not opts.base_url.startswith(("http://", "https://")):
        raise InvalidArgument(
            f"invalid openai option: base_url must start with http:// or https://, "
            f"got {opts.base_url!r}"
        )
    for name in (
        "max_steps",
        "model_retries",
        "tool_retries",
        "max_tool_result_chars",
        "tool_search_over_tokens",
    ):
        if getattr(opts, name) < (1 if name in ("max_steps", "max_tool_result_chars") else 0):
            raise InvalidArgument(f"invalid openai option: {name} is out of range")
    for name in ("read_timeout", "connect_timeout", "tool_timeout", "catalog_refresh"):
        if getattr(opts, name) <= 0:
            raise InvalidArgument(f"invalid openai option: {name} must be > 0")
    for server, cfg in opts.mcp_servers.items():
        if not SERVER_NAME_RE.match(server):
            raise InvalidArgument(
                f"invalid openai option: mcp server name {server!r} must be 1-24 letters, "
                "digits or '-' (it prefixes the tool names the model sees)"
            )
        if bool(cfg.command) == bool(cfg.url):
            raise InvalidArgument(
                f"invalid openai option: mcp server {server!r} needs exactly one of "
                "'command' (stdio) or 'url' (streamable HTTP)"
            )
    return opts, unknown


def namespaced(server: str, tool: str) -> str | None:
    """The name the model sees for `tool` of `server`, or None if it cannot be expressed."""
    name = f"{server}{NAMESPACE_SEP}{tool}"
    return name if TOOL_NAME_RE.match(name) else None


def is_allowed(name: str, patterns: list[str]) -> bool:
    """Whether the namespaced tool `name` runs without an approval."""
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)
