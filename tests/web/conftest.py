from __future__ import annotations

import shutil
import tempfile
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest


@pytest.fixture
def home() -> Iterator[Path]:
    # Short: the daemon's socket path must fit in sun_path.
    path = Path(tempfile.mkdtemp(prefix="hdw", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    # The browser tests' `pages` fixture reads this to keep a failing test's screenshots.
    report = yield
    if report.when == "call":
        item.stash[FAILED] = report.failed
    return report


FAILED = pytest.StashKey[bool]()
