"""What a screen reader gets from the page, in real chromium against the real daemon and
`hostd web`: the elements are found by their role and name (a `log` transcript of articles, a
composer named "Message", a `status` live region for the connection, a named topic list), and
axe-core (npm `axe-core`, pinned in hostd/web/page's dev dependencies, injected by the test)
finds no serious or critical violation on the topic list, a streaming answer with tool cards,
an open approval and a dialog.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from hostd.client.sync_wire import request
from hostd_protocol.client_messages import ListTopics
from tests.web.browser import BROWSER_TEST_MARKS, WebStack, screenshot, type_and_send, wait_rows

pytestmark = BROWSER_TEST_MARKS

AXE = Path(__file__).resolve().parents[2] / "hostd" / "web" / "page" / "node_modules" / "axe-core" / "axe.min.js"


def axe_violations(page: Page) -> list[dict[str, Any]]:
    """axe-core's serious and critical violations on the whole page as it is now. The script
    goes in through the DevTools protocol (the page's CSP allows no inline script)."""
    if not AXE.is_file():
        pytest.fail("axe-core is not installed: run scripts/setup (hostd/web/page dev dependencies)")
    if not page.evaluate("() => typeof window.axe === 'object'"):
        page.evaluate(AXE.read_text())
    result: list[dict[str, Any]] = page.evaluate(
        """async () => {
          const r = await window.axe.run(document, { resultTypes: ['violations'] });
          return r.violations.map(v => ({ id: v.id, impact: v.impact, help: v.help,
            nodes: v.nodes.map(n => n.target.join(' ') + ': ' + n.failureSummary) }));
        }"""
    )
    return [v for v in result if v["impact"] in ("serious", "critical")]


def assert_no_serious_violations(page: Page) -> None:
    found = axe_violations(page)
    assert found == [], "\n".join(f"{v['id']} ({v['impact']}): {v['help']}\n  " + "\n  ".join(v["nodes"]) for v in found)


def test_roles_and_names_and_the_topic_list_pass_axe(stack: WebStack, pages: Callable[[str], Page]) -> None:
    stack.create_topic("a topic with a title long enough to be cut short in the list")
    topic = stack.create_topic("short one")
    page = pages(topic)
    expect(page.get_by_role("status", name="Connection")).to_have_text("connected")
    topics = page.get_by_role("navigation", name="Topics").get_by_role("list")
    expect(topics.get_by_role("listitem").filter(has_text="short one")).to_have_count(1)
    expect(topics.get_by_role("link", name="short one")).to_have_attribute("aria-current", "page")
    box = page.get_by_role("textbox", name="Message")
    box.fill("hello there")
    box.press("Enter")
    log = page.get_by_role("log", name="Transcript")
    expect(log.get_by_role("article", name="A1, Assistant")).to_contain_text("hello there")
    expect(log.get_by_role("article")).to_have_count(2)
    assert_no_serious_violations(page)


def test_a_streaming_answer_with_tool_cards_passes_axe(stack: WebStack, pages: Callable[[str], Page]) -> None:
    topic = stack.create_topic(
        "streaming", "/think Looking.\n/text Reading **two** files.\n/tool Read pause=0\n/tool Grep wait-steer=30\n/text Done."
    )
    page = pages(topic)
    type_and_send(page, "go")
    log = page.get_by_role("log", name="Transcript")
    expect(log.get_by_role("group", name="Tool Grep: running")).to_be_visible()
    expect(log.get_by_role("group", name="Tool Read: done")).to_be_visible()
    expect(log).to_have_attribute("aria-busy", "true")  # read once finished, not every frame
    assert_no_serious_violations(page)
    type_and_send(page, "that is enough")  # the steer ends the wait
    wait_rows(page, "rows.length === 4 && rows[3].status === 'success'")
    expect(log).to_have_attribute("aria-busy", "false")


def test_an_open_approval_shows_its_tool_waiting_and_passes_axe(stack: WebStack, pages: Callable[[str], Page]) -> None:
    topic = stack.create_topic("approval", "/text Let me run it.\n/approve Bash")
    page = pages(topic)
    type_and_send(page, "run the build")
    approval = page.get_by_role("region", name="Approvals").get_by_role("group", name="Allow Bash? run Bash: ls")
    expect(approval.get_by_role("button", name="Allow")).to_be_visible()
    # The tool is waiting for this approval, not running.
    card = page.get_by_role("log", name="Transcript").get_by_role("group", name="Tool Bash: waiting for approval")
    expect(card).to_have_count(1)
    screenshot(page, "a11y-approval")
    assert_no_serious_violations(page)
    approval.get_by_role("button", name="Deny").click()
    expect(page.get_by_role("group", name="Tool Bash: error")).to_have_count(1)


def test_rename_and_delete_dialogs_pass_axe_and_do_what_they_say(stack: WebStack, pages: Callable[[str], Page]) -> None:
    topic = stack.create_topic("to be renamed")
    page = pages(topic)
    topics = page.get_by_role("navigation", name="Topics")
    topics.get_by_role("button", name="Rename to be renamed").click()
    dialog = page.get_by_role("dialog", name="Rename topic")
    title = dialog.get_by_role("textbox", name="Title")
    expect(title).to_be_focused()
    expect(title).to_have_value("to be renamed")
    screenshot(page, "a11y-dialog")
    assert_no_serious_violations(page)
    page.keyboard.press("Escape")  # cancels: nothing renamed
    expect(dialog).to_have_count(0)
    topics.get_by_role("button", name="Rename to be renamed").click()
    title.fill("renamed in a dialog")
    title.press("Enter")
    expect(page.get_by_role("heading", level=1)).to_have_text("renamed in a dialog")
    topics.get_by_role("button", name="Delete renamed in a dialog").click()
    confirm = page.get_by_role("dialog", name="Delete topic")
    expect(confirm.get_by_role("button", name="Cancel")).to_be_focused()  # the safe answer
    confirm.get_by_role("button", name="Delete").click()
    expect(topics.get_by_role("link", name="renamed in a dialog")).to_have_count(0)
    assert topic not in [t.id for t in request(stack.paths, ListTopics(id=1)).topics]


def test_the_dark_theme_passes_axe_too(stack: WebStack, pages: Callable[[str], Page]) -> None:
    topic = stack.create_topic("dark", "/think Hmm.\n/text Let me **run** it: `make`.\n/tool Read pause=0\n/approve Bash")
    page = pages(topic)
    page.emulate_media(color_scheme="dark")
    type_and_send(page, "run the build")
    expect(page.get_by_role("region", name="Approvals").get_by_role("button", name="Allow")).to_be_visible()
    assert_no_serious_violations(page)
