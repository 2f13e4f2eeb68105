"""`hostd web` restarted on a fixed `--port` under an open tab, in real chromium against the
real daemon and the real command: the tab says the gateway is gone, reconnects by itself when
it is back (the token is kept for that port), and after `--new-token` says to open the newly
printed URL, which then works."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from playwright.sync_api import Browser, expect

from tests.web.browser import BROWSER_TEST_MARKS, WAIT_MS, type_and_send, wait_rows

pytestmark = BROWSER_TEST_MARKS


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def gateway(home: Path, *args: str) -> Iterator[str]:
    """`hostd web` running; yields the URL it printed; SIGTERM on the way out."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "hostd", "--home", str(home), "web", *args],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        match = re.fullmatch(r"hostd web: (http://127\.0\.0\.1:\d+/\?token=[\w-]+)\n", line)
        assert match, f"unexpected first line from `hostd web`: {line!r}"
        yield match.group(1)
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0
        if proc.stdout is not None:
            proc.stdout.close()


def test_a_tab_survives_a_gateway_restart_on_the_same_port(browser: Browser) -> None:
    home = Path(tempfile.mkdtemp(prefix="hdg", dir="/tmp"))
    hostd = [sys.executable, "-m", "hostd", "--home", str(home)]
    env = {**os.environ, "HOSTD_HOME": str(home)}
    subprocess.run([*hostd, "serve", "--detach"], check=True, capture_output=True, env=env, timeout=60)
    port = str(free_port())
    context = browser.new_context()
    try:
        page = context.new_page()
        page.set_default_timeout(WAIT_MS)
        status = page.get_by_role("status", name="Connection")
        with gateway(home, "--port", port) as url:
            page.goto(url)
            expect(status).to_have_text("connected")
            page.get_by_role("button", name="+ New").click()
            page.get_by_role("form", name="New topic").get_by_role("textbox", name="Title").fill("restarts")
            page.get_by_role("combobox", name="Driver").select_option("scripted")
            page.get_by_role("button", name="Create").click()
            type_and_send(page, "before")
            wait_rows(page, "rows.length === 2 && rows[1].status === 'success'")
        # The gateway is gone: the tab says so, and what to do.
        expect(status).to_contain_text("offline")
        expect(page.get_by_test_id("conn-reason")).to_contain_text("hostd web is not running")
        with gateway(home, "--port", port) as again:
            assert again == url  # the same token on the same port
            expect(status).to_have_text("connected")  # by itself: no reload, no new URL
            type_and_send(page, "after")
            wait_rows(page, "rows.length === 4 && rows[3].status === 'success'")
        with gateway(home, "--port", port, "--new-token") as renewed:
            assert renewed != url
            expect(page.get_by_test_id("conn-reason")).to_contain_text("restarted with a new token: open the URL it printed")
            page.goto(renewed)  # what the message says to do
            expect(status).to_have_text("connected")
            expect(page.get_by_role("navigation", name="Topics").get_by_role("link", name="restarts")).to_be_visible()
    finally:
        context.close()
        subprocess.run([*hostd, "stop"], capture_output=True, env=env, timeout=60, check=False)
        shutil.rmtree(home, ignore_errors=True)
