"""The web UI in a real browser (Debian's headless chromium) against the real daemon and the
real `hostd web` command, with the scripted driver.

Every wait ends on a condition in the page (a row with that label and status, an approval
gone), never on time. Screenshots of the main states go to .artifacts/web-screenshots/; when a
test fails, every page it opened is photographed there too.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page

from hostd.client.sync_wire import request
from hostd_protocol.client_messages import ListSchedules, ListTopics
from tests.web.browser import (
    BROWSER_TEST_MARKS,
    WebStack,
    js,
    open_topic,
    row_text,
    rows_of,
    screenshot,
    start_stack,
    type_and_send,
    wait_rows,
)

pytestmark = BROWSER_TEST_MARKS

STEER_SCRIPT = "/text Working on it, **reading** the file now.\n/tool Read wait-steer=30\n/text That is all."


def test_steer_in_a_rolls_the_answer_in_both_pages(stack: WebStack, pages: Callable[[str], Page]) -> None:
    topic = stack.create_topic("steer", STEER_SCRIPT)
    a, b = pages(topic), pages(topic)
    type_and_send(a, "Read the README please")
    # The answer streams and waits at the tool for a steer: type it in A while it streams.
    for page in (a, b):
        wait_rows(page, "rows.length === 2 && rows[1].status === 'pending' && rows[1].text.includes('reading')")
        page.wait_for_selector("[data-testid=tool-card]")
    screenshot(a, "steer-1-streaming")
    type_and_send(a, "Also check the tests")
    want = "rows.map(r => r.label).join() === 'U1,A1a,U2,A2' && rows[3].status === 'success'"
    wait_rows(a, want)
    wait_rows(b, want)
    shown_a, shown_b = rows_of(a), rows_of(b)
    assert shown_a == shown_b
    stored = [(r.role, r.status, row_text(r)) for r in stack.history(topic)]
    assert [(r["role"], r["status"], r["text"]) for r in shown_a] == stored
    assert [r["text"] for r in shown_a[:3]] == [
        "Read the README please",
        "Working on it, **reading** the file now.",
        "Also check the tests",
    ]
    assert shown_a[3]["text"].startswith("You said: Also check the tests. Taking that into account.")
    assert shown_a[3]["text"].endswith("That is all.")
    # Markdown rendered (bold), labels drawn.
    assert a.locator("[data-label=A1a] .md strong").inner_text() == "reading"
    screenshot(a, "steer-2-rolled-page-a")
    screenshot(b, "steer-2-rolled-page-b")


#: A richer answer (thinking, Markdown with code, a tool card, then an approval): it also
#: makes the README's screenshot (docs/web-ui.png is a copy of approval-1-page-a.png).
APPROVE_SCRIPT = "/think Checking how the project builds before running anything.\n/echo\n/tool Read pause=0.1 output=ok\n/approve Bash"
APPROVE_PROMPT = "Run the build. The entry point is:\n\n```python\ndef main() -> int:\n    return build(\"all\")\n```"


def test_approval_answered_in_b_disappears_from_a(stack: WebStack, pages: Callable[[str], Page]) -> None:
    topic = stack.create_topic("approve", APPROVE_SCRIPT)
    a, b = pages(topic), pages(topic)
    b.emulate_media(color_scheme="dark")
    a.locator("[data-testid=composer]").fill(APPROVE_PROMPT)
    a.locator("[data-testid=send]").click()
    for page in (a, b):
        page.wait_for_selector("[data-testid=approval]")
        page.wait_for_selector("[data-label=A1] .hljs")  # the echoed code block, highlighted
    screenshot(a, "approval-1-page-a")
    screenshot(b, "approval-1-page-b-dark")
    b.locator("[data-testid=approval] [data-testid=allow]").click()
    for page in (a, b):
        page.wait_for_selector("[data-testid=approval]", state="detached")
        wait_rows(page, "rows.length === 2 && rows[1].status === 'success'")
        assert rows_of(page)[1]["text"].endswith("approved: ran Bash.")
    assert rows_of(a) == rows_of(b)
    assert a.locator("[data-label=A1] details.thinking").get_attribute("open") is None  # folded


def test_reload_mid_stream_restores_the_transcript_and_keeps_streaming(
    stack: WebStack, pages: Callable[[str], Page]
) -> None:
    topic = stack.create_topic("reload", STEER_SCRIPT)
    a, b = pages(topic), pages(topic)
    type_and_send(a, "go")
    # The whole first text (not just a word of it: it streams in pieces), and the tool's
    # wait-steer holds the answer there, so the snapshot after the reload must equal this.
    wait_rows(a, "rows.length === 2 && rows[1].status === 'pending' && rows[1].text.includes('the file now.')")
    before = rows_of(a)
    a.reload()
    a.wait_for_selector("[data-conn=online]")
    wait_rows(a, f"JSON.stringify(rows) === {js(json.dumps(before, separators=(',', ':'), ensure_ascii=False))}")
    assert rows_of(a) == before  # the same rows, still pending: the turn was never stopped
    screenshot(a, "reload-1-restored")
    # It keeps streaming into the reloaded page: steer from B, A follows to the end.
    type_and_send(b, "continue")
    want = "rows.map(r => r.label).join() === 'U1,A1a,U2,A2' && rows[3].status === 'success'"
    wait_rows(a, want)
    wait_rows(b, want)
    assert rows_of(a) == rows_of(b)
    assert [r["text"] for r in rows_of(a)] == [row_text(r) for r in stack.history(topic)]


def test_stop_keeps_partial_queue_turns_into_drafts_and_send_now(
    stack: WebStack, pages: Callable[[str], Page]
) -> None:
    topic = stack.create_topic("stop", "echo")
    a, b = pages(topic), pages(topic)
    type_and_send(a, "/text A partial answer\n/wait")
    wait_rows(a, "rows.length === 2 && rows[1].text === 'A partial answer'")
    type_and_send(a, "first queued", key="Alt+Enter")
    type_and_send(b, "second queued", key="Alt+Enter")
    for page in (a, b):
        page.wait_for_function("() => document.querySelectorAll('[data-testid=unsent][data-status=queued]').length === 2")
    screenshot(a, "stop-1-queued")
    a.locator("[data-testid=composer]").press("Escape")  # Esc stops
    for page in (a, b):
        wait_rows(page, "rows.length === 2 && rows[1].status === 'stopped'")
        page.wait_for_function("() => document.querySelectorAll('[data-testid=unsent][data-status=draft]').length === 2")
        assert rows_of(page)[1]["text"] == "A partial answer"
    screenshot(b, "stop-2-drafts")
    # Edit a draft in B, discard the other in A, send the edited one now from A.
    second = b.locator("[data-testid=unsent][data-text='second queued']")
    second.locator("[data-testid=edit]").click()
    b.locator(".unsent-edit").fill("second, edited")
    b.locator(".unsent-edit").press("Enter")
    a.wait_for_selector("[data-testid=unsent][data-text='second, edited']")
    a.locator("[data-testid=unsent][data-text='first queued'] [data-testid=discard]").click()
    b.wait_for_selector("[data-testid=unsent][data-text='first queued']", state="detached")
    a.locator("[data-testid=unsent][data-text='second, edited'] [data-testid=send-now]").click()
    for page in (a, b):
        wait_rows(page, "rows.length === 4 && rows[3].status === 'success'")
        page.wait_for_selector("[data-testid=unsent]", state="detached")
    assert [r["text"] for r in rows_of(a)] == ["/text A partial answer\n/wait", "A partial answer", "second, edited", "second, edited"]
    assert rows_of(a) == rows_of(b)
    assert [(r.status, row_text(r)) for r in stack.history(topic)] == [
        (r["status"], r["text"]) for r in rows_of(a)
    ]


def test_topics_are_created_renamed_and_deleted_from_the_page(stack: WebStack, pages: Callable[[str], Page]) -> None:
    a = pages("")
    a.locator("[data-testid=new-topic]").click()
    form = a.locator("[data-testid=new-topic-form]")
    form.locator("input[name=title]").fill("made in the page")
    form.locator("select[name=driver]").select_option("scripted")
    form.locator("input[name=model]").fill("model-x")
    form.locator("input[name=working_dir]").fill("/tmp")
    form.locator("button[type=submit]").click()
    a.wait_for_selector("[data-testid=composer]")
    assert a.locator(".topic-head h1").inner_text() == "made in the page"
    assert a.locator(".topic-head .meta").inner_text() == "scripted · model-x"
    topic_id = a.evaluate("() => location.hash.split('=')[1]")
    item = a.locator("[data-testid=topic-item]", has_text="made in the page")
    item.hover()
    item.locator("button[title=rename]").click()
    a.get_by_role("dialog", name="Rename topic").get_by_role("textbox").fill("renamed")
    a.get_by_role("dialog", name="Rename topic").get_by_role("textbox").press("Enter")
    a.wait_for_selector(".topic-head h1:text-is('renamed')")
    renamed = a.locator("[data-testid=topic-item]", has_text="renamed")
    renamed.hover()
    renamed.locator("button[title=delete]").click()
    a.get_by_role("dialog", name="Delete topic").get_by_role("button", name="Delete").click()
    a.wait_for_selector("[data-testid=topic-item]:has-text('renamed')", state="detached")
    a.wait_for_selector(".empty-topic")
    assert topic_id not in [t.id for t in request(stack.paths, ListTopics(id=1)).topics]


def test_compaction_status_marker_and_usage(stack: WebStack, pages: Callable[[str], Page]) -> None:
    topic = stack.create_topic("compact", "/text Before.\n/compact anchor duration=4\n/usage 1200 340\n/text After.")
    a = pages(topic)
    type_and_send(a, "compact please")
    a.wait_for_selector("[data-testid=compacting]")
    assert a.get_attribute("[data-testid=topic-state]", "data-state") == "compacting"
    screenshot(a, "compact-1-compacting")
    a.wait_for_selector("[data-testid=marker]")
    wait_rows(a, "rows.length === 2 && rows[1].status === 'success'")
    a.wait_for_selector("[data-testid=compacting]", state="detached")
    assert a.inner_text("[data-testid=marker]") == "Context compacted (120000 → 8000 tokens)"
    assert a.inner_text("[data-testid=usage]") == "in 1200 · out 340"


def test_no_token_is_401_and_a_foreign_origin_websocket_is_refused(stack: WebStack, browser: Browser) -> None:
    context = browser.new_context()
    try:
        page = context.new_page()
        response = page.goto(stack.base + "/")
        assert response is not None and response.status == 401
        assert "a token is required" in page.inner_text("body")
        # A page of another origin that knows the URL (even the token) cannot open the socket.
        page.route("http://evil.test/", lambda route: route.fulfill(status=200, content_type="text/html", body="<p>evil</p>"))
        page.goto("http://evil.test/")
        outcome = page.evaluate(
            """url => new Promise(resolve => {
                const ws = new WebSocket(url);
                ws.onopen = () => resolve("open");
                ws.onclose = ev => resolve("closed " + ev.code);
            })""",
            f"ws://127.0.0.1:{stack.base.rsplit(':', 1)[1]}/ws?token={stack.token}",
        )
        assert outcome == "closed 1006"  # the upgrade was answered 403: never opened
    finally:
        context.close()


def test_daemon_restart_shows_offline_then_reconnects(browser: Browser) -> None:
    """Its own stack: it stops the daemon under the gateway (the page shows why it is
    offline), starts it again, and the page re-attaches and goes on."""
    home = Path(tempfile.mkdtemp(prefix="hdr", dir="/tmp"))
    stacks = start_stack(home)
    stack = next(stacks)
    page: Page | None = None
    try:
        topic = stack.create_topic("restart", "echo")
        page = open_topic(browser, stack, topic)
        type_and_send(page, "before the restart")
        wait_rows(page, "rows.length === 2 && rows[1].status === 'success'")
        hostd = [sys.executable, "-m", "hostd", "--home", str(home)]
        subprocess.run([*hostd, "stop"], check=True, capture_output=True, timeout=60)
        page.wait_for_selector("[data-conn=offline]")
        reason = page.get_attribute("[data-testid=conn]", "title") or ""
        assert "the daemon closed the connection" in reason or "hostd is not running" in reason
        screenshot(page, "restart-1-offline")
        subprocess.run([*hostd, "serve", "--detach"], check=True, capture_output=True, timeout=60)
        page.wait_for_selector("[data-conn=online]")
        type_and_send(page, "after the restart")
        wait_rows(page, "rows.length === 4 && rows[3].status === 'success'")
        assert [r["text"] for r in rows_of(page)] == [row_text(r) for r in stack.history(topic)]
        assert [r["text"] for r in rows_of(page)][2:] == ["after the restart", "after the restart"]
    finally:
        if page is not None:
            page.context.close()
        stacks.close()
        shutil.rmtree(home, ignore_errors=True)


@pytest.mark.slow
def test_a_fast_long_answer_reaches_both_pages_whole(stack: WebStack, pages: Callable[[str], Page]) -> None:
    """4000 chunks as fast as the driver writes them, through the gateway to two pages."""
    topic = stack.create_topic("burst", "/chunks 4000 size=16 rate=0")
    a, b = pages(topic), pages(topic)
    type_and_send(a, "go")
    for page in (a, b):
        wait_rows(page, "rows.length === 2 && rows[1].status === 'success'")
    stored = [row_text(r) for r in stack.history(topic)]
    assert len(stored[1]) == 4000 * 16
    assert [r["text"] for r in rows_of(a)] == stored
    assert [r["text"] for r in rows_of(b)] == stored


def test_schedule_added_from_the_page_runs_now_into_the_transcript(
    stack: WebStack, pages: Callable[[str], Page]
) -> None:
    topic = stack.create_topic("scheduled")
    page = pages(topic)
    page.locator("[data-testid=schedules-toggle]").click()
    form = page.locator("[data-testid=schedule-form]")
    form.locator("input[name=when]").fill("2h")
    form.locator("select[name=busy]").select_option("skip")
    form.locator("input[name=text]").fill("scheduled ping")
    form.locator("[data-testid=schedule-add]").click()
    card = page.locator("[data-testid=schedule][data-text='scheduled ping']")
    card.wait_for()
    stored = request(stack.paths, ListSchedules(id=1, topic_id=topic)).schedules
    assert [(s.text, s.every_s, s.busy, s.enabled) for s in stored] == [("scheduled ping", 7200.0, "skip", True)]
    assert "every 2h" in card.inner_text()
    screenshot(page, "schedule-1-added")
    card.locator("[data-testid=schedule-run]").click()
    wait_rows(page, "rows.length === 2 && rows[0].text === 'scheduled ping' && rows[1].status === 'success'")
    page.wait_for_selector("[data-testid=schedule] [data-testid=schedule-runs]:has-text('1 run')")
    card.locator("[data-testid=schedule-toggle]").click()
    page.wait_for_selector("[data-testid=schedule][data-enabled=false]")
    assert not request(stack.paths, ListSchedules(id=1, topic_id=topic)).schedules[0].enabled
    card.locator("[data-testid=schedule-remove]").click()
    card.wait_for(state="detached")
    assert request(stack.paths, ListSchedules(id=1, topic_id=topic)).schedules == []
