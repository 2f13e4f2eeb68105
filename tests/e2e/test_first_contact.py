"""First contact: a fresh home, the user's Claude Code login, and nothing else set up.

The real `hostd` command (subprocesses), the real daemon it starts, the real Claude Code
driver running the real bundled CLI, against the fake Messages API. The user is "logged in"
with a fake `~/.claude/.credentials.json` (what `claude` writes after /login); there is no
API key anywhere. Without that file, `hostd new` refuses with the one-line fix.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes.anthropic_api import FakeAnthropicAPI, Rule, text, user_says

pytestmark = [pytest.mark.claude, pytest.mark.e2e]

TIMEOUT = 90


@pytest.fixture
def root() -> Iterator[Path]:
    # Short: the daemon's socket lives under it (AF_UNIX path limit).
    path = Path(tempfile.mkdtemp(prefix="hfc", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def user_env(root: Path, base_url: str) -> dict[str, str]:
    """A new user's shell: their own HOME, a fresh hostd home, no API key."""
    home = root / "home"
    home.mkdir(exist_ok=True)
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "LANG": os.environ.get("LANG", "C.UTF-8"),
        "HOME": str(home),
        "HOSTD_HOME": str(root / "h"),
        # The only test plumbing: where the (fake) Messages API is.
        "ANTHROPIC_BASE_URL": base_url,
        "CLAUDE_CODE_MAX_RETRIES": "2",
    }


def log_in(home: Path) -> Path:
    """What `claude` /login leaves behind for a claude.ai account."""
    creds = home / ".claude" / ".credentials.json"
    creds.parent.mkdir(parents=True, exist_ok=True)
    creds.write_text(
        json.dumps(
            {
                "claudeAiOauth": {
                    "accessToken": "sk-ant-oat01-fake-access",
                    "refreshToken": "sk-ant-ort01-fake-refresh",
                    "expiresAt": int(time.time() * 1000) + 24 * 3600 * 1000,
                    "scopes": ["user:inference", "user:profile"],
                    "subscriptionType": "max",
                }
            }
        )
    )
    creds.chmod(0o600)
    return creds


def hostd(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hostd", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )


def test_logged_in_user_gets_an_answer_with_no_set_up(root: Path) -> None:
    project = root / "project"
    project.mkdir()
    with FakeAnthropicAPI([Rule(user_says("hi"), text("Hello from Claude!"))]) as api:
        env = user_env(root, api.base_url)
        creds = log_in(Path(env["HOME"]))
        started = hostd(env, project, "serve", "--detach")
        assert started.returncode == 0, started.stderr
        try:
            drivers = hostd(env, project, "drivers")
            assert f"Claude Code login ({creds})" in drivers.stdout, drivers.stdout
            assert "checked in the daemon's environment" in drivers.stdout

            # A misspelt driver option is refused at once, with the closest known name.
            typo = hostd(env, project, "new", "--option", "permision_mode=plan")
            assert typo.returncode == 1
            assert "unknown option 'permision_mode' for driver 'claude-code' (did you mean " \
                "'permission_mode'?)" in typo.stderr
            assert len(typo.stderr.splitlines()) == 1

            new = hostd(env, project, "new")
            assert new.returncode == 0, new.stderr
            topic = new.stdout.strip()

            sent = hostd(env, project, "send", topic, "hi", "--follow")
            assert sent.returncode == 0, sent.stdout + sent.stderr
            assert "Hello from Claude!" in sent.stdout

            topics = hostd(env, project, "topics")
            assert topic in topics.stdout and "claude-code" in topics.stdout
            assert str(project) in topics.stdout
        finally:
            stopped = hostd(env, project, "stop")
        assert stopped.returncode == 0, stopped.stderr
        # The CLI used the login as is: the OAuth token, no key, and no copy of the file.
        request = api.message_requests[-1]
        assert "oauth" in request.headers.get("anthropic-beta", "")
        assert json.loads(creds.read_text())["claudeAiOauth"]["accessToken"].endswith("access")
        # Nothing of hostd's or the CLI's lands in the user's project.
        assert sorted(p.name for p in project.iterdir()) == []


def test_no_credential_is_refused_at_new_with_the_fix(root: Path) -> None:
    project = root / "project"
    project.mkdir()
    with FakeAnthropicAPI([]) as api:
        env = user_env(root, api.base_url)
        drivers = hostd(env, project, "drivers")
        assert "claude-code: fix: log in once with `claude`" in drivers.stdout, drivers.stdout
        assert "the daemon is not running" in drivers.stdout
        assert hostd(env, project, "serve", "--detach").returncode == 0
        try:
            new = hostd(env, project, "new")
        finally:
            hostd(env, project, "stop")
        assert api.requests == []
    assert new.returncode == 1
    assert new.stdout == ""
    lines = new.stderr.splitlines()
    assert len(lines) == 1, new.stderr
    assert lines[0].startswith("hostd: no driver is ready for a new topic: driver 'claude-code' ")
    assert "log in once with `claude` (then /login), or set ANTHROPIC_API_KEY" in lines[0]
    assert lines[0].endswith("[auth_required]")
