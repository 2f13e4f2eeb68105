"""Basic CLI commands' output, captured with a fixed-width `Console` (no daemon needed for the
printer; `status` against no daemon explains how to start one)."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from hostd.cli import common
from hostd.cli.main import COMMAND_GROUPS, build_parser, command_of, main
from hostd.cli.topic_cmds import StreamPrinter
from hostd_protocol.client_messages import (
    MessageRow,
    NoticeEvent,
    RowAppended,
    RowOpened,
    Snapshot,
    TopicInfo,
    TurnEnded,
)
from hostd_protocol.common import TextDelta, ToolCall


@pytest.fixture
def capture() -> Console:
    c = Console(color_system=None, width=80, record=True, soft_wrap=True)
    common.set_console(c)
    yield c
    common.set_console(None)


def test_stream_printer(capture: Console) -> None:
    p = StreamPrinter()
    topic = TopicInfo(id="tp")
    user = MessageRow(id="u", topic_id="tp", role="user", status="success", position=1,
                      parts=[TextDelta("hi")])
    p.show(Snapshot(topic=topic, seq=1, rows=[user]))
    p.show(RowOpened(topic_id="tp", seq=2, row=MessageRow(
        id="a", topic_id="tp", role="assistant", status="pending", position=2)))
    p.show(RowAppended(topic_id="tp", seq=3, row_id="a", chunk=TextDelta("Hel")))
    p.show(RowAppended(topic_id="tp", seq=4, row_id="a", chunk=TextDelta("lo [b]")))
    p.show(RowAppended(topic_id="tp", seq=5, row_id="a", chunk=ToolCall(call_id="c", name="Read")))
    p.show(TurnEnded(topic_id="tp", seq=6, turn_id="t", status="stopped"))
    assert capture.export_text() == (
        "user:\nhi\nassistant:\nHello [b]\n[tool Read]\n\n(turn stopped)\n"
    )


def test_a_failure_mid_answer_starts_its_own_line(
    capture: Console, capsys: pytest.CaptureFixture[str]
) -> None:
    # Found from outside: the daemon killed during `hostd send --follow` printed
    # "onehostd: lost the connection to hostd: ..." on the terminal (the answer's line was open).
    p = StreamPrinter()
    p.show(RowOpened(topic_id="tp", seq=1, row=MessageRow(
        id="a", topic_id="tp", role="assistant", status="pending", position=2)))
    p.show(RowAppended(topic_id="tp", seq=2, row_id="a", chunk=TextDelta("one")))
    assert common.fail("lost the connection") == 1
    assert capture.export_text() == "assistant:\none\n"
    assert capsys.readouterr().err == "hostd: lost the connection\n"
    assert common.fail("again") == 1  # the line is closed once
    assert capture.export_text() == ""


SCHEDULED = {"client_msg_id": "schedule:sc7:1800000000.0"}


def test_stream_printer_labels_a_scheduled_run_with_its_schedule(capture: Console) -> None:
    p = StreamPrinter()
    topic = TopicInfo(id="tp")
    typed = MessageRow(id="u", topic_id="tp", role="user", status="success", position=1,
                       parts=[TextDelta("hi")])
    ran = MessageRow(id="s", topic_id="tp", role="user", status="success", position=3,
                     parts=[TextDelta("report")], meta=SCHEDULED)
    p.show(Snapshot(topic=topic, seq=1, rows=[typed, ran]))
    p.show(RowOpened(topic_id="tp", seq=2, row=MessageRow(
        id="s2", topic_id="tp", role="user", status="pending", position=5,
        parts=[TextDelta("report again")], meta={"client_msg_id": "schedule:sc7:now:5.0"})))
    assert capture.export_text() == (
        "user:\nhi\nschedule sc7:\nreport\nschedule sc7: report again\n"
    )


def test_a_notice_waits_for_the_streaming_text_to_break(capture: Console) -> None:
    p = StreamPrinter()
    p.show(RowOpened(topic_id="tp", seq=2, row=MessageRow(
        id="a", topic_id="tp", role="assistant", status="pending", position=2)))
    p.show(RowAppended(topic_id="tp", seq=3, row_id="a", chunk=TextDelta("Hello wo")))
    p.show(NoticeEvent(topic_id="tp", seq=4, code="schedule_skipped", level="warning",
                       message="schedule sc1: skipped"))
    p.show(RowAppended(topic_id="tp", seq=5, row_id="a", chunk=TextDelta("rld.")))
    p.show(RowAppended(topic_id="tp", seq=6, row_id="a", chunk=ToolCall(call_id="c", name="Read")))
    p.show(RowAppended(topic_id="tp", seq=7, row_id="a", chunk=TextDelta("Done")))
    p.show(NoticeEvent(topic_id="tp", seq=8, code="x", level="info", message="second"))
    p.show(TurnEnded(topic_id="tp", seq=9, turn_id="t", status="success"))
    p.show(NoticeEvent(topic_id="tp", seq=10, code="x", level="info", message="idle"))
    assert capture.export_text() == (
        "assistant:\nHello world.\n[tool Read]\n\n[warning] schedule sc1: skipped\n"
        "Done\n\n[info] second\n\n[info] idle\n"
    )


def test_status_without_daemon_says_how_to_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "h"
    assert main(["--home", str(home), "status"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("hostd: hostd is not running (no socket); start it with ")
    assert f"`hostd serve --home {home}`" in err


@pytest.mark.parametrize("where", ["file", "long"])
def test_a_home_with_no_usable_socket_path_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str
) -> None:
    # Connecting fails with neither "no such file" nor "refused": under a file (ENOTDIR), or
    # past the Unix socket path limit (an OSError without errno). Found from outside: both
    # printed a traceback.
    if where == "file":
        (tmp_path / "f").write_text("")
        home = tmp_path / "f"
    else:
        home = tmp_path / ("h" * 120)
    assert main(["--home", str(home), "status"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith(f"hostd: cannot reach hostd at {home / 'run' / 'hostd.sock'}: ")
    assert err.endswith("point --home / HOSTD_HOME at a folder of your own\n")


@pytest.mark.parametrize(
    ("argv", "env", "said"),
    [
        ([], {"HOSTD_LOG_LEVEL": "bogus"},
         "hostd: --log-level must be one of DEBUG, INFO, WARNING, ERROR, CRITICAL, not 'BOGUS'\n"),
        (["--flush-interval", "-1"], {},
         "hostd: --flush-interval is in seconds, 0 or more, not -1\n"),
    ],
)
def test_serve_detach_checks_its_settings_before_it_detaches(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
    argv: list[str], env: dict[str, str], said: str,
) -> None:
    # Found from outside: a bad $HOSTD_LOG_LEVEL with --detach said only "it exited with
    # code 2" (the reason went to the detached daemon's log); a negative flush interval ran.
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    home = tmp_path / "h"
    assert main(["--home", str(home), "serve", "--detach", *argv]) == 1
    assert capsys.readouterr().err == said
    assert not (home / "run" / "hostd.sock").exists()


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["nosuch"], "hostd: argument COMMAND: invalid choice: 'nosuch' (choose from "),
        (["send"], "hostd: the following arguments are required: topic; see `hostd send --help`"),
        (["new", "--cwd", "/x"], "hostd: unrecognized arguments: --cwd /x; see `hostd new --help`"),
        (["send", "t", "hi", "--intent", "bogus"], "hostd: argument --intent: invalid choice: "),
        (["completion", "fish"], "hostd: argument shell: invalid choice: 'fish'"),
        (["schedule", "add", "t", "x", "--cron", "0 9 * * *", "--every", "5m"],
         "hostd: argument --every: not allowed with argument --cron; see `hostd schedule add "
         "--help`"),
        (["logs", "--lines", "abc"], "hostd: argument -n/--lines: invalid int value: 'abc'; see "),
    ],
)
def test_every_usage_error_is_one_line_naming_the_help_to_read(
    capsys: pytest.CaptureFixture[str], argv: list[str], said: str
) -> None:
    # Found from outside: a missing argument, an unknown option or a bad choice printed the
    # command's usage (up to 5 wrapped lines) and then the error; only a bad value was one line.
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith(said), err
    assert err.endswith(" --help`\n"), err


def test_command_groups_cover_every_command() -> None:
    _, every = build_parser()
    assert set(every) == set(COMMAND_GROUPS)
    for command in every:
        _, handlers = build_parser(command)
        assert command in handlers and len(handlers) < len(every)


def test_command_of() -> None:
    assert command_of(["--home", "topics", "status"]) == "status"
    assert command_of(["--autostart", "--home=/x", "send", "t", "hi"]) == "send"
    assert command_of(["-h", "topics"]) is None
    assert command_of(["--version"]) is None


def test_text_table() -> None:
    text = common.text_table(("id", "cost"), [("a", "$1.0"), ("long id", "$10.25")], right=[1])
    assert text == "id         cost\na          $1.0\nlong id  $10.25"
    assert common.text_table(None, [("pid", 7), ("socket", "/s")]) == "pid     7\nsocket  /s"
