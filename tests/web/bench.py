"""The web page's smoothness, measured in Debian's chromium against the real daemon and
`hostd web` (the helper behind `scripts/bench web-page`; measurements, never asserts):

- a 100,000-character answer streaming at 500 chunks/s: the time between animation frames
  while it streams (lag = interval - 16.7 ms), and the longest main-thread task;
- a real 100 KB clipboard paste into the composer (Ctrl+V with the clipboard filled through
  the Clipboard API): the longest main-thread task from the key press until the text is in,
  and the time from the key press to the next frame after it.

Long tasks come from chromium's `PerformanceObserver` ('longtask': tasks over 50 ms).
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from playwright.sync_api import sync_playwright

from tests.web.browser import (
    CHROMIUM,
    CHROMIUM_ARGS,
    WAIT_MS,
    open_topic,
    start_stack,
    type_and_send,
    wait_rows,
)

FRAME_MS = 1000 / 60

PROBE = """() => {
  window.__gaps = []; window.__long = []; window.__on = true;
  let last = performance.now();
  const tick = (t) => { window.__gaps.push(t - last); last = t; if (window.__on) requestAnimationFrame(tick); };
  requestAnimationFrame(tick);
  new PerformanceObserver((l) => { for (const e of l.getEntries()) window.__long.push(e.duration); })
    .observe({ type: 'longtask' });
}"""


@dataclass
class Measured:
    #: Per run: the 95th percentile of frame lag (ms) while the answer streamed.
    stream_lag_p95: list[float] = field(default_factory=list)
    stream_lag_max: list[float] = field(default_factory=list)
    stream_long_task_max: list[float] = field(default_factory=list)
    stream_frames: list[int] = field(default_factory=list)
    #: Per run: the longest main-thread task (ms, 0 when none over 50 ms) of the paste.
    paste_long_task_max: list[float] = field(default_factory=list)
    paste_to_frame: list[float] = field(default_factory=list)


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))] if ordered else float("nan")


def measure(runs: int = 3) -> Measured:
    out = Measured()
    home = Path(tempfile.mkdtemp(prefix="hdm", dir="/tmp"))
    stacks = start_stack(home)
    stack = next(stacks)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
            try:
                for run in range(runs):
                    topic = stack.create_topic(f"smooth {run}", "/chunks 2500 size=40 rate=500")
                    page = open_topic(browser, stack, topic)
                    page.set_default_timeout(WAIT_MS * 3)
                    page.evaluate(PROBE)
                    type_and_send(page, "write a lot")
                    wait_rows(page, "rows.length === 2 && rows[1].status === 'success'")
                    gaps: list[float] = page.evaluate("() => { window.__on = false; return window.__gaps.slice(1); }")
                    long_tasks: list[float] = page.evaluate("() => window.__long")
                    lags = [max(0.0, g - FRAME_MS) for g in gaps]
                    out.stream_lag_p95.append(_p95(lags))
                    out.stream_lag_max.append(max(lags, default=0.0))
                    out.stream_long_task_max.append(max(long_tasks, default=0.0))
                    out.stream_frames.append(len(gaps))
                    paste(page, out)
                    page.context.close()
            finally:
                browser.close()
    finally:
        stacks.close()
        shutil.rmtree(home, ignore_errors=True)
    return out


def paste(page: object, out: Measured) -> None:
    from playwright.sync_api import Page

    assert isinstance(page, Page)
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    text = ("def handler(event):\n    return event['body']  # pasted log line\n" * 1600)[:100_000]
    page.evaluate("t => navigator.clipboard.writeText(t)", text)
    box = page.locator("[data-testid=composer]")
    box.fill("")
    box.focus()
    page.evaluate(PROBE)
    # From the paste event to the first frame after the text is in, timed in the page.
    page.evaluate("""() => {
      const box = document.querySelector('[data-testid=composer]');
      box.addEventListener('paste', () => { window.__t0 = performance.now(); }, { once: true });
      box.addEventListener('input', () => requestAnimationFrame(() => { window.__t1 = performance.now(); }), { once: true });
    }""")
    page.keyboard.press("Control+V")
    page.wait_for_function("n => document.querySelector('[data-testid=composer]').value.length === n", arg=len(text))
    page.wait_for_function("() => window.__t1 !== undefined")
    took: float = page.evaluate("() => window.__t1 - window.__t0")
    long_tasks: list[float] = page.evaluate("() => { window.__on = false; return window.__long; }")
    out.paste_long_task_max.append(max(long_tasks, default=0.0))
    out.paste_to_frame.append(took)
