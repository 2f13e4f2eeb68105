"""scripts/check-lock (run by scripts/test): the environment the tests run in is uv.lock, and an
environment that differs fails in one line that says what differs and what to do."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _check(env_dir: Path | None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if env_dir is not None:
        env["UV_PROJECT_ENVIRONMENT"] = str(env_dir)
    return subprocess.run([str(ROOT / "scripts" / "check-lock")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120, check=False)


def test_the_set_up_environment_matches_the_lock() -> None:
    proc = _check(None)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""


def test_an_environment_that_differs_fails_in_one_line(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([str(ROOT / "scripts" / "uv"), "venv", "--quiet", "--python", sys.executable,
                    str(venv)], check=True, timeout=120)
    proc = _check(venv)
    assert proc.returncode == 1
    (line,) = proc.stderr.splitlines()
    assert line.startswith("test: the environment differs from uv.lock (to match it: +")
    assert line.endswith("more); run scripts/setup to install the locked versions.")
