"""The default folders without HOSTD_HOME: a private runtime dir chosen quietly, with or
without XDG_RUNTIME_DIR (issue 15, item 7)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from hostd.shell.paths import default_runtime_dir, ensure_private_dir

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux rules")


def test_xdg_runtime_dir_is_used_when_the_session_has_one(tmp_path: Path) -> None:
    tmp_path.chmod(0o700)
    assert default_runtime_dir({"XDG_RUNTIME_DIR": str(tmp_path)}) == tmp_path / "hostd"


def test_without_xdg_runtime_dir_a_private_folder_per_user(tmp_path: Path) -> None:
    run_user = Path(f"/run/user/{os.getuid()}")
    if run_user.is_dir():
        pytest.skip("this machine has a logind runtime dir")
    expected = Path(tempfile.gettempdir()) / f"hostd-{os.getuid()}"
    assert default_runtime_dir({}) == expected
    # A variable naming nothing usable (or something others can enter) is as good as none.
    assert default_runtime_dir({"XDG_RUNTIME_DIR": "relative/dir"}) == expected
    assert default_runtime_dir({"XDG_RUNTIME_DIR": str(tmp_path / "gone")}) == expected
    tmp_path.chmod(0o755)
    assert default_runtime_dir({"XDG_RUNTIME_DIR": str(tmp_path)}) == expected


def test_the_folder_is_made_private_whatever_the_umask(tmp_path: Path) -> None:
    run = tmp_path / "hostd-1000"
    old = os.umask(0)
    try:
        ensure_private_dir(run)
    finally:
        os.umask(old)
    assert stat.S_IMODE(run.stat().st_mode) == 0o700


def test_commands_say_nothing_about_the_runtime_dir(tmp_path: Path) -> None:
    """`hostd paths` with no HOSTD_HOME and no XDG_RUNTIME_DIR: no RuntimeDirWarning, and
    the socket in the per-user folder."""
    env = {k: v for k, v in os.environ.items() if k not in ("XDG_RUNTIME_DIR", "HOSTD_HOME")}
    env["HOME"] = str(tmp_path)  # keep platformdirs' data/config folders in the test's dir
    env["TMPDIR"] = str(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-W", "error", "-m", "hostd", "paths"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert f"{tmp_path}/hostd-{os.getuid()}/hostd.sock" in proc.stdout
