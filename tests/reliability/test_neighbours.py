"""Hostile neighbours (issue 14, items 5, 6 and 10): another local user who controls hostd's
folders or plants files in them, a socket swapped by another user, a second daemon on the
same data directory, a squatted runtime directory. Real daemon processes, a real second user
(root only, like tests/reliability/test_access.py).
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from hostd.client import open_client
from hostd.client.sync_wire import connect_unix
from hostd.shell.config import load_assistants
from hostd.shell.paths import Paths
from hostd_dev.stress.process import DaemonProcess
from hostd_protocol.errors import AccessDenied, ConfigError
from tests.reliability.conftest import start_in_process
from tests.reliability.test_access import other_user  # noqa: F401 - a fixture

pytestmark = pytest.mark.e2e

ASSISTANT = 'driver = "scripted"\nsystem_prompt = "planted"\n'


def _serve(
    home: Path | None, *extra: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`hostd serve` that is expected to refuse: its exit code and output."""
    argv = [sys.executable, "-m", "hostd", *(["--home", str(home)] if home else []), "serve",
            *extra]
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False,
                          env={**os.environ, **(env or {})})


def _one_clear_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1, result
    assert "Traceback" not in result.stderr, result.stderr
    lines = [ln for ln in result.stderr.splitlines() if ln.startswith("hostd: ")]
    assert len(lines) == 1, result.stderr
    return lines[0]


def _chown_tree(path: Path, uid: int) -> None:
    for root, dirs, files in os.walk(path):
        for name in [*dirs, *files]:
            os.lchown(os.path.join(root, name), uid, uid)
    os.lchown(path, uid, uid)


def test_folders_another_user_made_are_refused(home: Path, other_user: int) -> None:  # noqa: F811
    victim = home.parent / f"{home.name}-profile"
    victim.write_text("# my profile\n")
    try:
        # The attacker made data/, log/ and config/ (0777), a log that links to the victim's
        # profile, and an assistant.
        for name in ("data", "log", "config/assistants"):
            (home / name).mkdir(parents=True)
        (home / "log" / "hostd.log").symlink_to(victim)
        (home / "config" / "assistants" / "evil.toml").write_text(ASSISTANT)
        for name in ("data", "log", "config"):
            _chown_tree(home / name, other_user)
            os.chmod(home / name, 0o777)
        line = _one_clear_line(_serve(home))
        assert "is owned by uid" in line and str(other_user) in line, line
        assert victim.read_text() == "# my profile\n"

        # The same folders ours again, but the planted link and assistant still there.
        for name in ("data", "log", "config"):
            _chown_tree(home / name, os.getuid())
        os.lchown(home / "config" / "assistants" / "evil.toml", other_user, other_user)
        line = _one_clear_line(_serve(home))
        assert "symbolic link" in line, line
        assert victim.read_text() == "# my profile\n"
        (home / "log" / "hostd.log").unlink()
        catalog = load_assistants(home / "config")
        assert "evil" not in catalog.assistants
        assert any("refusing to load it" in e.message for e in catalog.errors), catalog.errors
        # A folder above HOSTD_HOME that others may write (not sticky) is refused too.
        os.chmod(home, 0o777)
        sub = home / "inner"
        sub.mkdir()
        line = _one_clear_line(_serve(sub))
        assert "is writable by others" in line, line
    finally:
        victim.unlink()


async def test_database_and_log_are_private_files(home: Path) -> None:
    with trio.fail_after(40):
        daemon = DaemonProcess(home, umask=0)
        await daemon.start()
        try:
            async with open_client(daemon.paths) as c:
                t = await c.create_topic(driver="scripted")
                await c.send(t.id, "/text private words\nq", "start")
        finally:
            await daemon.stop()
    p = Paths.under(home)
    for f in (p.db_path, p.log_path, p.data_lock_path):
        assert stat.S_IMODE(os.lstat(f).st_mode) == 0o600, f
    for d in (p.data_dir, p.config_dir, p.log_dir, p.runtime_dir):
        assert stat.S_IMODE(os.lstat(d).st_mode) == 0o700, d


FAKE_SERVER = r"""
import os, socket, sys, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(sys.argv[1]); os.chmod(sys.argv[1], 0o777); s.listen(8)
print("listening", flush=True)
conns = []
while True:
    c, _ = s.accept(); conns.append(c)
"""


async def test_a_socket_another_user_serves_is_refused_by_clients(
    home: Path, other_user: int  # noqa: F811
) -> None:
    paths = Paths.under(home)
    os.chmod(home, 0o755)
    paths.runtime_dir.mkdir(mode=0o755)
    os.chown(paths.runtime_dir, other_user, other_user)
    with trio.fail_after(60):
        proc = await trio.lowlevel.open_process(
            ["/usr/bin/python3", "-c", FAKE_SERVER, str(paths.socket_path)],
            user=other_user, stdout=subprocess.PIPE, cwd="/",
        )
        try:
            assert proc.stdout is not None
            assert (await proc.stdout.receive_some(100)).strip() == b"listening"
            with pytest.raises(AccessDenied, match=rf"^the hostd socket .* is served by uid "
                               rf"{other_user}, not by you"):
                connect_unix(paths.socket_path)
            with pytest.raises(AccessDenied):
                async with open_client(paths, autostart=False):
                    pass
            result = await trio.run_process(
                [sys.executable, "-m", "hostd", "--home", str(home), "send", "tp-x", "hello"],
                capture_stdout=True, capture_stderr=True, check=False,
            )
            stderr = result.stderr.decode()
            assert result.returncode != 0
            assert "Traceback" not in stderr
            assert f"served by uid {other_user}" in stderr, stderr
        finally:
            proc.kill()
            await proc.wait()
            assert proc.stdout is not None
            await proc.stdout.aclose()


def test_a_squatted_runtime_dir_is_one_clear_line(home: Path, other_user: int) -> None:  # noqa: F811
    """The platform folders (no HOSTD_HOME), with the runtime folder taken by another user:
    one line saying what is wrong and what to do, no traceback."""
    xdg = home / "xdg"
    (xdg / "hostd").mkdir(parents=True, mode=0o700)
    xdg.chmod(0o700)
    os.chown(xdg / "hostd", other_user, other_user)
    env = {"HOSTD_HOME": "", "XDG_RUNTIME_DIR": str(xdg)}
    for name in ("XDG_DATA_HOME", "XDG_CONFIG_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME"):
        env[name] = str(home / name.lower())  # never the real folders, whatever happens
    line = _one_clear_line(_serve(None, env=env))
    assert "owned by uid" in line and "XDG_RUNTIME_DIR" in line, line


async def test_two_daemons_on_one_data_dir_are_refused(
    nursery: trio.Nursery, home: Path
) -> None:
    a = Paths.under(home)
    b = Paths(runtime_dir=home / "run-b", data_dir=a.data_dir, config_dir=a.config_dir,
              log_dir=a.log_dir)
    with trio.fail_after(30):
        first = await start_in_process(nursery, a)
        with pytest.raises(ConfigError, match=r"^the data directory .* is in use by another "
                           rf"hostd \(pid {os.getpid()}\)"):
            await start_in_process(nursery, b)
        await first.stop()
        second = await start_in_process(nursery, b)  # free again
        await second.stop()


def test_a_home_that_cannot_hold_folders_is_one_clear_line(home: Path) -> None:
    """HOSTD_HOME that is a file (or under one): one line saying so, not an OSError's traceback."""
    a_file = home / "notes.txt"
    a_file.write_text("not a folder\n")
    line = _one_clear_line(_serve(a_file))
    assert "notes.txt" in line and "Not a directory" in line, line
