"""The page's TypeScript type-checks against the client package it is built on (`tsc`), so a
change of `hostd-client`'s types that breaks the page is a test failure, not a broken UI."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[2] / "hostd" / "web" / "page"


@pytest.mark.skipif(shutil.which("npx") is None, reason="Node.js is not installed")
def test_page_typechecks() -> None:
    if not (PAGE / "node_modules" / "typescript").is_dir():
        pytest.fail("the page's npm packages are missing: run scripts/setup")
    proc = subprocess.run(
        ["npx", "--no-install", "tsc", "--noEmit", "-p", "tsconfig.json"],
        cwd=PAGE, capture_output=True, text=True, timeout=300, check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
