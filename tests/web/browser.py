"""The browser-test stack: the real daemon, the real `hostd web` command, Debian's chromium.

Chromium is Debian's `/usr/bin/chromium` (installed by scripts/setup), driven by Playwright
from PyPI with `executable_path`: no browser is downloaded. Playwright's `launch` gives every
run a fresh temporary profile (its own `--user-data-dir`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect

from hostd.client.sync_wire import request
from hostd.shell.paths import Paths
from hostd_protocol.client_messages import CreateTopic, History, MessageRow
from hostd_protocol.common import TextDelta

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
#: Every browser test module's `pytestmark`: end to end, needs chromium (skipped, saying how
#: to get it, when it is missing).
BROWSER_TEST_MARKS = [
    pytest.mark.e2e,
    pytest.mark.browser,
    pytest.mark.skipif(
        not os.path.exists(CHROMIUM), reason="chromium is not installed (scripts/setup installs it)"
    ),
]
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
#: Where the tests keep their screenshots (gitignored); a failing test's pages are kept too.
SCREENSHOTS = Path(__file__).resolve().parents[2] / ".artifacts" / "web-screenshots"
#: How long any one expectation waits (the machine is shared; waits end on the condition).
WAIT_MS = 20_000
expect.set_options(timeout=WAIT_MS)


@dataclass
class WebStack:
    home: Path
    url: str
    gateway: subprocess.Popen[str]

    @property
    def paths(self) -> Paths:
        return Paths.under(self.home)

    @property
    def base(self) -> str:
        return self.url.split("/?", 1)[0]

    @property
    def token(self) -> str:
        return self.url.split("token=", 1)[1]

    def create_topic(self, title: str, scenario: str = "echo") -> str:
        result = request(
            self.paths,
            CreateTopic(id=1, title=title, driver="scripted", options={"scenario": scenario, "chunk_rate": 200}),
        )
        return str(result.topic.id)

    def history(self, topic_id: str) -> list[MessageRow]:
        return list(request(self.paths, History(id=1, topic_id=topic_id)).rows)


def start_stack(home: Path, env: dict[str, str] | None = None) -> Iterator[WebStack]:
    """The real daemon and `hostd web` on `home`; `env`: their environment instead of this
    process's."""
    env = {**(os.environ if env is None else env), "HOSTD_HOME": str(home)}
    hostd = [sys.executable, "-m", "hostd", "--home", str(home)]
    subprocess.run([*hostd, "serve", "--detach"], check=True, capture_output=True, env=env, timeout=60)
    gateway = subprocess.Popen(
        [*hostd, "web"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env
    )
    try:
        assert gateway.stdout is not None
        line = gateway.stdout.readline()
        match = re.fullmatch(r"hostd web: (http://127\.0\.0\.1:\d+/\?token=[\w-]+)\n", line)
        assert match, f"unexpected first line from `hostd web`: {line!r}"
        yield WebStack(home=home, url=match.group(1), gateway=gateway)
    finally:
        gateway.terminate()
        try:
            gateway.wait(timeout=10)
        except subprocess.TimeoutExpired:
            gateway.kill()
            gateway.wait()
        if gateway.stdout is not None:
            gateway.stdout.close()
        subprocess.run([*hostd, "stop"], capture_output=True, env=env, timeout=60, check=False)


def row_text(row: MessageRow) -> str:
    return "".join(p.text for p in row.parts if isinstance(p, TextDelta))


def open_topic(browser: Browser, stack: WebStack, topic_id: str) -> Page:
    """A new window (own context: own cookie jar, like another browser window) on the topic
    (on none when `topic_id` is "")."""
    context = browser.new_context(viewport={"width": 1200, "height": 860})
    page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    page.goto(stack.url)  # the gateway moves the token into a cookie and redirects to /
    page.wait_for_selector("[data-conn=online]")
    if topic_id:
        page.evaluate("id => { location.hash = 'topic=' + id }", topic_id)
        page.wait_for_selector("[data-testid=composer]")
    return page


def rows_of(page: Page) -> list[dict[str, str]]:
    """The transcript as the page shows it: label, role, status, raw text of every row."""
    result: Any = page.evaluate(f"() => {ROWS_JS}")
    return list(result)


ROWS_JS = (
    "[...document.querySelectorAll('[data-testid=row]')].map(e => ({label: e.dataset.label,"
    " role: e.dataset.role, status: e.dataset.status, text: e.dataset.text}))"
)


def wait_rows(page: Page, predicate_js: str) -> None:
    """Wait until the JS expression `predicate_js` over `rows` (as `rows_of` returns them) is
    true. Evaluated through the DevTools protocol, so the page's CSP (no eval) does not apply."""
    page.wait_for_function(f"() => {{ const rows = {ROWS_JS}; return {predicate_js}; }}")


def type_and_send(page: Page, text: str, *, key: str = "Enter") -> None:
    box = page.locator("[data-testid=composer]")
    box.fill(text)
    box.press(key)


def screenshot(page: Page, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path))
    return path


def js(value: object) -> str:
    return json.dumps(value)
