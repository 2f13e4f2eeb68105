"""The pure parts of `hostd chat`: the line editor, command parsing, and which rows go to the
scrollback (settled, in order, once) versus the live region; when piped input may leave."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trio.testing

from hostd.cli.chat_app import Command, parse_command
from hostd.cli.chat_input import EndOfInput, Interrupt, LineEditor, Submit
from hostd.cli.chat_requests import ChatRequests
from hostd.cli.chat_state import ChatState
from hostd.core.transcript import Transcript
from hostd_protocol.client_messages import MessageRow, Snapshot, TopicInfo
from hostd_protocol.common import TextDelta


def test_editor_keys() -> None:
    ed = LineEditor()
    assert ed.feed("helo") == []
    assert ed.feed("\x7flo wor") == []  # backspace
    assert ed.text == "hello wor"
    assert ed.feed("\x17") == [] and ed.text == "hello "  # Ctrl-W: last word
    assert ed.feed("there\r") == [Submit("hello there")]
    assert ed.text == ""
    assert ed.feed("x\x15") == [] and ed.text == ""  # Ctrl-U
    assert ed.feed("\x03") == [Interrupt()]
    assert ed.feed("\x04") == [EndOfInput()]  # Ctrl-D on an empty line
    ed.feed("a")
    assert ed.feed("\x04") == []  # ... but not on a non-empty one


@pytest.mark.parametrize("split", [1, 2, 3, 100])
def test_editor_swallows_escape_sequences_across_feeds(split: int) -> None:
    keys = "a\x1b[A\x1b[1;5Cb\x1bOPc\x1bxd\r"  # up (no history yet), ctrl-right, F1, alt-x
    ed = LineEditor()
    events = []
    for i in range(0, len(keys), split):
        events += ed.feed(keys[i : i + split])
    assert events == [Submit("abcd")]


def test_editor_two_lines_in_one_read() -> None:
    assert LineEditor(piped=True).feed("one\ntwo\n") == [Submit("one"), Submit("two")]


def test_editor_multi_line_paste_and_newline_keys() -> None:
    """A paste is inserted whole (it never sends); Alt-Enter, Ctrl-J and `\\` + Enter start
    a new line; Enter sends everything."""
    ed = LineEditor()
    assert ed.feed("look:\x1b[200~line 1\r\nline 2\nline 3\x1b[201~") == []
    assert ed.text == "look:line 1\nline 2\nline 3"
    assert ed.feed("\x1b\rmore\nand\\\rend") == []  # Alt-Enter, Ctrl-J, backslash-Enter
    assert ed.text == "look:line 1\nline 2\nline 3\nmore\nand\nend"
    assert ed.feed("\r") == [Submit("look:line 1\nline 2\nline 3\nmore\nand\nend")]


def test_editor_cursor_keys_and_history() -> None:
    ed = LineEditor()
    ed.feed("helo\x1b[D\x1b[Dx")  # left, left, insert
    assert (ed.text, ed.cursor) == ("hexlo", 3)
    ed.feed("\x01\x1b[3~\x05!")  # Ctrl-A, Delete, Ctrl-E, insert
    assert ed.text == "exlo!"
    assert ed.feed("\r") == [Submit("exlo!")]
    ed.feed("second\r")
    ed.feed("draft")
    ed.feed("\x1b[A")  # Up: the newest sent message
    assert ed.text == "second"
    ed.feed("\x1b[A")
    assert ed.text == "exlo!"
    ed.feed("\x1b[A")  # nothing older: stays
    assert ed.text == "exlo!"
    ed.feed("\x1b[B\x1b[B")  # Down twice: back to the draft
    assert ed.text == "draft"
    ed.feed("\x0b")  # Ctrl-K at the end: nothing
    ed.feed("\x01\x0b")  # Ctrl-A, Ctrl-K: the line is gone
    assert ed.text == ""


def test_editor_history_file(tmp_path: Path) -> None:
    from hostd.cli.chat_input import chat_history

    path = tmp_path / "chat-history"
    ed = LineEditor(chat_history(path))
    ed.feed("remember me\r")
    assert (path.stat().st_mode & 0o777) == 0o600
    again = LineEditor(chat_history(path))  # a new chat window
    again.feed("\x1b[A")
    assert again.text == "remember me"


def test_parse_command() -> None:
    assert parse_command("hello") == Command("", "hello")
    assert parse_command("  ") == Command("noop")
    assert parse_command("/stop") == Command("stop")
    assert parse_command("/discard 2") == Command("discard", "2")
    assert parse_command("/Q") == Command("quit")
    # A /word the chat does not know is the agent's (a scripted directive, a Claude Code
    # command); one a letter away from a chat command is asked about.
    assert parse_command("/text hi") == Command("", "/text hi")
    assert parse_command("/text a\n/tool b") == Command("", "/text a\n/tool b")
    assert parse_command("/compact") == Command("", "/compact")
    assert parse_command("/stpo") == Command("unknown", "stpo", hint="stop")
    assert parse_command("/regen") == Command("unknown", "regen", hint="regenerate")
    assert parse_command("/fork A2") == Command("fork", "A2")
    assert parse_command("/") == Command("help")
    assert parse_command("//text hi") == Command("", "/text hi")
    assert parse_command("y") == Command("", "y")  # no approval open: a message
    assert parse_command("y", approval_open=True) == Command("allow")
    assert parse_command("No", approval_open=True) == Command("deny")
    assert parse_command("/deny too risky", approval_open=True) == Command("deny", "too risky")


def test_a_command_the_agent_offers_is_never_taken_for_a_typo() -> None:
    assert parse_command("/sned a", agent_commands=["Sned"]) == Command("", "/sned a")
    assert parse_command("/stop", agent_commands=["stop"]) == Command("stop")  # chat's first


def test_every_scripted_directive_goes_to_the_driver() -> None:
    from hostd_scripted.script import KNOWN

    for directive in KNOWN:
        assert parse_command(f"/{directive} 1") == Command("", f"/{directive} 1"), directive


def _row(rid: str, role: str, status: str, pos: int, turn: str = "t1") -> MessageRow:
    return MessageRow(
        id=rid,
        topic_id="t",
        role=role,
        status=status,
        position=pos,
        turn_id=turn,
        parts=[TextDelta(text=rid)],
    )


def test_settled_rows_print_once_in_order_and_stop_at_the_live_answer() -> None:
    st = ChatState()
    u1 = _row("u1", "user", "success", 1)
    a1 = _row("a1", "assistant", "pending", 2)
    steer = _row("s", "user", "queued", 2**40, "")
    rows = [u1, a1, steer]
    assert [r.id for r in st.take_settled(rows)] == ["u1"]
    assert [r.id for r in st.live_rows(rows)] == ["a1"]
    assert [r.id for r in ChatState.unsent(rows)] == ["s"]
    assert st.take_settled(rows) == []  # never twice
    # The roll: A1a ends, U2 is placed after it, A2 streams.
    rows = [
        u1,
        _row("a1", "assistant", "success", 2),
        _row("s", "user", "success", 3),
        _row("a2", "assistant", "pending", 4),
    ]
    assert [r.id for r in st.take_settled(rows)] == ["a1", "s"]
    assert [r.id for r in st.live_rows(rows)] == ["a2"]


def test_steer_kind_lasts_while_its_turn_runs() -> None:
    st = ChatState(steers={"s": "t1"})
    rows = [_row("s", "user", "queued", 2**40, "")]
    assert st.kinds(rows, "t1") == {"s": "steer"}
    assert st.kinds(rows, "") == {}  # the turn ended without taking it: plain queued
    assert st.kinds(rows, "t2") == {}


def test_drafts_are_announced_once() -> None:
    st = ChatState()
    rows = [_row("d1", "user", "draft", 2**40, ""), _row("d2", "user", "draft", 2**40 + 1, "")]
    assert [r.id for r in st.new_drafts(rows)] == ["d1", "d2"]
    assert st.new_drafts(rows) == []


def test_view_reserves_room_for_queue_and_prompt() -> None:
    st = ChatState()
    rows = [_row("q", "user", "queued", 2**40, "")]
    view = st.view(
        rows,
        TopicInfo(id="t"),
        "answering",
        active_turn_id="t1",
        approvals=[],
        usage=None,
        input_text="",
        height=20,
    )
    assert [r.id for r in view.unsent] == ["q"]
    assert view.max_answer_lines == 20 - 4 - 2


def test_fork_row_takes_a_message_number_or_a_label() -> None:
    from hostd.cli.chat_topic_ops import fork_row, undo_row

    rows = [
        _row("u1", "user", "success", 1, "t1"),
        _row("a1", "assistant", "success", 2, "t1"),
        _row("u2", "user", "success", 3, "t2"),
        _row("a2", "assistant", "pending", 4, "t2"),
        _row("q", "user", "queued", 5, ""),
    ]
    ids = {arg: (r.id if isinstance(r, MessageRow) else r) for arg in ("", "1", "U1", "a1", "U2")
           for r in [fork_row(rows, arg)]}
    assert ids == {"": "u2", "1": "a1", "U1": "u1", "a1": "a1", "U2": "u2"}
    assert fork_row(rows, "2") == "A2 is still being answered: fork at an earlier row, or wait"
    assert fork_row(rows, "A2") == "A2 is still being answered: fork at an earlier row, or wait"
    assert fork_row(rows, "7") == (
        "no row '7': give a message number (1..2) or a label as shown (U2, A2, A1a)"
    )
    assert fork_row(rows, "B1") == fork_row(rows, "7").replace("'7'", "'B1'")
    assert fork_row([], "") == "nothing to fork yet"
    assert undo_row(rows) is not None and undo_row(rows).id == "u2"  # type: ignore[union-attr]


def test_also_names_an_unknown_driver_or_assistant_when_it_is_set() -> None:
    # Found from outside: `/also nosuch` was taken ("messages are also answered by nosuch"),
    # then every message was refused ("nothing was sent") until `/also` alone cleared it.
    from hostd.cli.chat_answers import unknown_target
    from hostd_protocol.common import AnswerTarget

    drivers = ["claude-code", "scripted"]
    assistants = ["default", "reviewer"]
    assert unknown_target([AnswerTarget(driver="scripted", model="m")], drivers, assistants) is None
    assert unknown_target([AnswerTarget(assistant="reviewer")], drivers, assistants) is None
    assert unknown_target([AnswerTarget(model="m")], drivers, assistants) is None
    assert unknown_target([AnswerTarget(driver="scriptd")], drivers, assistants) == (
        "no driver named 'scriptd' (did you mean 'scripted'?; installed: claude-code, scripted); "
        "/also is unchanged"
    )
    assert unknown_target([AnswerTarget(assistant="nope")], drivers, assistants) == (
        "no assistant named 'nope' (known: default, reviewer; `hostd assistants` lists them); "
        "/also is unchanged"
    )


class _Requests(ChatRequests):
    """`ChatRequests` with what `ChatApp` gives it: a real transcript, no connection."""

    def __init__(self) -> None:
        self._transcript = Transcript(Snapshot(topic=TopicInfo(id="t"), seq=1))
        self._started: set[str] = set()
        self._ended: set[str] = set()
        self._event_seen = trio.Event()

    @property
    def transcript(self) -> Transcript:
        return self._transcript

    def see_turn_end(self, turn_id: str) -> None:
        self._ended.add(turn_id)
        self._event_seen.set()
        self._event_seen = trio.Event()


async def test_piped_input_waits_for_a_turn_it_started_before_its_events_arrive() -> None:
    """The send's reply (turn t1 started) came, its `turn-started` event not yet: the end of
    piped input still waits for t1's end (it used to quit at once, losing the answer)."""
    requests = _Requests()
    requests._started.add("t1")
    done = trio.Event()

    async def drain() -> None:
        await requests._wait_idle()
        done.set()

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(drain)
            await trio.testing.wait_all_tasks_blocked()
            assert not done.is_set()
            requests.see_turn_end("t1")
    assert done.is_set()
