"""Secrets by reference: `${NAME}` in an MCP server's `env` reaches the server, from the
config dir's 0600 `secrets.env`, and its value is never in the database file, the log or any
event, even when the server itself says it (redaction). A window's own server with a
reference is refused at create-topic: the server must be one an assistant file defines.

Real daemon process, real socket and SQLite, the driver and a real MCP server as
subprocesses, the fake OpenAI-compatible server in this process.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

import msgspec
import pytest
import trio

from hostd.client import open_client
from hostd.shell.drivers.secrets import read_secrets
from hostd.shell.paths import Paths
from hostd_protocol.client_messages import TurnEnded
from hostd_protocol.errors import ConfigError, PermissionDenied
from tests.dirs import made_dir
from tests.e2e import daemon_proc
from tests.fakes.openai_api import FakeOpenAI, Rule, Text, ToolCalls, after_tools, user_says
from tests.openai.peer import tools_server

pytestmark = pytest.mark.e2e

SECRET = "s3cr3t-Value-9f8e7d6c5b4a"
RULES = [
    Rule(
        user_says("check"),
        ToolCalls(
            [
                ("t__env_sha256", {"name": "TOOL_TOKEN"}),
                ("t__env_value", {"name": "TOOL_TOKEN"}),
            ]
        ),
    ),
    Rule(after_tools("check"), Text("checked")),
]


def files_holding(root: Path, needle: bytes, skip: Path) -> list[Path]:
    return [
        p
        for p in root.rglob("*")
        if p.is_file() and not p.is_symlink() and p != skip and needle in p.read_bytes()
    ]


async def test_a_secret_reference_reaches_the_server_and_nothing_else(tmp_path: Path) -> None:
    home = Path(tempfile.mkdtemp(prefix="hds", dir="/tmp"))  # short: AF_UNIX path limit
    try:
        await _scenario(home, tmp_path)
    finally:
        shutil.rmtree(home, ignore_errors=True)


async def _scenario(home: Path, tmp_path: Path) -> None:
    paths = Paths.under(home)
    paths.config_dir.mkdir(parents=True, mode=0o700, exist_ok=True)
    secrets = paths.config_dir / "secrets.env"
    secrets.write_text(f"# for the test MCP server\nMCP_TOKEN={SECRET}\n")
    secrets.chmod(0o600)
    events: list[bytes] = []
    with FakeOpenAI(RULES) as api, trio.fail_after(90):
        d = await daemon_proc.start(home)
        try:
            async with open_client(paths) as a:
                server = tools_server(tmp_path / "state", env={"TOOL_TOKEN": "${MCP_TOKEN}"})
                options = {
                    "base_url": api.base_url,
                    "api_key_env": "",
                    "mcp_startup_wait": 30,
                    "allowed_tools": ["t__*"],
                }
                # A window's own server would get the secret (it picks the URL or program):
                # refused, nothing stored; the user's assistant file defines the server.
                with pytest.raises(PermissionDenied) as refused:
                    await a.create_topic(driver="openai", model="fake-model",
                                         options={**options, "mcp_servers": {"t": server}})
                assert str(refused.value) == (
                    "${MCP_TOKEN} in mcp_servers 't' from a window would go to a server the "
                    "window chose; define that server (the same entry) in the "
                    "[options.mcp_servers] of an assistant in the config dir's assistants/ "
                    "(`hostd paths` shows where)"
                )
                # The same through a file the window names (an mcp.json it may have written).
                planted = tmp_path / "mcp.json"
                planted.write_text(json.dumps({"mcpServers": {"t": server}}))
                with pytest.raises(PermissionDenied) as refused:
                    await a.create_topic(driver="openai", model="fake-model",
                                         options={**options, "mcp_config": str(planted)})
                assert str(refused.value) == (
                    f"mcp_config {str(planted)!r} from a window refers to ${{MCP_TOKEN}}: the "
                    "window would choose where it goes; set `mcp_config = "
                    f"{str(planted)!r}` in the [options] of an assistant in the config dir's "
                    "assistants/ (`hostd paths` shows where)"
                )
                assistants = paths.config_dir / "assistants"
                assistants.mkdir(mode=0o700)
                (assistants / "tools.toml").write_text(
                    f"[options.mcp_servers]\nt = {toml_inline(server)}\n"
                )
                assert await a.list_topics() == []
                topic = await a.create_topic(
                    title="secrets",
                    assistant="tools",
                    driver="openai",
                    model="fake-model",
                    options=options,
                    working_dir=made_dir(tmp_path / "work"),
                )
                async with a.attach(topic.id) as sub:
                    await a.send(topic.id, "check", intent="start")
                    async for item in sub:
                        events.append(msgspec.json.encode(item))
                        if isinstance(item, TurnEnded):
                            assert item.status == "success", item
                            break
                rows = (await a.history(topic.id)).rows
                await a.shutdown()
        finally:
            await d.terminate()

    # The server got the value: the model read its hash, and the leak itself (the vendor's
    # copy is the model's business: the tool result goes to the model as is).
    digest = hashlib.sha256(SECRET.encode()).hexdigest()
    assert api.chat_requests[-1].tool_results == [digest, SECRET]
    # Nothing hostd keeps or shows holds it: rows, events, the db, the log, the config.
    stored = msgspec.json.encode(rows)
    assert digest.encode() in stored and SECRET.encode() not in stored
    assert events and not [e for e in events if SECRET.encode() in e]
    assert files_holding(home, SECRET.encode(), skip=secrets) == []
    assert looked_at(paths) == (True, True)


def toml_inline(value: object) -> str:
    """`value` (str, list, dict of those) as a TOML inline value (JSON strings are TOML's)."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {toml_inline(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(toml_inline(v) for v in value) + "]"
    return json.dumps(value)


def looked_at(paths: Paths) -> tuple[bool, bool]:
    """Whether the files grepped include the database and a log."""
    return paths.db_path.is_file(), any(paths.log_dir.iterdir())


def test_the_secrets_file_must_be_private(tmp_path: Path) -> None:
    path = tmp_path / "secrets.env"
    assert read_secrets(tmp_path) == {}
    path.write_text("# c\n\nexport A=1\nB = 'two words'\nC=\"x=y\"\n")
    path.chmod(0o644)
    with pytest.raises(ConfigError, match=r"others may read it \(mode 0o644\); run `chmod 600"):
        read_secrets(tmp_path)
    path.chmod(0o600)
    assert read_secrets(tmp_path) == {"A": "1", "B": "two words", "C": "x=y"}
    path.write_text("A=1\nthis line holds a secret\n")
    with pytest.raises(ConfigError, match=r"line 2: expected NAME=value$") as err:
        read_secrets(tmp_path)
    assert "holds a secret" not in str(err.value)
    path.unlink()
    os.symlink(tmp_path / "elsewhere", path)
    with pytest.raises(ConfigError, match=r"cannot read it"):
        read_secrets(tmp_path)
