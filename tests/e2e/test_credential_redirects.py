"""A socket client may not point the daemon's credential elsewhere: a topic's `env` option
(claude-code) that sets ANTHROPIC_BASE_URL, a proxy, a CA bundle, a preload or a config
location, a `cli_path` (a program run with the key), or `setting_sources` loading the
working folder's own settings (env, hooks) on an unconfined topic, is refused when the topic is
created and when a message brings it as a per-message option, through the wire, with the
real daemon and the real driver spec. An assistant file (only the local user writes those)
may set them (hostd/shell/drivers/window_options.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import trio

from hostd.client import open_client
from hostd.shell.paths import Paths
from hostd_protocol.errors import PermissionDenied
from tests.dirs import made_dir
from tests.e2e import daemon_proc

pytestmark = pytest.mark.e2e


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HOSTD_", "ANTHROPIC_"))}
    env["ANTHROPIC_API_KEY"] = "sk-ant-daemon-held-key"  # the key the daemon holds
    return env


async def test_a_window_cannot_redirect_the_daemon_s_credential(home: Path) -> None:
    assistants = home / "config" / "assistants"
    assistants.mkdir(parents=True, mode=0o700)
    (home / "config").chmod(0o700)
    (assistants / "gateway.toml").write_text(
        'driver = "claude-code"\n[options.env]\nANTHROPIC_BASE_URL = "https://gw.example"\n'
    )
    (assistants / "own-cli.toml").write_text(
        'driver = "claude-code"\n[options]\ncli_path = "/opt/my/claude"\n'
    )
    (assistants / "trusted-repo.toml").write_text(
        'driver = "claude-code"\n[options]\nsetting_sources = ["user", "project", "local"]\n'
    )
    with trio.fail_after(60):
        d = await daemon_proc.start(home, env=_env(home))
        try:
            async with open_client(Paths.under(home)) as c:
                work = made_dir(home / "work")
                for name, value in (
                    ("ANTHROPIC_BASE_URL", "http://127.0.0.1:9/steal"),
                    ("https_proxy", "http://127.0.0.1:9"),
                    ("NODE_EXTRA_CA_CERTS", "/tmp/evil.pem"),
                    ("NODE_OPTIONS", "--require /tmp/evil.js"),
                    ("AWS_ENDPOINT_URL_BEDROCK_RUNTIME", "http://127.0.0.1:9"),
                    ("ANTHROPIC_FOUNDRY_BASE_URL", "http://127.0.0.1:9"),
                    ("CLAUDE_CONFIG_DIR", "/tmp/planted"),
                ):
                    with pytest.raises(PermissionDenied) as info:
                        await c.create_topic(driver="claude-code", working_dir=work,
                                             options={"env": {name: value}})
                    assert info.value.message == (
                        f"env {name} is not allowed for driver 'claude-code' from a window: it "
                        "changes where the daemon's credential goes; set it in the "
                        "[options.env] of an assistant in the config dir's assistants/ "
                        "(`hostd paths` shows where)"
                    )
                assert await c.list_topics() == []
                # Other variables are the topic's to set; the user's own file's value passes.
                await c.create_topic(driver="claude-code", working_dir=work,
                                     options={"env": {"DISABLE_TELEMETRY": "1"}})
                await c.create_topic(
                    driver="claude-code", working_dir=work,
                    options={"env": {"ANTHROPIC_BASE_URL": "https://gw.example"}},
                )
                await c.create_topic(assistant="gateway", working_dir=work)
                cli_refusal = (
                    "cli_path '/tmp/evil' is not allowed for driver 'claude-code' from a "
                    "window: the driver would run that program with the daemon's credentials; "
                    "set `cli_path = '/tmp/evil'` in the [options] of an assistant in the "
                    "config dir's assistants/ (`hostd paths` shows where)"
                )
                with pytest.raises(PermissionDenied) as info:
                    await c.create_topic(driver="claude-code", working_dir=work,
                                         options={"cli_path": "/tmp/evil"})
                assert info.value.message == cli_refusal
                await c.create_topic(driver="claude-code", working_dir=work,
                                     options={"cli_path": "/opt/my/claude"})
                # A working folder's own settings (env, hooks) load only as an assistant
                # file says: a window may not ask for them on an unconfined topic.
                for sources, shown in (
                    (["project"], "['project']"),
                    (["user", "local"], "['user', 'local']"),
                    (None, "null"),
                ):
                    with pytest.raises(PermissionDenied) as info:
                        await c.create_topic(driver="claude-code", working_dir=work,
                                             options={"setting_sources": sources})
                    assert info.value.message == (
                        f"setting_sources {shown} is not allowed for driver 'claude-code' "
                        "from a window on a topic that is not confined (network none or "
                        "loopback): the working folder's settings could run programs with "
                        "the daemon's credentials or send them elsewhere; for a folder you "
                        "trust set `setting_sources` in the [options] of an assistant in the "
                        "config dir's assistants/ (`hostd paths` shows where), or use "
                        'sandbox = "confined"'
                    )
                await c.create_topic(driver="claude-code", working_dir=work,
                                     options={"setting_sources": ["user"]})
                await c.create_topic(assistant="trusted-repo", working_dir=work)
                await c.create_topic(
                    driver="claude-code", working_dir=work,
                    options={"setting_sources": ["user", "project", "local"]},
                )
                # Per-message options go through the same rule: refused, nothing stored.
                topic = await c.create_topic(driver="claude-code", working_dir=work)
                for options, message in (
                    ({"cli_path": "/tmp/evil"}, cli_refusal),
                    ({"env": {"HTTPS_PROXY": "http://127.0.0.1:9"}}, None),
                    ({"setting_sources": ["project"]}, None),
                ):
                    with pytest.raises(PermissionDenied) as info:
                        await c.send(topic.id, "hi", options=options)
                    assert message is None or info.value.message == message
                assert (await c.history(topic.id)).rows == []
        finally:
            await d.terminate()
