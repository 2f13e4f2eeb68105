"""`hostd schedule ...`: argument parsing and rendering (the daemon side is in tests/e2e)."""

from __future__ import annotations

import argparse

import pytest
from rich.console import Console

from hostd.cli import common
from hostd.cli.main import build_parser
from hostd.cli.schedule_cmds import due_text, parse_duration, render_list, render_one
from hostd_protocol.client_messages import ScheduleInfo

NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z


@pytest.fixture
def capture() -> Console:
    c = Console(color_system=None, width=160, record=True, soft_wrap=True)
    common.set_console(c)
    yield c
    common.set_console(None)


@pytest.mark.parametrize(
    ("text", "seconds"), [("90", 90.0), ("90s", 90.0), ("5m", 300.0), ("2h", 7200.0), ("1d", 86400.0), ("1.5m", 90.0)]
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


def test_parse_duration_refuses_other_units() -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=r"^invalid interval '5 weeks': use a number"):
        parse_duration("5 weeks")


def test_add_needs_exactly_one_of_cron_or_every(capsys: pytest.CaptureFixture[str]) -> None:
    parser, _ = build_parser("schedule")
    args = parser.parse_args(["schedule", "add", "tp1", "hi", "--every", "5m", "--tz", "UTC"])
    assert (args.verb, args.target, args.every, args.cron, args.busy, args.missed) == (
        "add", ["tp1", "hi"], 300.0, None, "queue", "run-once"
    )
    args = parser.parse_args(["schedule", "add", "--assistant", "daily", "hi", "--cron", "0 9 * * *"])
    assert (args.assistant, args.target) == ("daily", ["hi"])
    with pytest.raises(SystemExit):
        parser.parse_args(["schedule", "add", "tp1", "hi", "--every", "5m", "--cron", "* * * * *"])
    with pytest.raises(SystemExit):
        parser.parse_args(["schedule", "add", "tp1", "hi"])
    assert "one of the arguments --cron --every is required" in capsys.readouterr().err


def test_render_one_and_list(capture: Console) -> None:
    info = ScheduleInfo(
        id="sc1", topic_id="tp1", text="report", cron="0 9 * * 1-5", tz="Europe/Berlin",
        next_due=NOW + 3600, runs=3, skipped=1, last_status="error", last_error="driver crashed",
    )
    paused = ScheduleInfo(id="sc2", assistant="daily", text="x", every_s=300, enabled=False)
    render_one("add", info, capture, now=NOW)
    render_list([info, paused], capture, now=NOW)
    assert capture.export_text() == (
        "added schedule sc1: cron '0 9 * * 1-5' (Europe/Berlin) on topic tp1; next run "
        "2027-01-15T10:00:00+01:00 (in 1h)\n"
        "schedule  topic            when                                state   next run"
        "                           runs/skipped  last\n"
        "sc1       tp1              cron '0 9 * * 1-5' (Europe/Berlin)  on      "
        "2027-01-15T10:00:00+01:00 (in 1h)  3/1           error: driver crashed\n"
        "sc2       new daily topic  every 5m                            paused  -"
        "                                  0/0           -\n"
    )


def test_due_text_in_the_past_and_an_unknown_zone() -> None:
    assert due_text(NOW - 90, "Nowhere/Land", NOW) == "2027-01-15T07:58:30+00:00 (90s ago)"
    assert due_text(None, "UTC", NOW) == "-"


def test_parse_duration_refuses_zero() -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=r"^invalid interval '0s': it must be longer than 0 s$"):
        parse_duration("0s")


def test_a_due_time_past_year_9999_is_shown_not_raised() -> None:
    # A schedule stored before intervals were bounded made every `hostd schedule list` fail.
    assert due_text(8.64e15, "UTC", NOW) == "at 8640000000000000 (epoch s, beyond year 9999)"
