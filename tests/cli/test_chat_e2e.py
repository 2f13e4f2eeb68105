"""`hostd chat` end to end: a real daemon (scripted driver), the real CLI in a tmux pane
(private socket, killed at the end), keys typed with send-keys and the screen read with
capture-pane. Also `hostd chat` with piped stdin, and the human error for a missing daemon.

Waiting polls capture-pane for a condition under a deadline; nothing sleeps to synchronise.
"""

# ruff: noqa: RUF001  (the prompt mark U+276F is part of the snapshots)

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
import trio

from hostd.cli.chat_render import roll_labels, row_text
from hostd.cli.demo import DemoDaemon, run_daemon
from hostd.client import open_client
from tests.polling import eventually

pytestmark = pytest.mark.e2e

TMUX = shutil.which("tmux") or "/usr/bin/tmux"
#: The answer: streams, then waits at a tool call until a steer arrives (no timing involved).
SCRIPT = "\n".join(
    [
        "/text Working on it, **reading** now.",
        "/tool Read wait-steer=20",
        "/text Finished the answer.",
    ]
)


@pytest.fixture
async def daemon() -> AsyncIterator[DemoDaemon]:
    home = Path(tempfile.mkdtemp(prefix="hdc", dir="/tmp"))  # short: AF_UNIX path limit
    try:
        # run_daemon bounds its own start (readiness line) and stop (SIGTERM, then SIGKILL).
        async with run_daemon(home) as d:
            yield d
    finally:
        shutil.rmtree(home, ignore_errors=True)


async def new_topic(d: DemoDaemon, script: str = SCRIPT) -> str:
    async with open_client(d.paths) as c:
        topic = await c.create_topic(title="e2e", driver="scripted", options={"scenario": script})
    return str(topic.id)


class Pane:
    """One tmux server (private socket) with one pane running a command."""

    def __init__(self) -> None:
        self.socket = f"hostd-test-{os.getpid()}-{uuid.uuid4().hex[:8]}"

    async def tmux(self, *args: str) -> str:
        proc = await trio.run_process(
            [TMUX, "-L", self.socket, "-f", "/dev/null", *args],
            capture_stdout=True,
            capture_stderr=True,
        )
        out: str = proc.stdout.decode()
        return out

    async def start(self, command: str, width: int = 100, height: int = 45) -> None:
        await self.tmux(
            "new-session", "-d", "-x", str(width), "-y", str(height), "-s", "chat", command
        )

    async def screen(self) -> str:
        return await self.tmux("capture-pane", "-p", "-t", "chat")

    async def keys(self, *keys: str) -> None:
        await self.tmux("send-keys", "-t", "chat", *keys)

    async def wait_for(self, *texts: str, timeout: float = 10) -> str:
        return await self.wait_until(lambda s: all(t in s for t in texts), timeout, texts)

    async def wait_until(
        self, ok: Callable[[str], bool], timeout: float, what: object = "condition"
    ) -> str:
        screen = ""

        async def shows() -> bool:
            nonlocal screen
            screen = await self.screen()
            return ok(screen)

        if await eventually(shows, timeout, every=0.05):  # tmux's screen is another process's
            return screen
        raise AssertionError(f"screen never showed {what!r}; it shows:\n{screen}")

    async def kill(self) -> None:
        with trio.CancelScope(shield=True):
            await trio.run_process(
                [TMUX, "-L", self.socket, "kill-server"], check=False, capture_stderr=True
            )


def in_order(screen: str, *texts: str) -> bool:
    """Whether every text is on the screen, each after the one before."""
    at = 0
    for text in texts:
        found = screen.find(text, at)
        if found < 0:
            return False
        at = found + len(text)
    return True


def chat_command(d: DemoDaemon, *args: str) -> str:
    home = d.paths.home
    argv = " ".join([sys.executable, "-m", "hostd", "chat", *args])
    return f"env HOSTD_HOME={home} {argv}; echo CHAT-EXIT=$?; sleep 60"


@pytest.mark.skipif(not os.path.exists(TMUX), reason="tmux is not installed")
async def test_chat_in_tmux_type_steer_stop_approve_quit(daemon: DemoDaemon) -> None:
    topic_id = await new_topic(daemon)
    pane = Pane()
    try:
        with trio.fail_after(50):
            await pane.start(chat_command(daemon, topic_id))
            await pane.wait_for("hostd chat", "● idle", "❯")

            # Type a message: the answer streams and stops at the tool call.
            await pane.keys("hello there", "Enter")
            await pane.wait_for("U1  you ❯ hello there", "⚙ Read", "running…", "● answering")
            # Type while it answers: a steer; the answer rolls into A1a / U2 / A2.
            await pane.keys("steer now", "Enter")
            # One capture must hold all of it: under load tmux can be read mid-redraw, with
            # the live region's top rows erased and the bottom ones still there.
            rolled = ("A1a assistant", "U2  you ❯ steer now", "A2  assistant")
            await pane.wait_until(
                lambda s: in_order(s, *rolled)
                and all(
                    t in s
                    for t in (
                        "steer landed: A1a closed, U2 placed, A2 continues",
                        "You said: steer now",
                        "Finished the answer.",
                        "● idle",
                        "✓ done",  # the tool panel got its result
                    )
                ),
                10,
                "the rolled answer A1a / U2 / A2, idle",
            )

            # A long answer, a steer it never takes, then Ctrl-C: stopped, steer -> draft.
            await pane.keys("//wait", "Enter")
            await pane.wait_for("A3  assistant  answering…")
            await pane.keys("later please", "Enter")
            await pane.wait_for("1. [steer] later please")
            await pane.keys("C-c")
            await pane.wait_for(
                "A3  assistant  (stopped: partial answer kept)",
                "came back as drafts",
                "1. [draft] later please",
                "● idle",
            )
            await pane.keys("/discard 1", "Enter")
            await pane.wait_until(lambda s: "[draft]" not in s, 10, "draft discarded")

            # An approval, answered first by another window: the prompt closes and says so.
            await pane.keys("//approve Bash", "Enter")
            await pane.wait_for("approve Bash", "y allow once", "● awaiting approval")
            async with open_client(daemon.paths, client_name="other window") as other:
                async with other.attach(topic_id) as sub:
                    (approval,) = sub.transcript.approvals()
                await other.answer_approval(topic_id, approval.id, False, "not now")
            screen = await pane.wait_for(
                "approval for Bash: denied in other window; prompt closed",
                "denied: did not run Bash (not now).",
                "● idle",
            )
            assert "y allow once" not in screen

            # Ctrl-C twice quits; the daemon and the topic keep going.
            await pane.keys("C-c")
            await pane.wait_for("Ctrl-C again to quit")
            await pane.keys("C-c")
            await pane.wait_for("bye: the topic keeps going", "CHAT-EXIT=0")

            async with open_client(daemon.paths) as c:
                rows = (await c.history(topic_id)).rows
            labels = roll_labels(rows)
            assert [labels[r.id] for r in rows] == ["U1", "A1a", "U2", "A2", "U3", "A3", "U4", "A4"]
            assert [r.status for r in rows][4:6] == ["success", "stopped"]
            assert row_text(rows[2]) == "steer now"
    finally:
        await pane.kill()


async def test_chat_with_piped_stdin_answers_then_exits(daemon: DemoDaemon) -> None:
    topic_id = await new_topic(daemon, "/echo")
    env = {**os.environ, "HOSTD_HOME": str(daemon.paths.home), "COLUMNS": "80"}
    with trio.fail_after(30):
        proc = await trio.run_process(
            [sys.executable, "-m", "hostd", "chat", topic_id],
            stdin=b"first question\nsecond question\n",
            capture_stdout=True,
            capture_stderr=True,
            env=env,
            check=False,
        )
    out = proc.stdout.decode()
    assert proc.returncode == 0, out + proc.stderr.decode()
    assert "U1  you ❯ first question" in out
    assert "U2  you ❯ second question" in out
    assert out.index("A1  assistant") < out.index("U2  you ❯ second question")
    assert "bye: the topic keeps going" in out


async def test_chat_without_a_daemon_says_how_to_start_one(tmp_path: Path) -> None:
    env = {**os.environ, "HOSTD_HOME": str(tmp_path)}
    with trio.fail_after(20):
        proc = await trio.run_process(
            [sys.executable, "-m", "hostd", "chat", "--driver", "scripted"],
            stdin=b"",
            capture_stdout=True,
            capture_stderr=True,
            env=env,
            check=False,
        )
    # One line on stderr, as every other command says it (it was two wrapped lines on stdout).
    err = proc.stderr.decode()
    assert proc.returncode == 1
    assert proc.stdout == b""
    assert err.count("\n") == 1, err
    assert err.startswith("hostd chat: hostd is not running")
    assert "hostd serve --detach" in err


async def test_chat_with_a_wrong_topic_is_one_line_on_stderr(daemon: DemoDaemon) -> None:
    env = {**os.environ, "HOSTD_HOME": str(daemon.paths.home), "COLUMNS": "40"}
    with trio.fail_after(30):
        proc = await trio.run_process(
            [sys.executable, "-m", "hostd", "chat", "nosuchtopic"],
            stdin=b"",
            capture_stdout=True,
            capture_stderr=True,
            env=env,
            check=False,
        )
    assert proc.returncode == 1
    assert proc.stdout == b""
    assert proc.stderr.decode() == (
        "hostd chat: no topic 'nosuchtopic': `hostd topics` lists them; `hostd chat --driver "
        "NAME` starts a new one\n"
    )


async def test_chat_undo_regenerate_and_fork(daemon: DemoDaemon) -> None:
    topic_id = await new_topic(daemon, "/echo")
    env = {**os.environ, "HOSTD_HOME": str(daemon.paths.home), "COLUMNS": "100"}

    async def chat(stdin: bytes) -> str:
        # One chat per step: each starts on an idle topic, so no question is asked
        # (asking before stopping a running answer: test_chat_commands_e2e).
        with trio.fail_after(30):
            proc = await trio.run_process(
                [sys.executable, "-m", "hostd", "chat", topic_id], stdin=stdin,
                capture_stdout=True, capture_stderr=True, env=env, check=False,
            )
        out = proc.stdout.decode()
        assert proc.returncode == 0, out + proc.stderr.decode()
        return out

    await chat(b"first question\n")
    assert "row(s) from the history" in await chat(b"/undo\nsecond question\n")
    assert "forked into tp" in await chat(b"/regenerate\n/fork\n")
    async with open_client(daemon.paths) as c:
        rows = (await c.history(topic_id)).rows
        # /undo cut the first exchange; /regenerate answered the second again (new rows).
        assert [r.role for r in rows[:1]] == ["user"]
        assert row_text(rows[0]) == "second question"
        everything = (await c.history_all(topic_id)).rows
        assert any(r.superseded and row_text(r) == "first question" for r in everything)
        topics = await c.list_topics()
        fork = next(t for t in topics if t.id != topic_id)
        forked = (await c.history(fork.id)).rows
        assert row_text(forked[0]) == "second question"


async def test_chat_several_answers_and_choose(daemon: DemoDaemon) -> None:
    """`/also` makes another model answer each message too (each answer labelled), `/choose N`
    continues from answer N; the other answer is an alternative."""
    topic_id = await new_topic(daemon, "/echo")
    env = {**os.environ, "HOSTD_HOME": str(daemon.paths.home), "COLUMNS": "100"}
    with trio.fail_after(30):
        proc = await trio.run_process(
            [sys.executable, "-m", "hostd", "chat", topic_id],
            stdin=b"/also scriptd/m1\n/also scripted/m1\nsame question\n/choose 1\n/choose 7\n",
            capture_stdout=True,
            capture_stderr=True,
            env=env,
            check=False,
        )
    out = proc.stdout.decode()
    assert proc.returncode == 0, out + proc.stderr.decode()
    # A typo is refused when /also is set, not at every message after it.
    assert "no driver named 'scriptd' (did you mean 'scripted'?" in out.replace("\n", " ")
    assert "also answered by scripted/m1" in out
    assert "[answer 1: scripted/m1" in out
    assert "continuing from answer 1" in out
    assert "no answer 7 (answers: 0, 1)" in out
    async with open_client(daemon.paths) as c:
        rows = (await c.history(topic_id)).rows
    answers = [(r.lane, row_text(r), r.alternative) for r in rows if r.role == "assistant"]
    assert answers == [(0, "same question", True), (1, "same question", False)]


async def test_chat_continue_and_pick(daemon: DemoDaemon) -> None:
    """`chat -c` opens the topic used last; `chat --pick` lists topics and opens the one
    whose number is typed."""
    older = await new_topic(daemon, "/echo")
    latest = await new_topic(daemon, "/echo")
    env = {**os.environ, "HOSTD_HOME": str(daemon.paths.home), "COLUMNS": "120"}

    async def chat(*args: str, stdin: bytes) -> str:
        with trio.fail_after(30):
            proc = await trio.run_process(
                [sys.executable, "-m", "hostd", "chat", *args],
                stdin=stdin, capture_stdout=True, capture_stderr=True, env=env, check=False,
            )
        assert proc.returncode == 0, proc.stdout.decode() + proc.stderr.decode()
        return proc.stdout.decode()

    out = await chat("-c", stdin=b"hello latest\n")
    assert "hello latest" in out
    async with open_client(daemon.paths) as c:
        assert (await c.get_topic(latest)).updated_at >= (await c.get_topic(older)).updated_at
    listing = await chat("--pick", stdin=b"2\nhello older\n")
    assert older in listing and latest in listing
    async with open_client(daemon.paths) as c:
        rows = (await c.history(older)).rows
    assert any("hello older" in str(r.parts) for r in rows)


@pytest.mark.skipif(not os.path.exists(TMUX), reason="tmux is not installed")
async def test_chat_in_tmux_paste_history_and_a_stopped_tool_card(daemon: DemoDaemon) -> None:
    """A pasted block of lines is one message (bracketed paste), Up brings back what was
    sent, and a turn stopped during a tool leaves a card that says so (also on reopen)."""
    topic_id = await new_topic(daemon, "/echo")
    pane = Pane()
    try:
        with trio.fail_after(50):
            await pane.start(chat_command(daemon, topic_id))
            await pane.wait_for("hostd chat", "● idle", "❯")
            await pane.tmux("set-buffer", "-b", "p", "first line\nsecond line\nthird line")
            await pane.tmux("paste-buffer", "-p", "-b", "p", "-t", "chat")  # bracketed
            await pane.wait_for("❯ first line", "second line", "third line▏")
            async with open_client(daemon.paths) as c:
                assert (await c.history(topic_id)).rows == []  # the paste sent nothing
            await pane.keys("Enter")
            await pane.wait_for("U1  you ❯ first line", "● idle")
            async with open_client(daemon.paths) as c:
                (user, _answer) = (await c.history(topic_id)).rows
            assert row_text(user) == "first line\nsecond line\nthird line"

            await pane.keys("Up")
            await pane.wait_for("third line▏")
            await pane.keys("C-u")  # the last line of the recalled message cleared
            await pane.wait_until(lambda s: "third line▏" not in s, 10, "line cleared")
            await pane.keys("Down")  # back to the (empty) draft
            await pane.keys("//tool Read pause=30", "Enter")
            await pane.wait_for("⚙ Read", "running…")
            await pane.keys("C-c")
            await pane.wait_for("stopped before it finished", "● idle")
            screen = await pane.screen()
            assert "running…" not in screen and "stopping…" not in screen
            await pane.keys("C-c")
            await pane.wait_for("CHAT-EXIT=0")
        # Reopened: the card is drawn from the stored row, still "stopped".
        pane2 = Pane()
        try:
            with trio.fail_after(30):
                await pane2.start(chat_command(daemon, topic_id))
                screen = await pane2.wait_for("stopped before it finished", "● idle")
                assert "running…" not in screen
        finally:
            await pane2.kill()
    finally:
        await pane.kill()


async def test_chat_stop_one_answer(daemon: DemoDaemon) -> None:
    """`/stop N` stops answer N alone; the other answer goes on (here until `/stop 0`)."""
    topic_id = await new_topic(daemon, "/echo")
    env = {**os.environ, "HOSTD_HOME": str(daemon.paths.home), "COLUMNS": "100"}
    with trio.fail_after(30):
        proc = await trio.run_process(
            [sys.executable, "-m", "hostd", "chat", topic_id],
            stdin=b"/also scripted/m1\n//wait\n/stop 7\n/stop 1\n/stop 0\n",
            capture_stdout=True,
            capture_stderr=True,
            env=env,
            check=False,
        )
    out = proc.stdout.decode()
    assert proc.returncode == 0, out + proc.stderr.decode()
    assert "no answer 7 (answers: 0, 1)" in out
    assert "stopping answer 1; the others go on" in out
    assert "stopping answer 0; the others go on" in out
    async with open_client(daemon.paths) as c:
        rows = (await c.history(topic_id)).rows
    assert [(r.lane, r.status) for r in rows if r.role == "assistant"] == [
        (0, "stopped"),
        (1, "stopped"),
    ]
