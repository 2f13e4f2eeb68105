"""`hostd app` windows under Xvfb against the real daemon (scripted driver), driven through
pywebview's own JS evaluation: every window is an equal listener on its own daemon
connection through the JS-to-Python bridge."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import trio

from hostd.client import open_client
from hostd_protocol.client_messages import MessageRow, Snapshot, TurnEnded
from hostd_protocol.common import TextDelta
from tests.app.harness import APP_TEST_MARKS, AppProcess, Daemon, daemon, screenshot

pytestmark = APP_TEST_MARKS

STEER_SCRIPT = "/text Working on it, **reading** the file now.\n/tool Read wait-steer=30\n/text That is all."
ONLINE = "document.querySelector('[data-conn=online]') && document.querySelector('[data-testid=composer]')"


def row_text(row: MessageRow) -> str:
    return "".join(p.text for p in row.parts if isinstance(p, TextDelta))


async def turn_end(stack: Daemon, topic: str) -> str:
    """The status of the topic's running turn once it ended (it may have ended already)."""
    with trio.fail_after(60):
        async with open_client(stack.paths) as client, client.attach(topic) as sub:
            async for ev in sub:
                if isinstance(ev, Snapshot) and not ev.active_turn_id:
                    return ev.rows[-1].status
                if isinstance(ev, TurnEnded):
                    return ev.status
    raise AssertionError("the subscription ended")


def two_windows(apps: Callable[[str], AppProcess], topic: str) -> AppProcess:
    app = apps(topic)
    assert app.call("open", topic=topic) == 1
    for win in (0, 1):
        app.wait(win, ONLINE)
    return app


def test_a_steer_typed_in_one_window_is_seen_live_in_the_other(
    stack: Daemon, apps: Callable[[str], AppProcess]
) -> None:
    topic = stack.create_topic("steer", STEER_SCRIPT)
    app = two_windows(apps, topic)
    assert [app.call("connections", win=w) for w in (0, 1)] == [1, 1]  # one socket each
    app.type_and_send(0, "Read the README please")
    for win in (0, 1):
        app.wait_rows(win, "rows.length === 2 && rows[1].status === 'pending' && rows[1].text.includes('the file now.')")
    app.type_and_send(0, "Also check the tests")
    # Window 1 sees the steer (U2) while the answer still streams, then the rolled answer.
    app.wait_rows(1, "rows.length >= 3 && rows[2].role === 'user' && rows[2].text === 'Also check the tests'")
    want = "rows.map(r => r.label).join() === 'U1,A1a,U2,A2' && rows[3].status === 'success'"
    app.wait_rows(0, want)
    app.wait_rows(1, want)
    shown = app.rows(0)
    assert shown == app.rows(1)
    # Side by side on the screen, photographed (the README's picture is a copy).
    app.call("move", win=0, width=1000, height=1000, x=0, y=0)
    app.call("move", win=1, width=1000, height=1000, x=1000, y=0)
    app.eval(1, "document.documentElement.dataset.theme = 'dark'")
    app.wait(0, "window.innerWidth === 1000")
    app.wait(1, "window.innerWidth === 1000")
    screenshot(stack, "two-windows-steered")
    assert [(r["role"], r["status"], r["text"]) for r in shown] == [
        (r.role, r.status, row_text(r)) for r in stack.history(topic)
    ]


APPROVE_SCRIPT = "/echo\n/approve Bash"


def test_an_approval_answered_in_one_window_disappears_from_the_other(
    stack: Daemon, apps: Callable[[str], AppProcess]
) -> None:
    topic = stack.create_topic("approve", APPROVE_SCRIPT)
    app = two_windows(apps, topic)
    app.type_and_send(0, "Run the build")
    for win in (0, 1):
        app.wait(win, "document.querySelector('[data-testid=approval]')")
    app.eval(1, "document.querySelector('[data-testid=approval] [data-testid=allow]').click()")
    for win in (0, 1):
        app.wait(win, "!document.querySelector('[data-testid=approval]')")
        app.wait_rows(win, "rows.length === 2 && rows[1].status === 'success'")
        assert app.rows(win)[1]["text"].endswith("approved: ran Bash.")


SLOW_SCRIPT = "/text First part.\n/tool Read wait-steer=30\n/text Second part."


def test_closing_a_window_mid_answer_loses_nothing(stack: Daemon, apps: Callable[[str], AppProcess]) -> None:
    topic = stack.create_topic("close", SLOW_SCRIPT)
    app = two_windows(apps, topic)
    app.type_and_send(0, "go")
    app.wait_rows(0, "rows.length === 2 && rows[1].status === 'pending' && rows[1].text.includes('First part.')")
    assert app.call("close", win=0) == 1  # window 0 closes mid-answer: its connection goes
    # The answer goes on in the daemon; the other window steers it to the end.
    app.type_and_send(0, "now finish")  # window 1 is index 0 now
    want = "rows.map(r => r.label).join() === 'U1,A1a,U2,A2' && rows[3].status === 'success'"
    app.wait_rows(0, want)
    stored = stack.history(topic)
    assert [r.status for r in stored] == ["success", "success", "success", "success"]
    assert row_text(stored[1]) == "First part."
    # A new window shows the same transcript from the daemon.
    app.call("open", topic=topic)
    app.wait(1, ONLINE)
    app.wait_rows(1, want)
    assert app.rows(1) == app.rows(0)


def test_the_app_quits_while_the_answer_goes_on(stack: Daemon, apps: Callable[[str], AppProcess]) -> None:
    topic = stack.create_topic("quit", "/text Started.\n/tool Read pause=2\n/text Finished after the app.")
    app = apps(topic)
    app.wait(0, ONLINE)
    app.type_and_send(0, "go")
    app.wait_rows(0, "rows.length === 2 && rows[1].status === 'pending' && rows[1].text.includes('Started.')")
    assert app.quit() == 0  # the last window closed: the app exits, cleanly
    assert trio.run(turn_end, stack, topic) == "success"  # the daemon finished it on its own
    stored = stack.history(topic)
    assert row_text(stored[1]) == "Started.Finished after the app."


def test_an_unfocused_window_notifies_and_the_focused_one_does_not(
    stack: Daemon, apps: Callable[[str], AppProcess]
) -> None:
    topic = stack.create_topic("notify", "/echo\n/approve Bash")
    app = two_windows(apps, topic)
    focused = [app.eval(w, "document.hasFocus()") for w in (0, 1)]
    assert focused.count(False) >= 1  # one display, one focus
    app.type_and_send(0, "Run it")
    for win in (0, 1):
        app.wait(win, "document.querySelector('[data-testid=approval]')")
    app.eval(0, "document.querySelector('[data-testid=approval] [data-testid=allow]').click()")
    for win in (0, 1):
        app.wait_rows(win, "rows.length === 2 && rows[1].status === 'success'")
    # Each unfocused window said "approval needed" and "finished"; the focused one nothing.
    notes = app.call("notifications")
    assert sorted(n[1].split("?")[0] for n in notes) == sorted(
        ["Allow Bash", "The answer is finished."] * focused.count(False)
    )
    assert all(n[0].startswith("notify") for n in notes)


def test_window_size_and_position_are_remembered(stack: Daemon, apps: Callable[[str], AppProcess]) -> None:
    app = apps("")
    app.wait(0, "document.querySelector('[data-conn=online]')")
    app.call("move", win=0, width=900, height=700, x=120, y=90)
    app.wait(0, "window.innerWidth <= 900 && window.innerWidth > 800")
    assert app.quit() == 0
    again = apps("")
    again.wait(0, "document.querySelector('[data-conn=online]')")
    assert again.call("geometry", win=0) == [900, 700, 120, 90]


def test_a_window_waits_for_the_daemon_and_follows_its_restarts(display: str) -> None:
    home = Path(tempfile.mkdtemp(prefix="hdn", dir="/tmp"))
    try:
        app = AppProcess(Daemon(home, display))
        try:
            app.wait(0, "document.querySelector('[data-conn=offline]')")
            reason = app.eval(0, "document.querySelector('[data-testid=conn]').title")
            assert reason.startswith("hostd is not running") and "hostd serve" in reason
            with daemon(home, display):
                app.wait(0, "document.querySelector('[data-conn=online]')")  # by itself
            # The daemon stopped: the window says so; started again: it reconnects.
            app.wait(0, "document.querySelector('[data-conn=offline]')")
            with daemon(home, display):
                app.wait(0, "document.querySelector('[data-conn=online]')")
        finally:
            app.quit()
    finally:
        shutil.rmtree(home, ignore_errors=True)


def test_open_in_new_window_opens_an_equal_window_on_the_topic(
    stack: Daemon, apps: Callable[[str], AppProcess]
) -> None:
    topic = stack.create_topic("new window", "/echo")
    app = apps(topic)
    app.wait(0, ONLINE)
    app.type_and_send(0, "hello")
    app.wait_rows(0, "rows.length === 2 && rows[1].status === 'success'")
    app.eval(0, "document.querySelector('[data-testid=new-window]').click()")
    assert app.call("wait_count", n=2) == 2
    app.wait(1, ONLINE)
    app.wait_rows(1, "rows.length === 2 && rows[1].status === 'success'")
    assert app.eval(1, "location.hash") == f"#topic={topic}"
    # An equal listener: what it sends shows in the first window.
    app.type_and_send(1, "from the new window")
    app.wait_rows(0, "rows.length === 4 && rows[3].status === 'success'")
    assert app.rows(0) == app.rows(1)


def test_a_fast_long_answer_reaches_both_windows_whole(stack: Daemon, apps: Callable[[str], AppProcess]) -> None:
    # 20,000 chunks as fast as the driver can: the bridge batches what the socket holds into
    # one evaluation per read, and nothing is lost or reordered.
    topic = stack.create_topic("fast", "/chunks 20000 size=8 rate=0")
    app = two_windows(apps, topic)
    app.type_and_send(0, "go")
    for win in (0, 1):
        app.wait_rows(win, "rows.length === 2 && rows[1].status === 'success'")
    stored = stack.history(topic)
    assert len(row_text(stored[1])) > 150_000
    for win in (0, 1):
        assert app.rows(win)[1]["text"] == row_text(stored[1])
