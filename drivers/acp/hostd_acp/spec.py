"""The `hostd.drivers` entry point of the ACP driver (fast: reads one small TOML file).

The spec is a factory, so `hostd drivers` shows which configured agents have their command
on PATH at the time the daemon (or the CLI) loads it. Versions come from `initialize` and
need the agent to run: `python -m hostd_acp agents --probe` prints them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from hostd_acp import __version__
from hostd_acp.config import (
    CONFIG_FILE,
    DEFAULT_AGENT,
    SEEN_FILE,
    config_dir,
    data_dir,
    load_agents,
    read_seen,
    resolve_command,
)
from hostd_protocol.driver_spec import CredentialStatus, DriverSpec

#: Environment the driver may pass on to agents (each agent entry picks from these), plus
#: what the driver needs to find the agents file.
ENV: tuple[str, ...] = (
    "HOSTD_HOME",
    "XDG_CONFIG_HOME",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_MODEL",
    "ANTHROPIC_SMALL_FAST_MODEL",
    "CLAUDE_CONFIG_DIR",
    "CLAUDE_CODE_MAX_RETRIES",
    "CLAUDE_CODE_EXECUTABLE",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
    "DISABLE_AUTOUPDATER",
    "DISABLE_TELEMETRY",
    "DISABLE_ERROR_REPORTING",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "GOOGLE_CLOUD_PROJECT",
    "OPENAI_API_KEY",
    "HTTPS_PROXY",
    "HTTP_PROXY",
    "NO_PROXY",
)


#: `AcpOptions` (config.py), explained for `hostd drivers acp`.
OPTIONS_HELP: tuple[tuple[str, str], ...] = (
    ("agent", "the agent to run, by name in the agents file (default: its default_agent)"),
    ("mode", "the ACP session mode to select (e.g. Claude Code's 'default': ask for tools)"),
    ("initialize_timeout", "seconds to wait for initialize and session set-up (default 20)"),
    ("interrupt_grace", "seconds to wait after session/cancel for the prompt's answer (5)"),
    ("approval_timeout", "seconds a permission request may wait (0: the host decides)"),
    ("fs", "serve fs/read_text_file and fs/write_text_file in the working dir (true)"),
    ("fs_max_bytes", "largest file those read or write, in bytes (1 MiB)"),
    ("max_message_bytes", "largest message from the agent, in bytes (8 MiB)"),
    ("stderr_tail_lines", "lines of the agent's stderr kept for errors (40)"),
    ("mcp_servers", "MCP servers for the agent's session, as ACP's mcpServers list "
     "(hostd acp passes an editor's)"),
)


#: What a valid agents file holds, in one line (the fix of a broken one).
AGENTS_FILE_SHAPE = (
    'optional default_agent = "NAME", and per agent a table [agents.NAME] with command = '
    '"..." (on PATH or absolute) and optional args = [...], env = [variable names], '
    "[agents.NAME.set_env]; unknown keys are errors"
)


def describe_agents() -> str:
    """One line: each configured agent, whether its command is found, and the version it
    reported in its last `initialize` (remembered by the driver)."""
    path = config_dir() / CONFIG_FILE
    try:
        agents = load_agents(path)
    except Exception as exc:  # the listing must not break on a bad file; the driver says why
        return f"ACP agents: {path} is invalid: {exc}"
    seen = read_seen(data_dir() / SEEN_FILE)
    parts = []
    for name, agent in sorted(agents.agents.items()):
        found = resolve_command(agent.command, os.environ.get("PATH"))
        state = "found" if found else "not found"
        if found and name in seen:
            state += f", last seen as {seen[name]}"
        parts.append(f"{name} ({agent.command}: {state})")
    return "Agent Client Protocol agents: " + ", ".join(parts)


def check_agents(environ: Mapping[str, str]) -> CredentialStatus:
    """The spec's `check` (what `hostd drivers` and topic creation ask): the driver can answer
    only when the command of at least one configured agent is found on the PATH it gets.
    With the default agent missing but another found, it is ready with a warning (a topic
    then names its agent)."""
    path = config_dir(environ) / CONFIG_FILE
    try:
        agents = load_agents(path)
    except Exception as exc:
        # The fix names the file's shape itself: a wheel install has no README to point at.
        return CredentialStatus(ok=False, summary=f"{path} is invalid: {exc}",
                                fix=f"correct {path}: {AGENTS_FILE_SHAPE}")
    search = environ.get("PATH")
    found = [n for n, a in sorted(agents.agents.items()) if resolve_command(a.command, search)]
    if not found:
        missing = ", ".join(f"{n} ({a.command})" for n, a in sorted(agents.agents.items()))
        return CredentialStatus(
            ok=False,
            summary=f"no ACP agent found on PATH: {missing}",
            fix=(
                "install one, e.g. npm install -g @agentclientprotocol/claude-agent-acp for "
                f"claude, or add an agent whose command exists to {path}; then `hostd stop` "
                "(the daemon keeps the PATH it started with)"
            ),
        )
    default = agents.default_agent or DEFAULT_AGENT
    warning = ""
    if default not in found:
        warning = (
            f"the default agent {default!r} is not found: name another per topic "
            f"(--option agent={found[0]}) or set default_agent in {path}"
        )
    return CredentialStatus(ok=True, summary=f"agents found: {', '.join(found)}",
                            warning=warning)


def make_spec() -> DriverSpec:
    return DriverSpec(
        name="acp",
        module="hostd_acp",
        description=describe_agents(),
        version=__version__,
        env=ENV,
        options_help=OPTIONS_HELP,
        # Checked when a topic is created (unknown names, wrong types); config.py imports
        # only msgspec and the protocol.
        options_type="hostd_acp.config:AcpOptions",
        # Passed to the agent's session/new as they are (ACP's own shape).
        mcp_option="mcp_servers",
        mcp_format="acp",
        # Passed on as ACP image blocks to an agent whose promptCapabilities take images.
        images=True,
        # Ready only when an agent's command is found (else the first turn would fail).
        check="hostd_acp.spec:check_agents",
    )


SPEC = make_spec
