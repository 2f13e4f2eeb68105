"""`hostd schedule ...`: argument parsing and rendering (the daemon side is in tests/e2e)."""

from __future__ import annotations

import argparse

import pytest
from rich.console import Console

from hostd.cli import common
from hostd.cli.main import build_parser
from hostd.cli.schedule_cmds import due_text, parse_duration, render_list, render_one, span_text
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
    paused = ScheduleInfo(
        id="sc2", assistant="daily", text="/text a\n/tool Read", every_s=300, enabled=False,
        busy="skip", missed="skip",
    )
    render_one("add", info, capture, now=NOW)
    render_list([info, paused], capture, now=NOW, titles={"tp1": "Morning news"})
    assert capture.export_text() == (
        "added schedule sc1: cron '0 9 * * 1-5' (Europe/Berlin) on topic tp1; next run "
        "2027-01-15T10:00:00+01:00 (in 1h)\n"
        "sc1  on  cron '0 9 * * 1-5' (Europe/Berlin) on topic 'Morning news' (tp1)\n"
        "  message: report\n"
        "  next run: 2027-01-15T10:00:00+01:00 (in 1h)\n"
        "  when busy: queue behind the answer · missed runs: run once at start\n"
        "  runs 3 · skipped 1 · last: error: driver crashed\n"
        "sc2  paused  every 5m on a new topic of assistant daily per run\n"
        "  message: /text a ⏎ /tool Read\n"
        "  next run: - (paused)\n"
        "  when busy: skip that run · missed runs: skip them\n"
        "  runs 0 · skipped 0 · last: -\n"
    )


def test_two_schedules_on_one_topic_differ_by_their_messages(capture: Console) -> None:
    a = ScheduleInfo(id="sc1", topic_id="tp1", text="summarise the news", every_s=3600)
    b = ScheduleInfo(id="sc2", topic_id="tp1", text="x" * 100, every_s=3600)
    render_list([a, b], capture, now=NOW, titles={"tp1": "News"})
    text = capture.export_text()
    assert "  message: summarise the news\n" in text
    assert f"  message: {'x' * 69}…\n" in text
    assert text.count("on topic 'News' (tp1)") == 2


@pytest.mark.parametrize(
    ("seconds", "said"),
    [
        (0, "0s"), (42, "42s"), (119, "119s"), (125, "2m"), (3599, "1h"), (3600, "1h"),
        (80524, "22h 22m"), (86400, "1 day"), (100000, "1 day 4h"), (3 * 86400 + 500, "3 days"),
        (400 * 86400, "400 days"),
    ],
)
def test_far_off_times_read_humanly(seconds: float, said: str) -> None:
    assert span_text(seconds) == said
    assert due_text(NOW + seconds, "UTC", NOW).endswith(f"(in {said})")


def test_due_text_in_the_past_and_an_unknown_zone() -> None:
    assert due_text(NOW - 90, "Nowhere/Land", NOW) == "2027-01-15T07:58:30+00:00 (90s ago)"
    assert due_text(None, "UTC", NOW) == "-"


def test_parse_duration_refuses_zero() -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=r"^invalid interval '0s': it must be longer than 0 s$"):
        parse_duration("0s")


def test_a_due_time_past_year_9999_is_shown_not_raised() -> None:
    # A schedule stored before intervals were bounded made every `hostd schedule list` fail.
    assert due_text(8.64e15, "UTC", NOW) == "at 8640000000000000 (epoch s, beyond year 9999)"


def test_options_go_before_or_after_the_positionals_of_any_command() -> None:
    # One parser class for every command: `send TOPIC --follow TEXT` as much as schedules.
    for argv in (["send", "tp1", "--follow", "hello"], ["send", "--follow", "tp1", "hello"],
                 ["send", "tp1", "hello", "--follow"]):
        parser, _ = build_parser(argv[0])
        args, extras = parser.parse_known_args(argv)
        assert (args.topic, args.text, args.follow, extras) == ("tp1", "hello", True, [])


def test_an_unknown_option_is_a_usage_error_of_its_own_command(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from hostd.cli.main import main

    with pytest.raises(SystemExit) as exit_:
        main(["schedule", "add", "tp1", "hi", "--every", "5m", "--nope"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err == (
        "hostd: unrecognized arguments: --nope; see `hostd schedule add --help`\n"
    )
