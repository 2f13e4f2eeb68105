"""`hostd chat` commands as a user types them (piped stdin, a real daemon, the scripted
driver): `/undo` and `/regenerate` ask before they stop a running answer, `/fork N` forks
at any row and the chat goes on in the new topic, a `/word` the chat does not know goes to
the agent (scripted directives with one slash) and a typo of a chat command is asked about.
"""

from __future__ import annotations

import base64
import os
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio

from hostd.cli.chat_render import row_text
from hostd.cli.chat_topic_ops import QUESTIONS
from hostd.cli.demo import DemoDaemon, run_daemon
from hostd.client import open_client

pytestmark = pytest.mark.e2e


@pytest.fixture
async def daemon() -> AsyncIterator[DemoDaemon]:
    home = Path(tempfile.mkdtemp(prefix="hdk", dir="/tmp"))  # short: AF_UNIX path limit
    try:
        async with run_daemon(home) as d:
            yield d
    finally:
        shutil.rmtree(home, ignore_errors=True)


async def new_topic(d: DemoDaemon, scenario: str = "/echo") -> str:
    async with open_client(d.paths) as c:
        topic = await c.create_topic(title="keys", driver="scripted", options={"scenario": scenario})
    return str(topic.id)


async def chat(d: DemoDaemon, topic_id: str, stdin: bytes) -> str:
    env = {**os.environ, "HOSTD_HOME": str(d.paths.home), "COLUMNS": "120"}
    with trio.fail_after(40):
        proc = await trio.run_process(
            [sys.executable, "-m", "hostd", "chat", topic_id],
            stdin=stdin, capture_stdout=True, capture_stderr=True, env=env, check=False,
        )
    out = proc.stdout.decode()
    assert proc.returncode == 0, out + proc.stderr.decode()
    return out


def said(out: str, text: str) -> bool:
    """`text` in the chat's output, however the terminal width wrapped it."""
    return " ".join(text.split()) in " ".join(out.split())


async def test_undo_and_regenerate_ask_before_they_stop_a_running_answer(
    daemon: DemoDaemon,
) -> None:
    topic_id = await new_topic(daemon)
    # `/wait` (one slash: the scripted driver's directive) answers until it is stopped.
    out = await chat(daemon, topic_id, b"/wait\n/undo\nn\n/regenerate\ny\n/stop\n")
    assert said(out, QUESTIONS["undo"])
    assert said(out, "/undo cancelled: the answer goes on")
    assert said(out, QUESTIONS["regenerate"])
    async with open_client(daemon.paths) as c:
        rows = (await c.history(topic_id)).rows
        everything = (await c.history_all(topic_id)).rows
    # The undo was declined: the message is still there; the regenerate stopped the first
    # answer (superseded) and the second was stopped by /stop.
    assert [(r.role, r.status, row_text(r)) for r in rows] == [
        ("user", "success", "/wait"),
        ("assistant", "stopped", ""),
    ]
    assert ("assistant", "stopped") in [(r.role, r.status) for r in everything if r.superseded]


async def test_fork_at_a_row_goes_on_in_the_new_topic(daemon: DemoDaemon) -> None:
    topic_id = await new_topic(daemon)
    await chat(daemon, topic_id, b"one\ntwo\n")
    out = await chat(daemon, topic_id, b"/fork 9\n/fork 1\nthree\n")
    assert said(out, "no row '9': give a message number (1..2)")
    assert "forked into tp" in out
    async with open_client(daemon.paths) as c:
        fork = next(t for t in await c.list_topics() if t.id != topic_id)
        forked = [(r.role, row_text(r)) for r in (await c.history(fork.id)).rows]
        old = [(r.role, row_text(r)) for r in (await c.history(topic_id)).rows]
    assert said(out, f"now in topic {fork.id}; back to this one: hostd chat {topic_id}")
    assert fork.title == "Fork of keys at A1"
    # Message 1 and its answer, then what was typed after /fork: in the new topic.
    assert forked == [("user", "one"), ("assistant", "one"), ("user", "three"), ("assistant", "three")]
    assert old == [("user", "one"), ("assistant", "one"), ("user", "two"), ("assistant", "two")]


async def test_a_directive_needs_one_slash_and_a_typo_is_asked_about(daemon: DemoDaemon) -> None:
    topic_id = await new_topic(daemon)
    out = await chat(daemon, topic_id, b"/text hello from a directive\n/stpo\n")
    assert said(out, "/stpo is not a chat command: did you mean /stop?")
    async with open_client(daemon.paths) as c:
        rows = [(r.role, row_text(r)) for r in (await c.history(topic_id)).rows]
    assert rows == [("user", "/text hello from a directive"), ("assistant", "hello from a directive")]


NOTICE_SCRIPT = (
    "/text The first half of the answer\n"
    "/notice schedule_skipped schedule sc1 skipped a run\n"
    "/text and the second half."
)


async def test_a_notice_never_splits_a_streaming_answer(daemon: DemoDaemon) -> None:
    """In `hostd chat`, `hostd send --follow` and `hostd attach`, a notice that arrives while
    an answer's text streams is shown before or after that text, never inside it."""
    topic_id = await new_topic(daemon, NOTICE_SCRIPT)
    out = await chat(daemon, topic_id, b"go\n")
    assert "The first half of the answerand the second half." in out
    assert "schedule sc1 skipped a run" in out
    env = {**os.environ, "HOSTD_HOME": str(daemon.paths.home), "COLUMNS": "120"}
    with trio.fail_after(30):
        proc = await trio.run_process(
            [sys.executable, "-m", "hostd", "send", topic_id, "again", "--follow"],
            capture_stdout=True, capture_stderr=True, env=env, check=False,
        )
    followed = proc.stdout.decode()
    assert proc.returncode == 0, followed + proc.stderr.decode()
    assert followed.endswith(
        "assistant:\nThe first half of the answerand the second half.\n\n"
        "[warning] schedule sc1 skipped a run\n"
    )


async def test_help_lists_the_agents_commands_and_they_go_to_it(daemon: DemoDaemon) -> None:
    topic_id = await new_topic(daemon, "/echo")
    await chat(daemon, topic_id, b"/commands sned:TEXT review\n")  # the agent reports two
    out = await chat(daemon, topic_id, b"/help\n/sned hi\n")
    assert said(out, "The agent's own commands (sent to it as messages): /sned the scripted sned")
    assert said(out, "/review the scripted review")
    assert "did you mean" not in out
    async with open_client(daemon.paths) as c:
        rows = [(r.role, row_text(r)) for r in (await c.history(topic_id)).rows]
    # Sent to the agent (the scripted driver itself knows no /sned: its answer fails).
    assert rows[-2] == ("user", "/sned hi")


#: A whole 1x1 PNG (68 bytes).
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAAC0lEQVR4nGNgYAAAAAMAASsJTYQAAAAASUVORK5CYII="
)


async def test_an_image_goes_with_the_next_message_and_is_checked_first(
    daemon: DemoDaemon, tmp_path: Path
) -> None:
    (tmp_path / "dot.png").write_bytes(PNG)
    (tmp_path / "notes.png").write_text("# not a picture\n")
    topic_id = await new_topic(daemon)
    out = await chat(daemon, topic_id, (
        f"/image {tmp_path}/notes.png\n/image {tmp_path}/dot.png\nwhat is this?\nand this?\n"
    ).encode())
    assert said(out, "is not a PNG, JPEG, GIF or WebP image (told by its first bytes)")
    assert said(out, "with the next message: dot.png (image/png, 68 bytes)")
    async with open_client(daemon.paths) as c:
        rows = (await c.history(topic_id)).rows
        blind = await c.create_topic(title="blind", driver="bench-load")
    users = [r for r in rows if r.role == "user"]
    assert [row_text(r) for r in users] == ["what is this?", "and this?"]
    assert [a["name"] for a in users[0].meta["attachments"]] == ["dot.png"]
    assert "attachments" not in users[1].meta  # the image went with the first one only
    answer = next(r for r in rows if r.role == "assistant")
    assert row_text(answer).startswith("(images: dot.png image/png 68 bytes)")
    # A driver that takes no images: refused at /image, before any message.
    out = await chat(daemon, blind.id, f"/image {tmp_path}/dot.png\n".encode())
    assert said(out, "the bench-load driver of this topic takes no images")
