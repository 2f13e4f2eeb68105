"""Shared fixtures of tests/web: a temporary home; for the browser tests (test_browser*.py) a
stack per module (the real daemon and `hostd web`), Debian's chromium, and windows on a topic
that are photographed when their test failed."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Generator, Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, Playwright, sync_playwright

from tests.web.browser import CHROMIUM, CHROMIUM_ARGS, WebStack, open_topic, screenshot, start_stack

STATIC = Path(__file__).resolve().parents[2] / "hostd" / "web" / "static" / "index.html"


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


@pytest.fixture(scope="module")
def stack() -> Iterator[WebStack]:
    if not STATIC.is_file():
        pytest.fail("the page is not built: run scripts/setup")
    home = Path(tempfile.mkdtemp(prefix="hdb", dir="/tmp"))
    try:
        yield from start_stack(home)
    finally:
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="module")
def playwright() -> Iterator[Playwright]:
    with sync_playwright() as p:
        yield p


@pytest.fixture(scope="module")
def browser(playwright: Playwright) -> Iterator[Browser]:
    b = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
    try:
        yield b
    finally:
        b.close()


@pytest.fixture
def pages(request: pytest.FixtureRequest, browser: Browser, stack: WebStack) -> Iterator[Callable[[str], Page]]:
    """Open windows on a topic; closed after the test (photographed first if it failed)."""
    opened: list[Page] = []

    def open_page(topic_id: str) -> Page:
        page = open_topic(browser, stack, topic_id)
        opened.append(page)
        return page

    yield open_page
    failed = request.node.stash.get(FAILED, False)
    for i, page in enumerate(opened):
        if failed:
            screenshot(page, f"FAILED-{request.node.name}-page{i}")
        page.context.close()
