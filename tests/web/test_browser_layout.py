"""The page at the narrowest width the web must reflow to (320 CSS px, WCAG 1.4.10), a phone's,
a tablet's and a laptop's window size (390x844, 768x1024, 1280x800), and a laptop's screen at
200 % zoom (683x384 CSS px), in real chromium against the real daemon and `hostd web`: the document never scrolls
sideways, the composer takes most of the width, an open approval's buttons are in view (on a
phone the transcript keeps 40 % of the height beside it, its input folded), the
topic list can be reached (a drawer on narrow windows), and a long title never hides that its
topic is answering. Screenshots of each size go to .artifacts/web-screenshots/ (docs/ holds
copies: web-390.png, web-768.png, web-1280.png).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.web.browser import BROWSER_TEST_MARKS, WAIT_MS, WebStack, screenshot, type_and_send

pytestmark = BROWSER_TEST_MARKS

LONG_TITLE = "A topic whose title is far too long to fit in any list of topics at all"
#: An approval with a large input: its JSON must scroll inside the card, not push the buttons
#: out of the window.
SCRIPT = "/text Before running it, a look at the command line: `make all && make test`.\n/approve Bash"


@pytest.fixture
def sized(browser: Browser, stack: WebStack, request: pytest.FixtureRequest) -> Iterator[Page]:
    width, height, *zoom = request.param
    context = browser.new_context(viewport={"width": width, "height": height}, device_scale_factor=zoom[0] if zoom else 1)
    page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    page.goto(stack.url)
    expect(page.get_by_role("status", name="Connection")).to_have_text("connected")
    try:
        yield page
    finally:
        context.close()


@pytest.mark.parametrize(
    "sized", [(320, 640), (390, 844), (768, 1024), (1280, 800)], indirect=True, ids=["320", "390", "768", "1280"]
)
def test_the_page_fits_the_window(stack: WebStack, sized: Page) -> None:
    page = sized
    width = page.viewport_size["width"] if page.viewport_size else 0
    long_title, short = f"{LONG_TITLE} ({width})", f"another topic ({width})"
    other = stack.create_topic(short)
    topic = stack.create_topic(long_title, SCRIPT)
    page.evaluate("id => { location.hash = 'topic=' + id }", topic)
    type_and_send(page, "build it " + "with a very long argument " * 30)
    approval = page.get_by_role("region", name="Approvals").get_by_role("group")
    for name in ("Allow", "Deny"):
        expect(approval.get_by_role("button", name=name, exact=True)).to_be_in_viewport()
    if width <= 480:
        # A phone: the transcript, where the answer is read, keeps a usable height beside
        # the approval (at 320x640 it was 117 px: the card's input and four stacked composer
        # buttons). The card's input is folded; a keyboard unfolds it and folds it again.
        log = page.get_by_role("log", name="Transcript").bounding_box()
        height = page.viewport_size["height"] if page.viewport_size else 0
        assert log is not None and log["height"] >= 0.4 * height, (log, height)
        folded = approval.get_by_label("Bash input")
        expect(folded).to_be_hidden()
        approval.get_by_text("Input", exact=True).focus()
        page.keyboard.press("Enter")
        expect(folded).to_be_visible()
        page.keyboard.press("Enter")
        expect(folded).to_be_hidden()
    # No sideways scroll.
    overflow = page.evaluate("() => [document.documentElement.scrollWidth, document.body.scrollWidth, innerWidth]")
    assert overflow[0] <= overflow[2] and overflow[1] <= overflow[2], overflow
    composer = page.get_by_role("textbox", name="Message").bounding_box()
    assert composer is not None and composer["width"] >= 0.6 * width, (composer, width)
    expect(page.get_by_role("heading", level=1)).to_have_text(long_title)
    screenshot(page, f"layout-{width}")
    # The topic list: shown beside the topic, or a drawer behind "Topics".
    topics = page.get_by_role("navigation", name="Topics")
    toggle = page.get_by_role("button", name="Topics", exact=True)
    if not topics.is_visible():
        toggle.click()
        expect(topics).to_be_visible()
    # The long title is cut short, never its "answering" badge (the list is read every 5 s).
    item = topics.get_by_role("listitem").filter(has=page.get_by_role("link", name=long_title))
    badge = item.get_by_text("answering", exact=True)
    expect(badge).to_be_visible()
    box, nav = badge.bounding_box(), topics.bounding_box()
    assert box is not None and nav is not None and box["x"] + box["width"] <= nav["x"] + nav["width"]
    screenshot(page, f"layout-{width}-topics")
    # Another topic is one tap away; on a narrow window the drawer closes behind it.
    topics.get_by_role("link", name=short).click()
    expect(page.get_by_role("heading", level=1)).to_have_text(short)
    if toggle.is_visible():
        expect(topics).to_be_hidden()
        assert page.evaluate("() => location.hash") == f"#topic={other}"
    # Leave the turn finished for the next size.
    page.evaluate("id => { location.hash = 'topic=' + id }", topic)
    page.get_by_role("region", name="Approvals").get_by_role("button", name="Deny", exact=True).click()
    expect(page.get_by_role("region", name="Approvals")).to_have_count(0)


@pytest.mark.parametrize("sized", [(683, 384, 2)], indirect=True, ids=["1366x768-at-200%"])
def test_at_200_percent_zoom_the_transcript_keeps_room(stack: WebStack, sized: Page) -> None:
    """A 1366x768 laptop at 200 % zoom leaves 683x384 CSS px. The header, the topic head, an
    open approval and the composer must not squeeze the transcript (where the answer is read)
    to a line or two: the page scrolls instead, and the composer is reached by scrolling."""
    page = sized
    topic = stack.create_topic("zoomed", "/text " + "A long enough answer to read. " * 30 + "\n" + SCRIPT)
    page.evaluate("id => { location.hash = 'topic=' + id }", topic)
    type_and_send(page, "build it")
    approval = page.get_by_role("region", name="Approvals").get_by_role("group")
    expect(approval.get_by_role("button", name="Allow", exact=True)).to_be_visible()
    expect(approval.get_by_label("Bash input")).to_be_hidden()  # folded: the window is short
    log = page.get_by_role("log", name="Transcript").bounding_box()
    height = page.viewport_size["height"] if page.viewport_size else 0
    assert log is not None and log["height"] >= 0.5 * height, (log, height)
    overflow = page.evaluate("() => [document.documentElement.scrollWidth, innerWidth]")
    assert overflow[0] <= overflow[1], overflow
    # The approval pushed the composer below the fold; moving the focus there brings it back.
    composer = page.get_by_role("textbox", name="Message")
    composer.evaluate("e => e.blur()")
    composer.focus()
    expect(composer).to_be_in_viewport()
    # Stopped unanswered: the card goes, and the page says why (a live status line).
    page.get_by_test_id("stop").click()
    expect(page.get_by_role("region", name="Approvals")).to_have_count(0)
    expect(page.get_by_role("status").filter(has_text="Approval for")).to_have_text(
        "Approval for Bash closed: the turn was stopped"
    )
