"""What a user of the page relies on, checked from outside in real chromium against the real
daemon and `hostd web` (the scripted driver): a long answer keeps the page responsive, model
output is shown and never executed, closing the window that sent never stops the answer.

No timed asserts: responsiveness is asserted as what makes it, the page touching the
transcript at most once per animation frame however fast the events come (before, every event
re-rendered the whole transcript and forced a layout: 100k characters at 250 chunks/s froze
the page for seconds).
"""

from __future__ import annotations

from collections.abc import Callable

from playwright.sync_api import Page

from tests.web.browser import (
    BROWSER_TEST_MARKS,
    WebStack,
    row_text,
    rows_of,
    screenshot,
    type_and_send,
    wait_rows,
)

pytestmark = BROWSER_TEST_MARKS

#: Counts animation frames, and for each frame how many separate times the transcript's DOM
#: was changed (one MutationObserver batch = one render that touched it).
FRAME_PROBE = """() => {
  window.__frame = 0;
  window.__batches = new Map();
  const tick = () => { window.__frame += 1; requestAnimationFrame(tick); };
  requestAnimationFrame(tick);
  const box = document.querySelector('[data-testid=transcript]');
  new MutationObserver(() => {
    const f = window.__frame;
    window.__batches.set(f, (window.__batches.get(f) || 0) + 1);
  }).observe(box, { childList: true, subtree: true, characterData: true, attributes: true });
}"""

BATCHES = "() => [...window.__batches.values()]"


def test_a_long_streamed_answer_touches_the_page_at_most_once_per_frame(
    stack: WebStack, pages: Callable[[str], Page]
) -> None:
    # 100,000 characters in 2,500 chunks at 500/s: events come every 2 ms, frames every ~16.
    topic = stack.create_topic("long", "/chunks 2500 size=40 rate=500")
    a = pages(topic)
    a.evaluate(FRAME_PROBE)
    type_and_send(a, "write a lot")
    wait_rows(a, "rows.length === 2 && rows[1].status === 'success'")
    batches: list[int] = a.evaluate(BATCHES)
    stored = [row_text(r) for r in stack.history(topic)]
    assert len(stored[1]) == 100_000
    assert [r["text"] for r in rows_of(a)] == stored
    assert sum(batches) > 1  # it did stream in (more than the final state)
    assert max(batches) == 1, f"the transcript was re-rendered up to {max(batches)} times in one frame"
    screenshot(a, "long-answer-done")


#: A model answer (the scripted driver echoes the prompt) carrying every usual way to run
#: script from Markdown or HTML.
HOSTILE = "\n\n".join(
    [
        "<script>window.__pwned = 'script'</script>",
        '<img src=x onerror="window.__pwned = \'img\'">',
        "<svg onload=\"window.__pwned = 'svg'\"></svg>",
        '<iframe src="javascript:window.__pwned=\'iframe\'"></iframe>',
        "<details open ontoggle=\"window.__pwned = 'details'\">x</details>",
        '<a href="javascript:window.__pwned=\'a\'">raw link</a>',
        "[md link](javascript:window.__pwned='md') [upper](JaVaScRiPt:alert(1)) "
        "[entity](&#106;avascript:alert(1)) [data](data:text/html,<script>alert(1)</script>) "
        "<javascript:alert(1)> ![image](javascript:alert(1)) [ref][bad]",
        "[bad]: javascript:alert(1)",
        '```"><img src=x onerror="window.__pwned=\'fence\'">\ncode\n```',
        "**bold** and [a real link](https://example.com/)",
    ]
)


def test_html_and_script_links_in_model_output_are_shown_not_run(
    stack: WebStack, pages: Callable[[str], Page]
) -> None:
    topic = stack.create_topic("xss", "echo")
    a = pages(topic)
    dialogs: list[str] = []
    a.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    a.locator("[data-testid=composer]").fill(HOSTILE)
    a.locator("[data-testid=send]").click()
    wait_rows(a, "rows.length === 2 && rows[1].status === 'success'")
    answer = a.locator("[data-label=A1] .md")
    # Nothing ran, nothing executable was put in the page, and the text is still readable.
    assert a.evaluate("() => window.__pwned") is None
    assert dialogs == []
    assert answer.locator("script, img, svg, iframe, details, [onerror], [onload], [ontoggle]").count() == 0
    hrefs = answer.locator("a").evaluate_all("els => els.map(e => e.getAttribute('href'))")
    assert hrefs == ["https://example.com/"]
    shown = answer.inner_text()
    assert "<script>window.__pwned = 'script'</script>" in shown
    assert '<img src=x onerror="window.__pwned = \'img\'">' in shown
    assert answer.locator("strong").inner_text() == "bold"
    # The user's own message is plain text too.
    assert a.locator("[data-label=U1] script, [data-label=U1] img").count() == 0


def test_closing_the_window_that_sent_never_stops_the_answer(
    stack: WebStack, pages: Callable[[str], Page]
) -> None:
    topic = stack.create_topic("close", "/chunks 200 size=8 rate=50\n/text All done.")
    a, b = pages(topic), pages(topic)
    type_and_send(a, "go")
    for page in (a, b):
        wait_rows(page, "rows.length === 2 && rows[1].status === 'pending' && rows[1].text.length > 80")
    a.context.close()  # the window that sent goes away mid-answer
    wait_rows(b, "rows.length === 2 && rows[1].status === 'success'")
    stored = stack.history(topic)
    assert [(r.role, r.status) for r in stored] == [("user", "success"), ("assistant", "success")]
    assert row_text(stored[1]).endswith("All done.")
    assert [r["text"] for r in rows_of(b)] == [row_text(r) for r in stored]


def test_code_in_a_streaming_answer_is_shown_plain_then_highlighted_when_done(
    stack: WebStack, pages: Callable[[str], Page]
) -> None:
    """Highlighting is for finished answers: a streaming answer is drawn again at every frame,
    and highlighting its code each time made thousands of elements per frame (an 80k-character
    Python block froze the page for seconds)."""
    topic = stack.create_topic("code", "/echo\n/approve Bash")
    a = pages(topic)
    a.locator("[data-testid=composer]").fill("```python\ndef main() -> int:\n    return 0\n```")
    a.locator("[data-testid=send]").click()
    a.wait_for_selector("[data-testid=approval]")  # the answer waits here, still streaming
    code = a.locator("[data-label=A1] pre.code code")
    assert a.get_attribute("[data-label=A1]", "data-status") == "pending"
    assert code.inner_text() == "def main() -> int:\n    return 0"
    assert code.locator("span").count() == 0
    a.locator("[data-testid=approval] [data-testid=allow]").click()
    wait_rows(a, "rows.length === 2 && rows[1].status === 'success'")
    assert code.locator("span.hljs-keyword").all_inner_texts() == ["def", "return"]
    assert code.inner_text() == "def main() -> int:\n    return 0"
