"""The page's error banner and new-topic form in a real browser (Debian's headless chromium,
the real daemon and `hostd web`), on a machine where the default driver (claude-code) has no
credential: the form offers what can answer and says why the default cannot; a refusal's
reason stays until the user read it."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.web.browser import BROWSER_TEST_MARKS, WebStack, open_topic, start_stack

pytestmark = BROWSER_TEST_MARKS


@pytest.fixture(scope="module")
def stack() -> Iterator[WebStack]:
    """A stack whose default driver cannot answer: no Anthropic variable, an empty home (no
    `claude` login)."""
    root = Path(tempfile.mkdtemp(prefix="hdd", dir="/tmp"))
    (root / "user").mkdir()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ANTHROPIC_", "CLAUDE_", "HOSTD_"))}
    env["HOME"] = str(root / "user")
    try:
        yield from start_stack(root / "h", env)
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def page(browser: Browser, stack: WebStack) -> Iterator[Page]:
    p = open_topic(browser, stack, "")
    try:
        yield p
    finally:
        p.context.close()


def test_the_form_offers_a_ready_driver_when_the_default_is_not(page: Page) -> None:
    page.get_by_role("button", name="+ New").click()
    form = page.get_by_role("form", name="New topic")
    default = form.locator("select[name=driver] option[value='']")
    expect(default).to_have_text("default (not ready)")
    expect(default).to_be_disabled()
    expect(form.get_by_test_id("default-not-ready")).to_contain_text(
        "The default driver is not ready: "
    )
    # The form starts on a driver that can answer, not on a sure refusal.
    expect(form.locator("select[name=driver]")).not_to_have_value("")
    # A driver with no default model (list-drivers' needs_model): Model is required, for
    # assistive technology too, and the reason is on the page.
    model = form.get_by_role("textbox", name="Model")
    form.locator("select[name=driver]").select_option("openai")
    expect(model).to_have_attribute("aria-required", "true")
    expect(model).to_have_js_property("required", True)
    expect(model).to_have_accessible_description(
        "Model required: the openai driver has no default model (or name an assistant that "
        "has one)."
    )
    expect(form.get_by_test_id("model-required")).to_be_visible()
    form.get_by_role("button", name="Create").click()  # the browser asks for it first
    expect(model).to_be_focused()
    form.get_by_role("textbox", name="Assistant").fill("writer")  # it may name one
    expect(model).not_to_have_attribute("aria-required", "true")
    form.get_by_role("textbox", name="Assistant").fill("")
    form.locator("select[name=driver]").select_option("scripted")
    expect(model).not_to_have_attribute("aria-required", "true")
    expect(form.get_by_test_id("model-required")).to_have_count(0)


def test_a_refusal_stays_until_dismissed_or_the_user_acts_again(
    page: Page, tmp_path: Path
) -> None:
    # Found from outside: any later successful request (a poll, a form's list) cleared the
    # banner, so a reason lasted seconds, read or not.
    page.get_by_role("button", name="+ New").click()
    form = page.get_by_role("form", name="New topic")
    form.locator("select[name=driver]").select_option("scripted")
    form.get_by_role("textbox", name="Working directory").fill(str(tmp_path / "typo"))
    form.get_by_role("button", name="Create").click()
    alert = page.get_by_role("alert")
    expect(alert).to_contain_text("does not exist; create it, or choose an existing directory")
    assert not (tmp_path / "typo").exists()
    # The page's own reads succeed meanwhile (the form is opened again: drivers, assistants).
    form.get_by_role("button", name="Cancel").click()
    page.get_by_role("button", name="+ New").click()
    form = page.get_by_role("form", name="New topic")
    expect(form.locator("select[name=driver] option[value='']")).to_have_text("default (not ready)")
    expect(alert).to_contain_text("does not exist")
    # Dismissed by the user.
    page.get_by_role("button", name="Dismiss error").click()
    expect(alert).to_have_count(0)
    # A refusal again, then the user's own action succeeds: the banner goes.
    form.locator("select[name=driver]").select_option("scripted")
    form.get_by_role("textbox", name="Working directory").fill(str(tmp_path / "typo"))
    form.get_by_role("button", name="Create").click()
    expect(alert).to_contain_text("does not exist")
    form.get_by_role("textbox", name="Working directory").fill(str(tmp_path))
    form.get_by_role("button", name="Create").click()
    expect(alert).to_have_count(0)
    expect(page.locator("[data-testid=composer]")).to_be_visible()
