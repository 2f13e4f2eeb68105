"""Topic operations and several answers to one message in a real browser (Debian's headless
chromium) against the real daemon and `hostd web`: the per-message menu (rewind, edit and
resend, regenerate, fork), superseded rows, an answer bigger than a snapshot, and a
multi-answer turn seen by two windows. Every wait ends on a condition in the page."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from playwright.sync_api import Page

from hostd.client.sync_wire import request
from hostd_protocol.client_messages import History
from hostd_scripted.driver import words_text
from tests.web.browser import (
    BROWSER_TEST_MARKS,
    WebStack,
    js,
    row_text,
    rows_of,
    screenshot,
    type_and_send,
    wait_rows,
)

pytestmark = BROWSER_TEST_MARKS


def test_rewind_edit_regenerate_and_fork_from_the_page(stack: WebStack, pages: Callable[[str], Page]) -> None:
    topic = stack.create_topic("ops", "echo")
    a, b = pages(topic), pages(topic)
    type_and_send(a, "first")
    wait_rows(a, "rows.length === 2 && rows[1].status === 'success'")
    type_and_send(a, "second")
    wait_rows(a, "rows.length === 4 && rows[3].status === 'success'")
    # Rewind to the first answer in A: both pages drop the rows after it.
    answer = a.locator("[data-testid=row][data-label=A1]")
    answer.hover()
    answer.locator("[data-testid=rewind]").click()
    for page in (a, b):
        wait_rows(page, "rows.length === 2")
    assert [r["text"] for r in rows_of(b)] == ["first", "first"]
    # Edit the first message in B and send it again: the old exchange is superseded.
    question = b.locator("[data-testid=row][data-label=U1]")
    question.hover()
    question.locator("[data-testid=edit-resend]").click()
    edit = b.get_by_role("dialog", name="Edit and resend").get_by_role("textbox", name="Message")
    edit.fill("first, edited")
    b.get_by_role("dialog", name="Edit and resend").get_by_role("button", name="Send again").click()
    for page in (a, b):
        wait_rows(page, "rows.length === 2 && rows[1].text === 'first, edited' && rows[1].status === 'success'")
    # Regenerate from A's menu on the last answer: the same question answered again (new rows).
    before = [r.id for r in stack.history(topic)]
    a.locator("[data-testid=row][data-label=A1]").hover()
    a.locator("[data-testid=row][data-label=A1] [data-testid=regenerate]").click()
    for page in (a, b):
        page.wait_for_function(
            "old => { const u = document.querySelector('[data-testid=row][data-label=U1]');"
            " return u !== null && u.dataset.id !== old; }",
            arg=before[0],
        )
        wait_rows(page, "rows.length === 2 && rows[1].status === 'success'")
    after = stack.history(topic)
    assert [row_text(r) for r in after] == ["first, edited", "first, edited"]
    assert not {r.id for r in after} & set(before)
    # Only the last answer offers regenerate; only user rows offer edit.
    assert b.locator("[data-testid=row][data-label=U1] [data-testid=regenerate]").count() == 0
    assert b.locator("[data-testid=row][data-label=A1] [data-testid=edit-resend]").count() == 0
    # "show removed" in B: the superseded rows, greyed in place, as `history --all` has them.
    b.locator("[data-testid=show-removed]").check()
    stored_all = request(stack.paths, History(id=1, topic_id=topic, all=True, limit=100)).rows
    superseded = [row_text(r) for r in stored_all if r.superseded]
    assert len(superseded) == 6  # the rewound exchange, the edited one, the regenerated one
    b.wait_for_function(f"() => document.querySelectorAll('[data-testid=removed-row]').length === {len(superseded)}")
    shown = b.evaluate("() => [...document.querySelectorAll('[data-testid=row],[data-testid=removed-row]')]"
                       ".map(e => [e.dataset.testid, e.dataset.text])")
    assert shown == [["removed-row" if r.superseded else "row", row_text(r)] for r in stored_all]
    screenshot(b, "ops-1-removed-shown")
    assert rows_of(b) == rows_of(a)  # the visible history is unchanged
    b.locator("[data-testid=show-removed]").uncheck()
    b.wait_for_selector("[data-testid=removed-row]", state="detached")
    # Fork at the answer: the page opens the new topic with the history up to there.
    a.locator("[data-testid=row][data-label=A1]").hover()
    a.locator("[data-testid=row][data-label=A1] [data-testid=fork]").click()
    a.wait_for_function(f"() => !location.hash.includes({js(topic)})")
    wait_rows(a, "rows.length === 2")
    assert [r["text"] for r in rows_of(a)] == ["first, edited", "first, edited"]
    forked = a.evaluate("() => location.hash.split('=')[1]")
    assert forked != topic and len(stack.history(forked)) == 2


def test_regenerate_while_the_answer_streams_stops_it_first(stack: WebStack, pages: Callable[[str], Page]) -> None:
    topic = stack.create_topic("regen-busy", "echo")
    a, b = pages(topic), pages(topic)
    type_and_send(a, "/text partial answer\n/wait")
    for page in (a, b):
        wait_rows(page, "rows.length === 2 && rows[1].status === 'pending' && rows[1].text === 'partial answer'")
    # While it streams, the answer's menu offers regenerate only (no rewind, fork or edit).
    answer = b.locator("[data-testid=row][data-label=A1]")
    answer.hover()
    assert answer.locator("[data-testid=rewind]").count() == 0
    old = [r.id for r in stack.history(topic)]
    answer.locator("[data-testid=regenerate]").click()
    for page in (a, b):
        page.wait_for_function(
            "old => [...document.querySelectorAll('[data-testid=row]')].every(e => !old.includes(e.dataset.id))"
            " && document.querySelectorAll('[data-testid=row]').length === 2",
            arg=old,
        )
        wait_rows(page, "rows[1].status === 'pending' && rows[1].text === 'partial answer'")
    a.locator("[data-testid=composer]").press("Escape")
    for page in (a, b):
        wait_rows(page, "rows.length === 2 && rows[1].status === 'stopped'")
    assert [(r.status, row_text(r)) for r in stack.history(topic)] == [
        ("success", "/text partial answer\n/wait"), ("stopped", "partial answer")
    ]
    assert rows_of(a) == rows_of(b)


@pytest.mark.slow
def test_an_answer_bigger_than_a_snapshot_is_shown_whole(stack: WebStack, pages: Callable[[str], Page]) -> None:
    """5 MB: more than a window's event queue (it resyncs) and more than one snapshot (the row
    comes cut and alone); the page reads the rest with `read-row` and the question on request,
    also in a window opened later."""
    topic = stack.create_topic("huge", "echo")
    a = pages(topic)
    type_and_send(a, "/huge text 5000000\n/wait")
    wait_rows(a, "rows.length >= 1 && rows[rows.length - 1].text.length === 5000000")
    b = pages(topic)
    wait_rows(b, "rows.length === 1 && rows[0].text.length === 5000000")
    for page in (a, b):
        if len(rows_of(page)) == 1:  # the snapshot carried the answer only
            page.locator("[data-testid=load-older]").click()
        wait_rows(page, "rows.length === 2 && rows[1].text.length === 5000000")
        page.wait_for_selector("[data-testid=load-older]", state="detached")
    a.locator("[data-testid=composer]").press("Escape")
    wait_rows(a, "rows.length === 2 && rows[1].status === 'stopped'")
    # What the scripted driver sent (the store's copy comes cut in one history page, too).
    sent = words_text(5_000_000)
    assert a.evaluate("() => document.querySelector('[data-label=A1]').dataset.text") == sent
    assert stack.history(topic)[-1].status == "stopped"
    assert [r["label"] for r in rows_of(b)] == ["U1", "A1"]


#: Both answers say "fine"; the one of model `bad` then fails (the scripted driver's `/model`).
TWO_ANSWERS = "/text fine\n/model bad\n/error scripted failure"


def test_two_answers_side_by_side_one_failing_and_the_choice_reaches_every_window(
    stack: WebStack, pages: Callable[[str], Page]
) -> None:
    topic = stack.create_topic("compare")
    # Assistants are offered beside the drivers (`list-assistants`); a broken one disabled.
    folder = stack.paths.config_dir / "assistants"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "judge.toml").write_text('description = "Judges"\ndriver = "scripted"\n')
    (folder / "typo.toml").write_text('modle = "x"\n')
    a, b = pages(topic), pages(topic)
    # A adds a second answerer in the composer: the scripted driver with model `bad`, typed.
    a.locator("[data-testid=also-toggle]").click()
    a.wait_for_selector("[data-testid=also-driver][data-driver=scripted]")  # the daemon's list
    judge = a.locator("[data-testid=also-assistant][data-assistant=judge]")
    assert judge.is_enabled() and not judge.is_checked()
    assert a.locator("[data-testid=also-assistant][data-assistant=typo]").is_disabled()
    a.locator("[data-testid=also-input]").fill("scripted/bad")
    a.locator("[data-testid=also-input]").press("Enter")
    a.wait_for_selector("[data-testid=also-chip][data-target='scripted/bad']")
    a.locator("[data-testid=also-toggle]").click()  # folds the panel; the chip stays
    type_and_send(a, TWO_ANSWERS)
    want = (
        "rows.map(r => r.label).join() === 'U1,A1.0,A1.1'"
        " && rows[1].status === 'success' && rows[2].status === 'error'"
    )
    for page in (a, b):
        wait_rows(page, want)
        page.wait_for_selector("[data-testid=answers] [data-testid=chosen]")
    for page in (a, b):
        answers = page.locator("[data-testid=answers] [data-testid=row]")
        assert answers.count() == 2
        first, second = answers.nth(0), answers.nth(1)
        assert first.locator(".who").inner_text() == "scripted"
        assert second.locator(".who").inner_text() == "scripted/bad"
        assert first.get_attribute("data-alternative") == "false"
        assert second.get_attribute("data-alternative") == "true"
        assert second.locator("[data-testid=alternative]").count() == 1  # marked, dimmed
        assert "alternative" in (second.get_attribute("class") or "")
        assert second.locator(".row-error").inner_text() == "scripted failure"
        assert first.get_attribute("data-text") == second.get_attribute("data-text") == "fine"
        # Side by side: the same top, the second to the right of the first.
        box1, box2 = first.bounding_box(), second.bounding_box()
        assert box1 is not None and box2 is not None
        assert abs(box1["y"] - box2["y"]) < 2 and box2["x"] > box1["x"] + box1["width"] - 1
    screenshot(a, "answers-1-side-by-side")
    # B continues from the failing answer: in both windows it is chosen, the other one is the
    # alternative, and the store says the same.
    b.locator("[data-testid=row][data-label='A1.1'] [data-testid=choose]").click()
    for page in (a, b):
        page.wait_for_selector("[data-label='A1.0'][data-alternative=true]")
        page.wait_for_selector("[data-label='A1.1'][data-alternative=false] [data-testid=chosen]")
    stored = stack.history(topic)
    assert [(r.lane, r.alternative, r.status) for r in stored[1:]] == [(0, True, "success"), (1, False, "error")]
    assert rows_of(a) == rows_of(b)
    screenshot(b, "answers-2-chosen-page-b")
    # Regenerate (the last answer's menu) asks both answerers again: new rows, same outcome.
    old = [r.id for r in stored]
    a.locator("[data-testid=row][data-label='A1.1']").hover()
    a.locator("[data-testid=row][data-label='A1.1'] [data-testid=regenerate]").click()
    for page in (a, b):
        page.wait_for_function(
            "old => [...document.querySelectorAll('[data-testid=row]')].every(e => !old.includes(e.dataset.id))",
            arg=old,
        )
        wait_rows(page, want)
    again = stack.history(topic)
    assert [(r.lane, r.status) for r in again[1:]] == [(0, "success"), (1, "error")]
    assert not {r.id for r in again} & set(old)


def test_two_answers_stream_at_once_enter_queues_stop_one_then_both(
    stack: WebStack, pages: Callable[[str], Page]
) -> None:
    topic = stack.create_topic("both-stream")
    a, b = pages(topic), pages(topic)
    a.locator("[data-testid=also-toggle]").click()
    a.locator("[data-testid=also-driver][data-driver=scripted]").check()  # from the daemon's list
    a.wait_for_selector("[data-testid=also-chip][data-target=scripted]")
    type_and_send(a, "/text streaming\n/wait")
    both = "rows.length === 3 && rows.slice(1).every(r => r.status === 'pending' && r.text === 'streaming')"
    for page in (a, b):
        wait_rows(page, both)
    screenshot(b, "answers-3-both-streaming")
    # Such a turn is never steered: Enter in B queues the next message.
    assert b.locator("[data-testid=send]").inner_text() == "Queue"
    type_and_send(b, "next one")
    for page in (a, b):
        page.wait_for_selector("[data-testid=unsent][data-text='next one']")
    # Each streaming answer has its own Stop: B stops the second; the first streams on.
    assert a.locator("[data-testid=row] [data-testid=stop-answer]").count() == 2
    b.locator("[data-testid=row][data-lane='1'] [data-testid=stop-answer]").click()
    for page in (a, b):
        wait_rows(page, "rows[1].status === 'pending' && rows[2].status === 'stopped'")
        page.wait_for_selector("[data-testid=row][data-lane='1'] [data-testid=stop-answer]", state="detached")
    assert a.locator("[data-testid=row][data-lane='0'] [data-testid=stop-answer]").count() == 1
    assert [(r.lane, r.status) for r in stack.history(topic)[1:3]] == [(0, "pending"), (1, "stopped")]
    a.locator("[data-testid=composer]").press("Escape")  # stops every answer still running
    for page in (a, b):
        wait_rows(page, "rows.length >= 3 && rows[1].status === 'stopped' && rows[2].status === 'stopped'")
        page.wait_for_selector("[data-testid=stop-answer]", state="detached")
    stored = stack.history(topic)
    assert [(r.lane, r.status) for r in stored[1:3]] == [(0, "stopped"), (1, "stopped")]


def test_an_approval_says_which_answer_asks(stack: WebStack, pages: Callable[[str], Page]) -> None:
    topic = stack.create_topic("answer-asks")
    a, b = pages(topic), pages(topic)
    a.locator("[data-testid=also-toggle]").click()
    a.locator("[data-testid=also-input]").fill("/bad")  # the topic's driver, model `bad`
    a.locator("[data-testid=also-input]").press("Enter")
    a.wait_for_selector("[data-testid=also-chip][data-target='/bad']")
    type_and_send(a, "/text ok\n/model bad\n/approve Bash")
    for page in (a, b):
        page.wait_for_selector("[data-testid=approval]")
        assert page.locator("[data-testid=approval]").inner_text().startswith("scripted/bad asks: Allow Bash?")
    b.locator("[data-testid=approval] [data-testid=allow]").click()
    for page in (a, b):
        page.wait_for_selector("[data-testid=approval]", state="detached")
        wait_rows(page, "rows.length === 3 && rows[1].status === 'success' && rows[2].status === 'success'")
    texts = [r["text"] for r in rows_of(a)]
    assert texts[1] == "ok" and texts[2].startswith("ok") and texts[2].endswith("approved: ran Bash.")
    assert rows_of(a) == rows_of(b)
