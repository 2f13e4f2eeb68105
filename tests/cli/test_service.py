"""`hostd service`: the systemd user unit it writes is valid (`systemd-analyze verify`), runs
this interpreter's `hostd serve`, and uninstall removes it (issue 15, item 11)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest


def hostd(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hostd", *args],
        capture_output=True, text=True, timeout=60, check=False, env=env,
    )


@pytest.mark.skipif(sys.platform == "darwin", reason="the launchd plist is not checked here")
def test_install_writes_a_valid_unit_and_uninstall_removes_it(tmp_path: Path) -> None:
    env = {**os.environ, "HOSTD_HOME": str(tmp_path / "h")}
    proc = hostd("service", "install", "--dir", str(tmp_path), env=env)
    assert proc.returncode == 0, proc.stderr
    unit = tmp_path / "hostd.service"
    text = unit.read_text()
    assert f"ExecStart={sys.executable} -m hostd serve\n" in text
    assert f"Environment=HOSTD_HOME={tmp_path / 'h'}\n" in text
    assert "WantedBy=default.target" in text
    if shutil.which("systemd-analyze"):
        verify = subprocess.run(
            ["systemd-analyze", "verify", str(unit)],
            capture_output=True, text=True, timeout=60, check=False,
        )
        assert verify.returncode == 0, verify.stderr
        assert verify.stderr.strip() == "", verify.stderr
    shown = hostd("service", "show", "--dir", str(tmp_path), env=env)
    assert shown.stdout == f"# {unit}\n{text}"
    removed = hostd("service", "uninstall", "--dir", str(tmp_path), env=env)
    assert removed.returncode == 0 and not unit.exists()
    again = hostd("service", "uninstall", "--dir", str(tmp_path), env=env)
    assert again.returncode == 0 and "no service installed" in again.stdout
