"""Shared set-up for the ACP driver's tests: an agents file, a profile, turn helpers."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hostd.shell.drivers.registry import DriverRegistry
from hostd.testing.conformance import ConformanceProfile
from hostd_acp.spec import make_spec

AGENT = Path(__file__).with_name("agent.py")
REPO = Path(__file__).resolve().parents[2]
#: Where scripts/setup installs the npm package (gitignored): the current claude-agent-acp
#: (@agentclientprotocol/claude-agent-acp, what a user installing it gets today).
NPM_PREFIX = REPO / ".cache" / "npm-acp"
CLAUDE_AGENT_ACP = NPM_PREFIX / "node_modules" / ".bin" / "claude-agent-acp"
#: The same project's last release under its old name, @zed-industries/claude-agent-acp
#: 0.23.1 (Claude CLI 2.1.83 inside): its defects are what the driver absorbs.
OLD_CLAUDE_AGENT_ACP = (
    REPO / ".cache" / "npm-acp-zed" / "node_modules" / ".bin" / "claude-agent-acp"
)


def claude_settings(config_dir: Path, mode: str = "default") -> None:
    """The Claude CLI's user settings (`CLAUDE_CONFIG_DIR/settings.json`) with a permission
    mode. claude-agent-acp 0.101 starts a session in Claude Code's `auto` mode when the
    settings name none: tools then run without asking the client (a model classifier
    decides), and against a non-Anthropic base URL (the fake API) the CLI adds a billing
    warning to every answer. `default` asks the client for every tool, as hostd's Claude
    Code driver does."""
    config_dir.mkdir(parents=True, exist_ok=True)
    settings = {"permissions": {"defaultMode": mode}}
    (config_dir / "settings.json").write_text(json.dumps(settings) + "\n")


def _toml_list(items: list[str]) -> str:
    return "[" + ", ".join(f'"{i}"' for i in items) + "]"


def write_agents_file(home: Path, extra: Mapping[str, tuple[str, list[str]]] = {}) -> Path:
    """`<home>/config/acp-agents.toml` with the test agent in several variants."""
    agents: dict[str, tuple[str, list[str]]] = {
        "test": (sys.executable, [str(AGENT)]),
        "slow": (sys.executable, [str(AGENT), "--init-delay", "2"]),
        "mute": (sys.executable, [str(AGENT), "--no-initialize"]),
        "future": (sys.executable, [str(AGENT), "--protocol", "2"]),
        "loader": (sys.executable, [str(AGENT), "--no-resume"]),
        "stubborn": (sys.executable, [str(AGENT), "--ignore-eof", "--child"]),
        "blind": (sys.executable, [str(AGENT), "--no-images"]),
        "missing": ("hostd-no-such-agent-command", []),
        **extra,
    }
    lines = ['default_agent = "test"']
    for name, (command, args) in agents.items():
        lines += [f"[agents.{name}]", f'command = "{command}"', f"args = {_toml_list(args)}"]
        if name == "claude":
            lines.append(
                "env = "
                + _toml_list(
                    [
                        "ANTHROPIC_API_KEY",
                        "ANTHROPIC_BASE_URL",
                        "CLAUDE_CONFIG_DIR",
                        "CLAUDE_CODE_MAX_RETRIES",
                    ]
                )
            )
    config = home / "config"
    config.mkdir(parents=True, exist_ok=True)
    path = config / "acp-agents.toml"
    path.write_text("\n".join(lines) + "\n")
    os.chmod(path, 0o600)  # whatever the umask: a file others could write is refused
    return path


def base_env(home: Path, **extra: str) -> dict[str, str]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "LANG": os.environ.get("LANG", "C.UTF-8"),
        "HOME": str(home),
        "HOSTD_HOME": str(home),
    }
    env.update(extra)
    return env


def profile(home: Path, **kwargs: Any) -> ConformanceProfile:
    write_agents_file(home)
    defaults: dict[str, Any] = dict(
        driver="acp",
        registry=DriverRegistry.from_specs(make_spec()),
        base_env=base_env(home),
        turn_text="hello",
        long_turn_text="count",
        handshake_timeout=15.0,
        turn_timeout=20.0,
    )
    defaults.update(kwargs)
    return ConformanceProfile(**defaults)
