"""The `hostd.drivers` entry point of the ACP driver (fast: reads one small TOML file).

The spec is a factory, so `hostd drivers` shows which configured agents have their command
on PATH at the time the daemon (or the CLI) loads it. Versions come from `initialize` and
need the agent to run: `python -m hostd_acp agents --probe` prints them.
"""

from __future__ import annotations

import os

from hostd_acp import __version__
from hostd_acp.config import (
    CONFIG_FILE,
    SEEN_FILE,
    config_dir,
    data_dir,
    load_agents,
    read_seen,
    resolve_command,
)
from hostd_protocol.driver_spec import DriverSpec

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


def make_spec() -> DriverSpec:
    return DriverSpec(
        name="acp",
        module="hostd_acp",
        description=describe_agents(),
        version=__version__,
        env=ENV,
    )


SPEC = make_spec
