"""The `hostd.drivers` entry point of the OpenAI-compatible driver (imports nothing heavy)."""

from __future__ import annotations

from hostd_openai import __version__
from hostd_protocol.driver_spec import DriverSpec

#: Variables passed on from the daemon's environment. The API key is read only from the
#: variable the assistant names in `api_key_env` (default `OPENAI_API_KEY`); the daemon passes
#: that variable to this driver only (`DriverSpec.env_options`), and redacts its value from
#: everything the driver says.
ENV: tuple[str, ...] = ("OPENAI_API_KEY", "HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY", "LANG")

#: Shown by `hostd drivers openai`; a test checks it names every field of `OpenAIOptions`.
OPTIONS_HELP: tuple[tuple[str, str], ...] = (
    (
        "base_url",
        "the server's API root (default https://api.openai.com/v1; Ollama: "
        "http://127.0.0.1:11434/v1)",
    ),
    ("api", "chat (Chat Completions, default) or responses (the Responses API)"),
    ("api_key_env", 'name of the variable holding the key (default OPENAI_API_KEY; "": none)'),
    (
        "mcp_servers",
        'name -> {command, args, env, cwd} (stdio) or {url, headers} (HTTP; type = "sse" '
        "for SSE), as in mcp.json; also connect_timeout, tool_timeout. ${NAME} in env or "
        "headers values: a secret (see below)",
    ),
    ("mcpServers", "the same, under the name mcp.json files use (paste their object as is)"),
    (
        "mcp_config",
        "path of a Claude Desktop / Cursor / VS Code mcp.json whose mcpServers are added",
    ),
    ("allowed_tools", "tool names / patterns (time__*, *) that run without an approval"),
    ("max_steps", "model calls per turn (default 25)"),
    ("tool_retries", "retries of a retryable tool failure (default 3)"),
    ("tool_timeout", "seconds per tool call (default 120)"),
    ("tool_retry_delay", "first backoff between tool attempts (default 0.2 s)"),
    ("max_tool_result_chars", "longer tool results are cut (default 100000)"),
    ("vision", "the model takes images: tool results' images go to it as images (default false)"),
    ("model_retries", "retries of 429 / 5xx / transport failures (default 4)"),
    ("retry_base_delay", "first model retry backoff (default 0.5 s)"),
    ("retry_max_delay", "longest model retry backoff (default 20 s)"),
    ("read_timeout", "seconds between two bytes of a response (default 300)"),
    ("connect_timeout", "seconds to connect to the server (default 10)"),
    ("temperature", "sampling temperature (server default)"),
    ("max_tokens", "output limit per model call (server default)"),
    ("extra_body", "fields merged into every request body"),
    ("headers", "headers added to every model request"),
    ("stream_usage", "ask for usage in the stream (default true)"),
    ("compact_on_overflow", "summarise older messages once on context overflow (default true)"),
    ("compact_keep_last", "messages kept verbatim by a compaction (default 4)"),
    (
        "tool_search_over_tokens",
        "a catalog costing more tokens defers unasked tools behind "
        "tool_search, when that saves tokens (default 8000; 0: never)",
    ),
    ("prices", "{input, output, cached_input} USD per million tokens, for cost"),
    ("catalog_refresh", "seconds between MCP tool-list refreshes (default 300)"),
    (
        "mcp_startup_wait",
        "a turn waits for MCP servers still starting until this long after the driver "
        "started (2 s); later ones join at the next model step",
    ),
)

SPEC = DriverSpec(
    name="openai",
    module="hostd_openai",
    description="OpenAI-compatible Chat Completions (hosted or local: Ollama, llama.cpp, vLLM) "
    "with tools from MCP servers",
    version=__version__,
    env=ENV,
    env_options=("api_key_env",),
    # A window's base_url would receive the daemon's key, and its headers go along with it
    # (a Host header reroutes it): allowed with api_key_env = "" (a local server without a
    # key), when no key is set, or as an assistant file has them.
    redirect_options=("base_url", "headers"),
    secret_options=("mcp_servers", "mcpServers"),
    secret_file_options=("mcp_config",),
    options_help=OPTIONS_HELP,
    # Checked when a topic is created (unknown names with a did-you-mean, wrong types);
    # config.py imports only msgspec and the protocol.
    options_type="hostd_openai.config:OpenAIOptions",
    mcp_option="mcp_servers",
    mcp_format="mcp.json",
    images=True,  # image_url content parts
    needs_model=True,  # a server serves many models; which one is never guessed
)
