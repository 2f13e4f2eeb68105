"""The agents file: built-ins, overrides, and the checks on who could have written it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hostd_acp.config import (
    BUILTIN_AGENTS,
    AgentConfig,
    agent_env,
    load_agents,
    select_agent,
)
from hostd_protocol.errors import ConfigError


def write(path: Path, text: str, mode: int = 0o600) -> Path:
    path.write_text(text)
    os.chmod(path, mode)
    return path


def test_missing_file_means_the_builtins(tmp_path: Path) -> None:
    agents = load_agents(tmp_path / "acp-agents.toml")
    assert agents.agents == BUILTIN_AGENTS
    name, agent = select_agent(agents, "", tmp_path)
    assert name == "claude" and agent.command == "claude-agent-acp"


def test_file_entries_replace_builtins_and_add_agents(tmp_path: Path) -> None:
    path = write(
        tmp_path / "a.toml",
        'default_agent = "goose"\n[agents.goose]\ncommand = "goose"\nargs = ["acp"]\n'
        '[agents.gemini]\ncommand = "/opt/gemini"\n',
    )
    agents = load_agents(path)
    assert select_agent(agents, "", path) == ("goose", AgentConfig(command="goose", args=["acp"]))
    assert agents.agents["gemini"].command == "/opt/gemini"
    assert agents.agents["claude"] == BUILTIN_AGENTS["claude"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[agents.x]\ncommand = "x"\ncomand = "y"\n', "unknown field"),
        ('[agents.x]\ncommand = ""\n', "agent 'x': command is empty"),
        ("[agents.x\n", "a.toml: "),
    ],
)
def test_bad_files_are_a_config_error_naming_the_file(
    tmp_path: Path, text: str, message: str
) -> None:
    path = write(tmp_path / "a.toml", text)
    with pytest.raises(ConfigError) as info:
        load_agents(path)
    assert str(path) in info.value.message and message in info.value.message


def test_a_file_others_could_write_or_a_link_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path / "a.toml", '[agents.x]\ncommand = "x"\n', mode=0o666)
    with pytest.raises(ConfigError, match="someone else could have written it"):
        load_agents(path)
    os.chmod(path, 0o644)
    assert "x" in load_agents(path).agents
    link = tmp_path / "link.toml"
    link.symlink_to(path)
    with pytest.raises(ConfigError, match="is a symbolic link"):
        load_agents(link)


def test_unknown_agent_names_the_configured_ones(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError, match=r"^no ACP agent named 'nope' \(configured: claude, gemini\)"
    ):
        select_agent(load_agents(tmp_path / "none.toml"), "nope", tmp_path / "none.toml")


def test_agent_env_is_built_from_names_only() -> None:
    agent = AgentConfig(command="x", env=["API_KEY", "ABSENT"], set_env={"FIXED": "1"})
    env = agent_env(agent, {"PATH": "/bin", "API_KEY": "k", "SECRET": "s", "HOME": "/h"})
    assert env == {"PATH": "/bin", "HOME": "/h", "API_KEY": "k", "FIXED": "1"}


def test_a_broken_agents_file_is_fixed_from_the_message_alone(tmp_path: Path) -> None:
    """`hostd drivers` (and a refused topic) say how to correct the file without pointing
    into a source checkout: a wheel install has no drivers/acp/README.md."""
    from hostd_acp.spec import check_agents

    (tmp_path / "config").mkdir()
    path = write(tmp_path / "config" / "acp-agents.toml", "[agents.x]\ncmd = 'oops'\n")
    status = check_agents({"HOSTD_HOME": str(tmp_path), "PATH": os.defpath})
    assert not status.ok and status.summary.startswith(f"{path} is invalid:")
    assert status.fix.startswith(f"correct {path}: ")
    assert "README" not in status.fix and "drivers/" not in status.fix
    assert "[agents.NAME] with command = " in status.fix and "\n" not in status.fix
