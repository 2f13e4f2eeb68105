"""`api_key_env` through the real daemon: a window may name only the variables the local user
allowed (`OPENAI_API_KEY`, `""`, or a name an assistant file sets), so no client of the
socket can have an arbitrary variable of the daemon's environment sent to a server it picks.

Real daemon process (with the variables in its environment), real socket and SQLite, the
driver as the daemon's subprocess, the fake OpenAI-compatible server in this process (it
records every request's headers: what would have left the machine).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from hostd.client import open_client
from hostd.shell.paths import Paths
from hostd_protocol.client_messages import TurnEnded
from hostd_protocol.errors import PermissionDenied
from tests.e2e import daemon_proc
from tests.fakes.openai_api import FakeOpenAI, Rule, Text, anything

pytestmark = pytest.mark.e2e

TIMEOUT = 60
STOLEN = "stolen-value-0123456789"
GROQ = "groq-key-0123456789abcdef"


def refusal(name: str) -> str:
    return (
        f"api_key_env = {name!r} is not allowed for driver 'openai': options from a window "
        f'may name OPENAI_API_KEY or "", or a variable an assistant file names (add '
        f"`api_key_env = {name!r}` to the [options] of an assistant in the config dir's "
        "assistants/; `hostd paths` shows where)"
    )


@pytest.fixture
def home(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="hkv", dir="/tmp"))  # short: AF_UNIX path limit
    # The daemon (started from this process) holds both; only one may ever be sent.
    monkeypatch.setenv("HOSTD_TEST_UNRELATED_SECRET", STOLEN)
    monkeypatch.setenv("GROQ_API_KEY", GROQ)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def write_assistant(home: Path, name: str, text: str) -> Path:
    folder = Paths.under(home).config_dir / "assistants"
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    file = folder / f"{name}.toml"
    file.write_text(text)
    file.chmod(0o600)
    return file


async def test_a_window_cannot_name_a_variable_the_user_did_not_allow(
    home: Path, tmp_path: Path
) -> None:
    paths = Paths.under(home)
    with FakeOpenAI([Rule(anything, Text("ok"))]) as api, trio.fail_after(TIMEOUT):
        base = {"base_url": api.base_url}
        d = await daemon_proc.start(home)
        try:
            async with open_client(paths) as window:
                # 1. Any variable of the daemon's: refused at creation, nothing stored.
                for name in ("HOSTD_TEST_UNRELATED_SECRET", "HTTPS_PROXY", "GROQ_API_KEY"):
                    with pytest.raises(PermissionDenied) as refused:
                        await window.create_topic(
                            driver="openai",
                            model="fake-model",
                            working_dir=str(tmp_path),
                            options={**base, "api_key_env": name},
                        )
                    assert str(refused.value) == refusal(name)
                assert (await window.list_topics()) == []
                # 2. Once an assistant file names GROQ_API_KEY, any topic may use it.
                groq = write_assistant(
                    home,
                    "groq",
                    f'driver = "openai"\nmodel = "fake-model"\n[options]\n'
                    f'base_url = "{api.base_url}"\napi_key_env = "GROQ_API_KEY"\n',
                )
                topic = await window.create_topic(
                    driver="openai",
                    model="fake-model",
                    working_dir=str(tmp_path),
                    options={**base, "api_key_env": "GROQ_API_KEY"},
                )
                async with window.attach(topic.id) as sub:
                    await window.send(topic.id, "hello", intent="start")
                    end = await _turn_end(sub)
                assert end.status == "success", end
                await window.shutdown()
            await d.proc.wait()
            # 3. The file no longer names it: a restarted daemon starts no driver for the
            # stored topic; the turn ends with the same refusal, nothing is sent.
            groq.unlink()
            sent_before = len(api.chat_requests)
            d = await daemon_proc.start(home)
            async with open_client(paths) as window:
                async with window.attach(topic.id) as sub:
                    await window.send(topic.id, "hello again", intent="start")
                    end = await _turn_end(sub)
                await window.shutdown()
        finally:
            await d.terminate()
    assert (end.status, end.error_code, end.error) == (
        "error",
        "permission_denied",
        refusal("GROQ_API_KEY"),
    )
    assert len(api.chat_requests) == sent_before == 1
    (request,) = api.chat_requests
    assert request.headers.get("authorization") == f"Bearer {GROQ}"
    assert not [r for r in api.requests if STOLEN in str(r.headers)]


async def _turn_end(sub: object) -> TurnEnded:
    async for item in sub:  # type: ignore[attr-defined]
        if isinstance(item, TurnEnded):
            return item
    raise AssertionError("subscription ended before the turn did")


def test_hostd_new_refuses_with_one_line(home: Path, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOSTD_HOME")}
    env["HOSTD_HOME"] = str(home)
    env["HOSTD_TEST_UNRELATED_SECRET"] = STOLEN

    def hostd(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "hostd", *args],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            check=False,
        )

    try:
        assert hostd("serve", "--detach").returncode == 0
        proc = hostd(
            "new", "--driver", "openai", "--model", "m",
            "--option", "base_url=http://127.0.0.1:9/v1",
            "--option", "api_key_env=HOSTD_TEST_UNRELATED_SECRET",
        )  # fmt: skip
        assert proc.returncode != 0, proc
        assert proc.stderr.splitlines() == [
            f"hostd: {refusal('HOSTD_TEST_UNRELATED_SECRET')} [permission_denied]"
        ], proc.stderr
        assert hostd("topics", "--json").stdout.strip() == "[]"
    finally:
        hostd("stop")


async def test_a_window_cannot_send_the_daemon_s_key_to_a_server_it_picks(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The daemon holds OPENAI_API_KEY: a window's own `base_url` would receive it. Refused at
    creation unless the topic sends no key (`api_key_env = ""`, a local server) or an
    assistant file (only the local user writes those) has that base_url."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-daemon-held-0123456789")
    paths = Paths.under(home)
    with FakeOpenAI([Rule(anything, Text("ok"))]) as api, trio.fail_after(TIMEOUT):
        d = await daemon_proc.start(home)
        try:
            async with open_client(paths) as window:
                elsewhere = "http://127.0.0.1:9/v1"
                common = {"driver": "openai", "model": "fake-model", "working_dir": str(tmp_path)}
                with pytest.raises(PermissionDenied) as refused:
                    await window.create_topic(**common, options={"base_url": elsewhere})
                assert str(refused.value) == (
                    f"base_url {elsewhere!r} from a window would receive the daemon's "
                    'OPENAI_API_KEY: for a server without a key set `api_key_env = ""`, else '
                    "set base_url in the [options] of an assistant in the config dir's "
                    "assistants/ (`hostd paths` shows where)"
                )
                # Headers go along with the key (a Host header reroutes it): the same rule.
                with pytest.raises(PermissionDenied) as refused:
                    await window.create_topic(**common, options={"headers": {"Host": "x.example"}})
                assert str(refused.value) == (
                    "headers from a window would go out with the daemon's OPENAI_API_KEY: for a "
                    'server without a key set `api_key_env = ""`, else set headers in the '
                    "[options] of an assistant in the config dir's assistants/ (`hostd paths` "
                    "shows where)"
                )
                assert (await window.list_topics()) == []
                await window.create_topic(**common, options={"base_url": elsewhere,
                                                              "api_key_env": ""})
                # Per-message options over the topic's: refused alike, nothing stored; with
                # the topic's api_key_env = "" no key goes, so the window's server is fine.
                topic = await window.create_topic(**common)
                for options in ({"base_url": elsewhere}, {"headers": {"Host": "x.example"}}):
                    with pytest.raises(PermissionDenied):
                        await window.send(topic.id, "hi", options=options)
                assert (await window.history(topic.id)).rows == []
                write_assistant(home, "mine", f'driver = "openai"\n[options]\n'
                                f'base_url = "{api.base_url}"\n')
                await window.create_topic(**common, options={"base_url": api.base_url})
                await window.create_topic(**common)  # the default server: not the window's
        finally:
            await d.terminate()
