"""A refused request in a real browser (Debian's headless chromium, the real daemon and
`hostd web`): the error banner says why, and nothing the user typed is lost meanwhile."""

from __future__ import annotations

from collections.abc import Callable

from playwright.sync_api import Page, expect

from tests.web.browser import BROWSER_TEST_MARKS, WebStack

pytestmark = BROWSER_TEST_MARKS


def test_a_refused_new_topic_keeps_the_form_the_draft_and_the_reason(
    stack: WebStack, pages: Callable[[str], Page]
) -> None:
    # Found from outside: the banner's arrival re-made everything below it (an unkeyed
    # sibling took the page body's place), so the new-topic form closed with what was typed,
    # and the remade topic view's first request cleared the banner at once: the user never
    # saw why nothing was created.
    topic = stack.create_topic("keep", "echo")
    page = pages(topic)
    composer = page.get_by_role("textbox", name="Message")
    composer.fill("a careful draft")
    page.get_by_role("button", name="+ New").click()
    form = page.get_by_role("form", name="New topic")
    form.get_by_role("textbox", name="Title", exact=True).fill("my title")
    form.get_by_role("textbox", name="Working directory").fill("/etc/passwd")
    form.get_by_role("button", name="Create").click()
    expect(page.get_by_role("alert")).to_contain_text("exists and is not a directory")
    expect(form.get_by_role("textbox", name="Title", exact=True)).to_have_value("my title")
    expect(composer).to_have_value("a careful draft")
    # Still there once the page has settled (a quiet moment: the topic's view is idle).
    page.wait_for_function("() => document.querySelector('[role=alert]') !== null")
    expect(page.get_by_role("alert")).to_contain_text("exists and is not a directory")
