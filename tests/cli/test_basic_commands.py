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


def test_status_without_daemon_says_how_to_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "h"
    assert main(["--home", str(home), "status"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("hostd: hostd is not running (FileNotFoundError); start it with ")
    assert f"`hostd serve --home {home}`" in err


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
