"""Fixtures of tests/app: one Xvfb and one daemon per module, app processes per test."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.app.harness import AppProcess, Daemon, daemon, xvfb


@pytest.fixture(scope="module")
def display() -> Iterator[str]:
    with xvfb() as d:
        yield d


@pytest.fixture(scope="module")
def stack(display: str) -> Iterator[Daemon]:
    # Short: the daemon's socket path must fit in sun_path.
    home = Path(tempfile.mkdtemp(prefix="hda", dir="/tmp"))
    try:
        with daemon(home, display) as d:
            yield d
    finally:
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture
def apps(stack: Daemon) -> Iterator[Callable[[str], AppProcess]]:
    started: list[AppProcess] = []

    def start(topic: str = "") -> AppProcess:
        app = AppProcess(stack, topic)
        started.append(app)
        return app

    yield start
    for app in started:
        app.quit()
