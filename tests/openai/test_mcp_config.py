"""MCP config as people already write it (`hostd_openai.config`, `hostd_openai.mcp_config`):
mcp.json's `mcpServers` as is, from a file or the options, names with `_`, unknown keys named,
`type`, secret references."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from hostd.core.assistants import parse_assistant
from hostd_openai.config import McpServerConfig, parse_options
from hostd_openai.mcp_config import configured_servers, read_mcp_json
from hostd_openai.spec import SPEC
from hostd_protocol.errors import InvalidArgument

README = Path(__file__).resolve().parents[2] / "drivers" / "openai" / "README.md"


def readme_mcp_json() -> str:
    (block,) = re.findall(r"```json\n(.*?)```", README.read_text(), re.S)
    return str(block)


def test_the_readme_mcp_json_is_used_as_is(tmp_path: Path) -> None:
    path = tmp_path / "mcp.json"
    path.write_text(readme_mcp_json())
    opts, unknown = parse_options({"mcp_config": str(path)})
    assert unknown == []
    servers = configured_servers(opts, {"GITHUB_TOKEN": "ghp_example"})
    assert sorted(servers) == ["github_issues", "old-sse-server", "time"]
    assert (servers["time"].transport, servers["time"].command) == ("stdio", "uvx")
    assert servers["github_issues"].transport == "http"
    assert servers["github_issues"].headers == {"Authorization": "Bearer ghp_example"}
    assert servers["old-sse-server"].transport == "sse"
    # The same object pasted into the options (as a window or an assistant's TOML would).
    pasted, _ = parse_options(json.loads(readme_mcp_json()))
    assert sorted(pasted.mcp_servers_json) == sorted(servers)
    SPEC.check_options(json.loads(readme_mcp_json()))  # the daemon's check at create-topic


def test_toml_mcp_servers_as_mcp_json_writes_them() -> None:
    assistant = parse_assistant(
        "a",
        'driver = "openai"\nmodel = "m"\n[options.mcpServers.my_files]\ncommand = "npx"\n'
        'args = ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"]\n'
        '[options.mcp_servers.web]\ntype = "sse"\nurl = "http://127.0.0.1:1/sse"\n',
    )
    opts, unknown = parse_options(dict(assistant.options))
    assert unknown == []
    servers = configured_servers(opts, {})
    assert servers["my_files"].args[0] == "-y"
    assert servers["web"].transport == "sse"


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"command": "x", "transport": "sse"}, r"mcp server 's': unknown key 'transport'"),
        ({"url": "http://x", "type": "websocket"}, r"mcp server 's': unknown type 'websocket'"),
        ({"command": "x", "type": "sse"}, r"mcp server 's': type 'sse' needs a 'url', not a"),
        ({"url": "http://x", "type": "stdio"}, r"mcp server 's': type 'stdio' needs a 'command'"),
        ({}, r"mcp server 's' needs exactly one of 'command' \(stdio\) or 'url'"),
    ],
)
def test_bad_entries_are_named(entry: dict[str, object], message: str, tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match=rf"^invalid openai option: {message}"):
        parse_options({"mcp_servers": {"s": entry}})
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {"s": entry}}))
    with pytest.raises(InvalidArgument, match=rf"^mcp_config {re.escape(str(path))}: {message}"):
        read_mcp_json(str(path))


def test_names_and_files(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match=r"mcp server name 'a b' must be 1-32 letters"):
        parse_options({"mcp_servers": {"a b": {"command": "x"}}})
    vscode = tmp_path / "vscode.json"
    vscode.write_text(json.dumps({"inputs": [], "servers": {"fs_1": {"command": "x"}}}))
    assert list(read_mcp_json(str(vscode))) == ["fs_1"]
    opts, _ = parse_options(
        {"mcp_config": str(vscode), "mcp_servers": {"fs_1": {"url": "http://x"}}}
    )
    with pytest.raises(
        InvalidArgument, match=r"^mcp server 'fs_1' is defined in the options and in"
    ):
        configured_servers(opts, {})
    for text, message in [
        ("{not json", "not valid JSON"),
        ("[]", "expected a JSON object"),
        ('{"other": {}}', "expected an object 'mcpServers'"),
    ]:
        vscode.write_text(text)
        with pytest.raises(InvalidArgument, match=message):
            read_mcp_json(str(vscode))
    with pytest.raises(InvalidArgument, match=r"cannot read it"):
        read_mcp_json(str(tmp_path / "missing.json"))
    with pytest.raises(InvalidArgument, match=r"give an absolute path"):
        read_mcp_json("relative/mcp.json")


def test_secret_references() -> None:
    cfg = McpServerConfig(
        command="x",
        env={"TOKEN": "${API_TOKEN}", "PLAIN": "$HOME"},
        headers={"X": "a ${env:B} c"},
    )
    opts, _ = parse_options({"mcp_servers": {"s": {"url": "http://x", "headers": cfg.headers}}})
    (resolved,) = configured_servers(opts, {"B": "bee"}).values()
    assert resolved.headers == {"X": "a bee c"}
    stdio, _ = parse_options({"mcp_servers": {"s": {"command": "x", "env": cfg.env}}})
    (resolved,) = configured_servers(stdio, {"API_TOKEN": "t0k"}).values()
    assert resolved.env == {"TOKEN": "t0k", "PLAIN": "$HOME"}
    with pytest.raises(
        InvalidArgument,
        match=r"^mcp server 's' refers to \$\{API_TOKEN\}, which is not set: add API_TOKEN=\.\.\. "
        r"to secrets.env",
    ):
        configured_servers(stdio, {})


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"base_url": "notaurl"},
         "base_url must start with http:// or https://, got 'notaurl'"),
        ({"max_steps": 0}, "max_steps is out of range"),
        ({"tool_retries": -1}, "tool_retries is out of range"),
        ({"read_timeout": 0}, "read_timeout must be > 0"),
    ],
)
def test_option_values_are_checked_when_the_topic_is_created(
    options: dict[str, object], message: str
) -> None:
    # Found from outside: `hostd new --driver openai --option base_url=notaurl` was accepted
    # and the first send failed with the driver's start-up error; the daemon checks a topic's
    # options against the options Struct (`SPEC.check_options`), so the checks live there.
    with pytest.raises(InvalidArgument, match=f"^invalid option for driver 'openai': {re.escape(message)}"):
        SPEC.check_options(options)
    with pytest.raises(InvalidArgument, match=f"^invalid openai option: {re.escape(message)}$"):
        parse_options(options)
