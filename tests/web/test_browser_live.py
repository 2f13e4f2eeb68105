"""What the page shows of work done elsewhere, in a real browser (Debian's headless chromium)
against the real daemon and `hostd web`: a scheduled run is labelled with its schedule, not
"You"; topics the CLI creates, renames, deletes and sets answering show up live in an open
page (`watch-topics`, protocol 1.6), without the page reading the list again; images are
refused at once for a driver that takes none. Every wait ends on a condition in the page."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections.abc import Callable

from playwright.sync_api import Browser, Page, WebSocket, expect

from hostd.client.sync_wire import request
from hostd_protocol.client_messages import (
    AddSchedule,
    CreateTopic,
    RunScheduleNow,
    ScheduleResult,
    TopicResult,
)
from tests.web.browser import (
    BROWSER_TEST_MARKS,
    WAIT_MS,
    WebStack,
    screenshot,
    type_and_send,
    wait_rows,
)

pytestmark = BROWSER_TEST_MARKS

YEAR_S = 365 * 86400.0
DOT = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII="


def test_a_scheduled_run_shows_as_its_schedule_not_as_you(
    stack: WebStack, pages: Callable[[str], Page]
) -> None:
    topic = stack.create_topic("scheduled", "echo")
    page = pages(topic)
    type_and_send(page, "typed by hand")
    wait_rows(page, "rows.length === 2 && rows[1].status === 'success'")
    added = request(
        stack.paths, AddSchedule(id=1, topic_id=topic, text="morning news", every_s=YEAR_S)
    )
    assert isinstance(added, ScheduleResult)
    sid = added.schedule.id
    request(stack.paths, RunScheduleNow(id=1, schedule_id=sid))
    wait_rows(page, "rows.length === 4 && rows[3].status === 'success'")
    log = page.get_by_role("log", name="Transcript")
    expect(log.get_by_role("article", name="U1, You")).to_be_visible()
    run = log.get_by_role("article", name=f"U2, Schedule {sid}")
    expect(run).to_be_visible()
    expect(run.locator(".who")).to_have_text(f"Schedule {sid}")
    # A window opened later reads it from the snapshot: the same label.
    later = pages(topic)
    expect(later.get_by_role("article", name=f"U2, Schedule {sid}")).to_be_visible()
    expect(later.get_by_role("article", name="U1, You")).to_be_visible()


def _requests_sent(page: Page) -> list[str]:
    """The `type` of every request the page sends from now on (its WebSocket frames)."""
    sent: list[str] = []

    def on_socket(ws: WebSocket) -> None:
        def on_frame(payload: str | bytes) -> None:
            try:
                sent.append(str(json.loads(payload).get("type", "")))
            except (ValueError, AttributeError):
                sent.append("?")

        ws.on("framesent", on_frame)

    page.on("websocket", on_socket)
    return sent


def test_topics_made_elsewhere_show_up_live_without_reading_the_list_again(
    stack: WebStack, browser: Browser
) -> None:
    context = browser.new_context(viewport={"width": 1200, "height": 860})
    page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    sent = _requests_sent(page)  # from the page's first frame on
    page.goto(stack.url)
    page.wait_for_selector("[data-conn=online]")
    topics = page.get_by_role("navigation", name="Topics")
    env = {**os.environ, "HOSTD_HOME": str(stack.home)}

    def cli(*args: str) -> str:
        return subprocess.run(
            [sys.executable, "-m", "hostd", "--home", str(stack.home), *args],
            check=True, capture_output=True, text=True, timeout=60, env=env,
        ).stdout.strip()

    try:
        tid = cli("new", "--title", "made by the CLI", "--driver", "scripted")
        expect(topics.get_by_role("link", name="made by the CLI")).to_be_visible()
        # That topic's answer (not the open one's): its badge comes and goes with it.
        cli("send", tid, "/chunks 150 size=4 rate=30")
        item = topics.get_by_role("listitem").filter(has_text="made by the CLI")
        expect(item.locator(".badge")).to_have_text("answering")
        expect(item.locator(".badge")).to_have_count(0, timeout=60_000)
        cli("rename", tid, "renamed by the CLI")
        expect(topics.get_by_role("link", name="renamed by the CLI")).to_be_visible()
        cli("delete", "--yes", tid)
        expect(topics.get_by_role("link", name="renamed by the CLI")).to_have_count(0)
        # All of it came from the watch: the page never read the list again.
        assert "watch-topics" in sent
        assert "list-topics" not in sent, sent
    except BaseException:
        screenshot(page, "FAILED-topics-live")
        raise
    finally:
        context.close()


def test_images_are_refused_at_once_for_a_driver_that_takes_none(
    stack: WebStack, pages: Callable[[str], Page]
) -> None:
    # The dev tools' load driver declares no images (`DriverSpec.images` false, 1.6).
    created = request(stack.paths, CreateTopic(id=1, title="no eyes", driver="bench-load"))
    assert isinstance(created, TopicResult)
    page = pages(created.topic.id)
    # The page knows once it has read the drivers (at connect).
    page.wait_for_selector("[data-testid=attach][data-images=no]", state="attached")
    page.get_by_test_id("attach").set_input_files([
        {"name": "dot.png", "mimeType": "image/png", "buffer": base64.b64decode(DOT)},
        {"name": "notes.md", "mimeType": "text/markdown", "buffer": b"ship it\n"},
    ])
    expect(page.get_by_role("alert")).to_contain_text(
        "dot.png: the bench-load driver of this topic takes no images (text files still go)"
    )
    expect(page.get_by_role("list", name="Attachments to send")).to_have_count(0)
    expect(page.get_by_role("textbox", name="Message")).to_have_value(
        "notes.md:\n```\nship it\n```"
    )
