"""Fixtures of the reliability suite: a short HOSTD_HOME per test (AF_UNIX paths are short),
and the seed every randomised attack uses (`HOSTD_STRESS_SEED`, printed on failure)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def home() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="hdr", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def seed() -> int:
    return int(os.environ.get("HOSTD_STRESS_SEED", "9"))
