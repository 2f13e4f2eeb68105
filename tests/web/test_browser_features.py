"""What people expect from a chat app, in real chromium against the real daemon and
`hostd web`: copy buttons on messages and code blocks (the real clipboard), timestamps, a way
back to the end of a streaming answer, topic search, and the keyboard-shortcut overlay."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.web.browser import (
    BROWSER_TEST_MARKS,
    WAIT_MS,
    WebStack,
    row_text,
    type_and_send,
    wait_rows,
)
from tests.web.test_browser_a11y import assert_no_serious_violations

pytestmark = BROWSER_TEST_MARKS

CODE_PROMPT = "Here is the fix:\n\n```python\ndef main() -> int:\n    return 0\n```\n\nTry it."


def test_copy_buttons_put_the_message_and_the_code_on_the_clipboard(stack: WebStack, pages: Callable[[str], Page]) -> None:
    topic = stack.create_topic("copy")
    page = pages(topic)
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    box = page.get_by_role("textbox", name="Message")
    box.fill(CODE_PROMPT)
    box.press("Enter")
    wait_rows(page, "rows.length === 2 && rows[1].status === 'success'")
    answer = page.get_by_role("article", name="A1, Assistant")
    answer.hover()
    answer.get_by_role("button", name="Copy A1").click()
    expect(answer.get_by_role("button", name="Copy A1")).to_have_text("Copied")
    assert page.evaluate("() => navigator.clipboard.readText()") == CODE_PROMPT
    answer.get_by_role("button", name="Copy code").click()
    assert page.evaluate("() => navigator.clipboard.readText()") == "def main() -> int:\n    return 0"
    # Each row says when it was written: the time the daemon stored (ms in the ISO form).
    stamps = page.get_by_role("log", name="Transcript").locator("time")
    expect(stamps).to_have_count(2)
    written = page.evaluate("el => Date.parse(el.getAttribute('datetime')) / 1000", stamps.first.element_handle())
    assert written == pytest.approx(stack.history(topic)[0].created_at, abs=0.001)


def test_scrolled_up_during_a_streaming_answer_a_button_follows_it_again(stack: WebStack, pages: Callable[[str], Page]) -> None:
    topic = stack.create_topic("follow", "/chunks 300 size=40 rate=60\n/text The end.")
    page = pages(topic)
    log = page.get_by_role("log", name="Transcript")
    type_and_send(page, "a long one please")
    wait_rows(page, "rows.length === 2 && rows[1].text.length > 4000")
    follow = page.get_by_role("button", name="Scroll to the answer being written")
    expect(follow).to_have_count(0)  # at the end: the page follows by itself
    log.hover()
    page.mouse.wheel(0, -3000)  # the reader scrolls up to read
    expect(follow).to_be_visible()
    at = log.evaluate("el => el.scrollTop")
    wait_rows(page, "rows[1].text.length > 8000")
    assert log.evaluate("el => el.scrollTop") == at  # it did not drag the reader down
    follow.click()
    expect(follow).to_have_count(0)
    wait_rows(page, "rows.length === 2 && rows[1].status === 'success'")
    # Following again: the end of the answer is in view.
    expect(log.get_by_text("The end.")).to_be_in_viewport()


def test_shortcut_overlay_and_topic_search(stack: WebStack, pages: Callable[[str], Page]) -> None:
    stack.create_topic("zebra notes")
    stack.create_topic("apple pie recipe")
    page = pages("")
    page.locator("body").press("?")
    dialog = page.get_by_role("dialog", name="Keyboard shortcuts")
    expect(dialog).to_be_visible()
    expect(dialog.get_by_role("row").filter(has_text="Alt+Enter")).to_contain_text("queue the message")
    page.keyboard.press("Escape")
    expect(dialog).to_have_count(0)
    page.locator("body").press("/")
    search = page.get_by_role("searchbox", name="Search topics")
    expect(search).to_be_focused()
    search.fill("pie APPLE")
    topics = page.get_by_role("navigation", name="Topics").get_by_role("listitem")
    expect(topics).to_have_count(1)
    expect(topics).to_contain_text("apple pie recipe")
    search.fill("nothing like this")
    expect(page.get_by_text("No topic matches")).to_be_visible()


#: Watches the page's notifications (the real `Notification`, counted on the way through) and
#: lets the test send the page to the background: headless chromium has no tab strip, so the
#: page's `document.visibilityState` is what the test switches.
BACKGROUND_TAB = """
(() => {
  const Real = window.Notification;
  window.__notes = [];
  window.Notification = class extends Real {
    constructor(title, options) { super(title, options); window.__notes.push([title, options && options.body]); }
  };
  let hidden = false;
  Object.defineProperty(document, 'visibilityState', { get: () => (hidden ? 'hidden' : 'visible') });
  window.__setHidden = (h) => { hidden = h; document.dispatchEvent(new Event('visibilitychange')); };
})();
"""


def test_a_background_tab_is_notified_of_an_approval_and_a_finished_answer(stack: WebStack, browser: Browser) -> None:
    topic = stack.create_topic("notify me", "/text Let me check.\n/approve Bash")
    context = browser.new_context()
    try:
        context.grant_permissions(["notifications"])
        context.add_init_script(BACKGROUND_TAB)
        page = context.new_page()
        page.set_default_timeout(WAIT_MS)
        page.goto(stack.url)
        page.evaluate("id => { location.hash = 'topic=' + id }", topic)
        toggle = page.get_by_role("button", name="Notifications")
        toggle.click()
        expect(toggle).to_have_attribute("aria-pressed", "true")
        page.evaluate("() => window.__setHidden(true)")
        type_and_send(page, "go")
        page.wait_for_function("() => window.__notes.length === 1")
        page.get_by_role("region", name="Approvals").get_by_role("button", name="Allow").click()
        page.wait_for_function("() => window.__notes.length === 2")
        assert page.evaluate("() => window.__notes") == [
            ["notify me: approval needed", "Allow Bash? run Bash: ls"],
            ["notify me", "The answer is finished."],
        ]
        # In front, nothing is notified: the page shows it.
        page.evaluate("() => window.__setHidden(false)")
        type_and_send(page, "again")
        page.get_by_role("region", name="Approvals").get_by_role("button", name="Deny").click()
        wait_rows(page, "rows.length === 4 && rows[3].status === 'success'")
        assert page.evaluate("() => window.__notes.length") == 2
    finally:
        context.close()


def test_the_page_is_an_installable_app(stack: WebStack, pages: Callable[[str], Page]) -> None:
    """The web app manifest loads (through the token gate: the cookie goes with it) and
    chromium finds nothing in it to complain about."""
    page = pages("")
    cdp = page.context.new_cdp_session(page)
    manifest = cdp.send("Page.getAppManifest")
    assert manifest["errors"] == [], manifest["errors"]
    parsed = cdp.send("Page.getAppManifest")["data"]
    assert '"display": "standalone"' in parsed and '"name": "hostd"' in parsed
    icon = page.request.get(stack.base + "/icon-192.png")
    assert icon.status == 200 and icon.headers["content-type"] == "image/png"


PLAN_SCRIPT = (
    "/commands review:path fix\n"
    "/plan [x] Read the config; [~] Write the parser; [ ] Add tests\n/text Working on it.\n"
    "/plan [x] Read the config; [x] Write the parser; [~] Add tests\n/text Nearly there."
)


def test_the_plan_is_a_checklist_and_the_agents_commands_are_offered_in_the_composer(
    stack: WebStack, pages: Callable[[str], Page]
) -> None:
    topic = stack.create_topic("plans", PLAN_SCRIPT)
    page = pages(topic)
    type_and_send(page, "go")
    wait_rows(page, "rows.length === 2 && rows[1].status === 'success'")
    # The answer's last plan, as a checklist a screen reader can count.
    plan = page.get_by_role("article", name="A1, Assistant").get_by_role("region", name="Plan, 2 of 3 done")
    said = ["done: Read the config", "done: Write the parser", "in progress: Add tests"]
    expect(plan.get_by_role("listitem")).to_have_text([re.compile(re.escape(s) + "$") for s in said])
    # The agent's commands: "/" lists them, typing filters, Enter takes one, its hint shows.
    box = page.get_by_role("textbox", name="Message")
    box.fill("/")
    commands = page.get_by_role("listbox", name="Commands")
    expect(commands.get_by_role("option")).to_have_count(2)
    assert_no_serious_violations(page)
    box.press("ArrowDown")
    expect(commands.get_by_role("option", name="/fix")).to_have_attribute("aria-selected", "true")
    box.fill("/re")
    expect(commands.get_by_role("option")).to_have_count(1)
    box.press("Enter")
    expect(box).to_have_value("/review ")
    expect(page.get_by_text("input: path")).to_be_visible()
    box.press_sequentially("src/parser.py")
    box.press("Enter")  # the list is closed: this sends (the scripted driver knows no /review)
    wait_rows(page, "rows.length === 4 && rows[3].status !== 'pending'")
    sent = stack.history(topic)[2]
    assert (sent.role, row_text(sent)) == ("user", "/review src/parser.py")


#: A 1x1 transparent PNG.
PNG_1x1 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII="


def test_an_attached_image_and_text_file_are_sent_with_the_message(stack: WebStack, pages: Callable[[str], Page]) -> None:
    """Images go as attachments (protocol 1.5: stored with the user row, handed to the
    driver: tests/claude and tests/openai show what the vendors get), text files into the
    text; both windows show the image."""
    import base64

    topic = stack.create_topic("attachments")
    a, b = pages(topic), pages(topic)
    a.get_by_test_id("attach").set_input_files([
        {"name": "dot.png", "mimeType": "image/png", "buffer": base64.b64decode(PNG_1x1)},
        {"name": "notes.md", "mimeType": "text/markdown", "buffer": b"# Notes\nship it\n"},
        {"name": "tool.exe", "mimeType": "application/octet-stream", "buffer": b"MZ"},
        # Typed by their bytes, not their names: a PNG called .jpg goes as image/png.
        {"name": "photo.jpg", "mimeType": "image/jpeg", "buffer": base64.b64decode(PNG_1x1)},
        {"name": "fake.png", "mimeType": "image/png", "buffer": b"# not a picture\n"},
    ])
    chips = a.get_by_role("list", name="Attachments to send")
    expect(chips.get_by_role("img", name="dot.png")).to_be_visible()
    expect(a.get_by_role("alert")).to_contain_text("tool.exe: only images")
    expect(a.get_by_role("alert")).to_contain_text(
        "fake.png: not a PNG, JPEG, GIF or WebP image (told by its first bytes)")
    box = a.get_by_role("textbox", name="Message")
    expect(box).to_have_value("notes.md:\n```\n# Notes\nship it\n```")
    box.press("Enter")
    for page in (a, b):
        wait_rows(page, "rows.length === 2 && rows[1].status === 'success'")
        expect(page.get_by_role("article", name="U1, You").get_by_role("img", name="dot.png")).to_be_visible()
    expect(chips).to_have_count(0)  # sent: the composer is empty again
    sent = stack.history(topic)[0]
    assert row_text(sent) == "notes.md:\n```\n# Notes\nship it\n```"
    assert sent.meta["attachments"] == [
        {"media_type": "image/png", "data": PNG_1x1, "name": "dot.png"},
        {"media_type": "image/png", "data": PNG_1x1, "name": "photo.jpg"},
    ]


def test_a_pasted_image_becomes_an_attachment(stack: WebStack, pages: Callable[[str], Page]) -> None:
    """A real paste: the clipboard holds a PNG (Clipboard API), Ctrl+V in the composer."""
    topic = stack.create_topic("paste an image")
    page = pages(topic)
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    page.evaluate(
        """async b64 => {
          const bytes = Uint8Array.from(atob(b64), c => c.charCodeAt(0));
          await navigator.clipboard.write([new ClipboardItem({ 'image/png': new Blob([bytes], { type: 'image/png' }) })]);
        }""",
        PNG_1x1,
    )
    box = page.get_by_role("textbox", name="Message")
    box.focus()
    page.keyboard.press("Control+V")
    chips = page.get_by_role("list", name="Attachments to send")
    expect(chips.get_by_role("listitem")).to_have_count(1)
    box.fill("what is in the picture?")
    box.press("Enter")
    wait_rows(page, "rows.length === 2 && rows[1].status === 'success'")
    (sent, _) = stack.history(topic)
    (image,) = sent.meta["attachments"]
    assert image["media_type"] == "image/png" and image["data"]
