"""`--autostart` when the daemon refuses to start: its reason once, in one line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def test_a_daemon_that_cannot_autostart_is_told_once(tmp_path: Path) -> None:
    """`--autostart` when the daemon refuses to start (here: a config.toml it cannot read):
    the daemon's own reason once, not "could not start hostd: hostd: hostd did not start:"."""
    config = tmp_path / "config"
    config.mkdir(parents=True)
    tmp_path.chmod(0o700)
    config.chmod(0o700)
    (config / "config.toml").write_text("[tracing\n")
    (config / "config.toml").chmod(0o600)
    done = subprocess.run(
        [sys.executable, "-m", "hostd", "--home", str(tmp_path), "new", "--autostart",
         "--driver", "scripted"],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
        env={**os.environ, "HOSTD_HOME": str(tmp_path)},
    )
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("hostd: could not start hostd: cannot read "), done.stderr
    assert "hostd: hostd" not in done.stderr and "did not start" not in done.stderr, done.stderr
