"""What the page shows of work done elsewhere, in a real browser (Debian's headless chromium)
against the real daemon and `hostd web`: a scheduled run is labelled with its schedule, not
"You". Every wait ends on a condition in the page."""

from __future__ import annotations

from collections.abc import Callable

from playwright.sync_api import Page, expect

from hostd.client.sync_wire import request
from hostd_protocol.client_messages import AddSchedule, RunScheduleNow, ScheduleResult
from tests.web.browser import BROWSER_TEST_MARKS, WebStack, type_and_send, wait_rows

pytestmark = BROWSER_TEST_MARKS

YEAR_S = 365 * 86400.0


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
