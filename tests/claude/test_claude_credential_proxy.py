"""A confined Claude Code topic with an API key: the key stays outside the sandbox.

The real daemon, a real confined topic (bubblewrap), the real bundled CLI, against the fake
Messages API on the host's 127.0.0.1 as the configured `ANTHROPIC_BASE_URL`. The CLI's Bash
tool runs `scan_for_key.py`, which looks for the real key in every visible process's
environment, command line and memory and in the files a tool can read, then asks the
credential proxy to send a request to another server. Checked: the turn succeeds, the scan
finds nothing (it reads memory, so a miss is not a scan that looked nowhere), the fake API
saw the real key on every request, and the other server saw no request. Control: with
`network = "shared"` (no proxy) the same scan finds the key, so the scan can fail.
"""

from __future__ import annotations

import json
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from hostd.client import open_client
from hostd.shell.drivers.sandbox import probe
from hostd.shell.paths import Paths
from tests.claude.driver_peer import offline_env
from tests.claude.in_daemon import start_daemon, tool_outputs, turn_allowing_tools
from tests.fakes.anthropic_api import FakeAnthropicAPI, Rule, has_tool_result, text, tool_use

SUPPORT = probe()
pytestmark = [
    pytest.mark.claude,
    pytest.mark.e2e,
    pytest.mark.skipif(not SUPPORT.available, reason=SUPPORT.reason),
]

TIMEOUT = 240  # daemon + CLI start, two model requests and a memory scan, on a loaded machine
SCAN = Path(__file__).with_name("scan_for_key.py")


@pytest.fixture
def root() -> Iterator[Path]:
    # Outside /tmp: the sandbox's /tmp is its own, the user's home must be a real hidden one.
    path = Path(tempfile.mkdtemp(prefix="hdkp", dir="/var/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


async def _run_turn(paths: Paths, env: dict[str, str], work: Path, policy: Any) -> tuple[Any, list[str]]:
    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as nursery:
            await start_daemon(nursery, paths, env, sandboxed=True)
            async with open_client(paths) as client:
                topic = await client.create_topic(
                    driver="claude-code", working_dir=str(work), options={"sandbox": policy}
                )
                ended, rows = await turn_allowing_tools(client, topic.id, "look for the key")
                await client.shutdown()
    return ended, tool_outputs(rows)


def _ptrace_scope() -> int:
    try:
        return int(Path("/proc/sys/kernel/yama/ptrace_scope").read_text())
    except (OSError, ValueError):
        return 0  # no Yama: same-uid processes may read each other's memory


def _scan_result(outputs: list[str]) -> dict[str, Any]:
    for output in outputs:
        for line in output.splitlines():
            if line.startswith("SCAN "):
                result: dict[str, Any] = json.loads(line[5:])
                return result
    raise AssertionError(f"the scan printed nothing: {outputs!r}")


@pytest.mark.parametrize(
    ("kind", "network"),
    [
        ("api-key", "loopback"),
        ("console-key", "none"),
        # The same bearer path as CLAUDE_CODE_OAUTH_TOKEN in the proxy.
        pytest.param("ANTHROPIC_AUTH_TOKEN", "none", marks=pytest.mark.slow),
        ("CLAUDE_CODE_OAUTH_TOKEN", "loopback"),
        ("api-key", "shared"),  # control: no proxy, the key is in the sandbox
    ],
)
async def test_a_tool_cannot_find_the_api_key_of_a_confined_topic(
    root: Path, kind: str, network: str
) -> None:
    # The scan looks for this prefix: joined at run time, so that this file, readable in the
    # sandbox when the checkout is under a scanned folder (/tmp), does not hold it.
    real_key = "sk-ant-" + "realkey-" + secrets.token_hex(16)
    home = root / "home"
    home.mkdir()
    work = root / "work"
    work.mkdir()
    shutil.copy(SCAN, work / "scan_for_key.py")
    paths = Paths.under(root / "hostd")
    with FakeAnthropicAPI([]) as other, FakeAnthropicAPI([]) as api:
        scan = (f"python3 scan_for_key.py {other.base_url} {work} /tmp {home} "
                f"{paths.data_dir}")
        api.set_rules([
            Rule(has_tool_result, text("Done.")),
            Rule(lambda req: req.has_tools, tool_use("Bash", {"command": scan})),
        ])
        env = offline_env(api.base_url, HOME=str(home))
        if kind == "console-key":
            del env["ANTHROPIC_API_KEY"]
            (home / ".claude.json").write_text(json.dumps({"primaryApiKey": real_key}))
            (home / ".claude.json").chmod(0o600)
        elif kind != "api-key":
            del env["ANTHROPIC_API_KEY"]
            env[kind] = real_key
        else:
            env["ANTHROPIC_API_KEY"] = real_key
        policy: dict[str, Any] = {"mode": "confined", "network": network}
        if network == "loopback":
            policy["ports"] = [int(other.base_url.rsplit(":", 1)[1])]
        ended, outputs = await _run_turn(paths, env, work, policy)
        seen = [r.api_key for r in api.message_requests]
        elsewhere = other.requests
    assert ended.status == "success", ended
    result = _scan_result(outputs)
    # The scan looked: it read memory of the sandbox's processes (the CLI's among them),
    # where the kernel lets a process read another's (Yama's ptrace_scope 1+ allows only
    # descendants: the CLI's memory is then closed to its tools anyway).
    if _ptrace_scope() == 0:
        assert result["memory_read"] >= 2, result
    assert result["files"] > 0, result
    assert seen and all(key == real_key for key in seen), [k[:12] for k in seen]
    if network == "shared":
        assert result["found"], result
        return
    assert result["found"] == [], result
    # What the tool's environment holds is the placeholder (the CLI removes
    # CLAUDE_CODE_OAUTH_TOKEN from its tools' environment itself).
    assert result["env_key"].startswith("hostd-proxy-") or (
        kind == "CLAUDE_CODE_OAUTH_TOKEN" and result["env_key"] == ""), result
    assert result["base_url"].startswith("http://127.0.0.1:"), result
    assert " 400 " in result["proxy_form_status"] + " ", result
    assert elsewhere == [], elsewhere
