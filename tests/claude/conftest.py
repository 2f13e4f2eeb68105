"""Fixtures of the Claude Code tests."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def home() -> Iterator[Path]:
    """A HOSTD_HOME of the test's own. Short: the socket path must stay under the AF_UNIX
    limit."""
    path = Path(tempfile.mkdtemp(prefix="hdc", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
