"""`hostd schedule add/list/remove/pause/resume/run-now`: scheduled prompts.

One-shot commands: one request through the blocking client (`hostd.cli.common.request`, no
trio, no rich). `--json` prints the wire record(s) as JSON for scripts; otherwise plain text.
"""

from __future__ import annotations

import argparse
import os
import re
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hostd.cli.common import Output
    from hostd_protocol.client_messages import ScheduleInfo

Handler = Callable[[argparse.Namespace], int]

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")


def parse_duration(text: str) -> float:
    """`90`, `90s`, `5m`, `2h`, `1d` -> seconds (argparse `type`: a bad one is a usage error)."""
    negative = text.strip().startswith("-")
    m = _DURATION.match(text.strip().removeprefix("-"))
    if m is None:
        raise argparse.ArgumentTypeError(
            f"invalid interval {text!r}: use a number with an optional unit s, m, h or d (5m)"
        )
    seconds = float(m.group(1)) * _UNITS[m.group(2) or "s"]
    if negative or seconds <= 0:
        raise argparse.ArgumentTypeError(
            f"invalid interval {text!r}: it must be longer than 0 s"
        )
    return seconds


def local_zone() -> str:
    """The IANA name of this machine's time zone (TZ, else /etc/localtime), else UTC."""
    tz = os.environ.get("TZ", "").lstrip(":")
    if tz and "/" in tz and not tz.startswith("/"):
        return tz
    try:
        target = os.path.realpath("/etc/localtime")
    except OSError:
        return "UTC"
    marker = "/zoneinfo/"
    return target.split(marker, 1)[1] if marker in target else "UTC"


class _TopicAndText(argparse.Action):
    """`TOPIC TEXT`, or `TEXT` alone with `--assistant`: a wrong count is a usage error of
    `schedule add` (options are parsed before positionals, so `--assistant` is known here)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        words = list(values)
        want = 1 if getattr(namespace, "assistant", "") else 2
        if len(words) != want:
            usage = "TEXT (with --assistant)" if want == 1 else "TOPIC TEXT"
            given = " ".join(repr(w) for w in words)
            parser.error(
                f"takes {usage}; got {len(words)} argument{'s' if len(words) != 1 else ''} "
                f"({given}): quote a message of several words"
            )
        setattr(namespace, self.dest, words)


def register(sub: argparse._SubParsersAction, handlers: dict[str, Handler]) -> None:  # type: ignore[type-arg]
    """Add `schedule` and its subcommands to the `hostd` parser."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--home", default=argparse.SUPPRESS, help="hostd folder (like HOSTD_HOME)")
    common.add_argument("--autostart", action="store_true", default=argparse.SUPPRESS,
                        help="start the daemon if it is not running")
    common.add_argument("--json", action="store_true", help="print the result as JSON")

    p = sub.add_parser("schedule", help="prompts the daemon sends on a schedule")
    verbs = p.add_subparsers(dest="verb", metavar="VERB", required=True)

    a = verbs.add_parser(
        "add",
        parents=[common],
        usage="hostd schedule add (TOPIC | --assistant NAME) TEXT (--cron EXPR | --every INTERVAL) ...",
        help="send TEXT to TOPIC (or to a new topic of an assistant) on a schedule",
    )
    a.add_argument("target", nargs="+", metavar="TOPIC TEXT", action=_TopicAndText,
                   help="topic id and the message to send at each due time (TEXT alone "
                        "with --assistant)")
    a.add_argument("--assistant", default="",
                   help="create a topic of this assistant for every run instead of one topic")
    when = a.add_mutually_exclusive_group(required=True)
    when.add_argument("--cron", help="5-field cron expression, e.g. '0 9 * * 1-5'")
    when.add_argument("--every", type=parse_duration, metavar="INTERVAL",
                      help="interval: 90, 90s, 5m, 2h, 1d (counted from now)")
    a.add_argument("--tz", default=None,
                   help="IANA time zone of the cron expression (default: this machine's)")
    a.add_argument("--busy", choices=["queue", "skip"], default="queue",
                   help="when the topic is answering: wait in its queue, or skip that run")
    a.add_argument("--missed", choices=["run-once", "skip"], default="run-once",
                   help="due times missed while hostd was down: run once at start, or skip")
    a.add_argument("--paused", action="store_true", help="add it paused (resume to start)")

    ls = verbs.add_parser("list", parents=[common], help="list schedules")
    ls.add_argument("--topic", default="", help="only this topic's schedules")

    for verb, text in (
        ("remove", "delete a schedule"),
        ("pause", "stop running a schedule until it is resumed"),
        ("resume", "run a paused schedule again (from now on)"),
        ("run-now", "send a schedule's message now"),
    ):
        v = verbs.add_parser(verb, parents=[common], help=text)
        v.add_argument("schedule", help="schedule id")
    handlers["schedule"] = run_schedule


def _request(args: argparse.Namespace, msg: Any) -> Any:
    from hostd.cli.common import request

    return request(args, msg)


def run_schedule(args: argparse.Namespace, console: Output | None = None) -> int:
    """Dispatch one `hostd schedule VERB` (the exit code: 0, or 1 with the error printed)."""
    from hostd.cli.common import out
    from hostd_protocol.client_messages import (
        AddSchedule,
        ListSchedules,
        RemoveSchedule,
        RunScheduleNow,
        ScheduleListResult,
        ScheduleResult,
        SetScheduleEnabled,
    )

    console = console or out()
    msg: Any
    if args.verb == "add":
        msg = AddSchedule(
            id=0,
            topic_id="" if args.assistant else args.target[0],
            assistant=args.assistant,
            text=args.target[-1],
            cron=args.cron or "",
            every_s=args.every or 0.0,
            tz=args.tz or local_zone(),
            busy=args.busy,
            missed=args.missed,
            enabled=not args.paused,
        )
    elif args.verb == "list":
        if not args.json:
            return _list(args, console)
        msg = ListSchedules(id=0, topic_id=args.topic)
    elif args.verb == "remove":
        msg = RemoveSchedule(id=0, schedule_id=args.schedule)
    elif args.verb in ("pause", "resume"):
        msg = SetScheduleEnabled(id=0, schedule_id=args.schedule, enabled=args.verb == "resume")
    else:
        msg = RunScheduleNow(id=0, schedule_id=args.schedule)
    result = _request(args, msg)
    if isinstance(result, int):
        return result
    if args.json:
        import msgspec

        if isinstance(result, ScheduleListResult):
            payload: Any = result.schedules
        elif isinstance(result, ScheduleResult):
            payload = result.schedule
        else:
            payload = {"removed": args.schedule}
        console.print(msgspec.json.encode(payload).decode(), markup=False)
        return 0
    if isinstance(result, ScheduleListResult):
        render_list(result.schedules, console, now=time.time())
    elif isinstance(result, ScheduleResult):
        render_one(args.verb, result.schedule, console, now=time.time())
    else:
        console.print(f"removed schedule {args.schedule}", markup=False)
    return 0


def _list(args: argparse.Namespace, console: Output) -> int:
    """`schedule list` for people: each schedule with its topic's title (one more request)."""
    from hostd.cli.common import requests
    from hostd_protocol.client_messages import ListSchedules, ListTopics

    results = requests(args, ListSchedules(id=0, topic_id=args.topic), ListTopics(id=0))
    if isinstance(results, int):
        return results
    listed, topics = results
    titles = {t.id: t.title for t in topics.topics}
    render_list(listed.schedules, console, now=time.time(), titles=titles)
    return 0


def when_text(info: ScheduleInfo) -> str:
    """How often a schedule runs, as the user gave it."""
    if info.every_s:
        return f"every {_seconds(info.every_s)}"
    return f"cron '{info.cron}' ({info.tz})"


def due_text(t: float | None, tz: str, now: float) -> str:
    """A due time in the schedule's zone, with how far away it is."""
    if t is None:
        return "-"
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        zone = ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        zone = ZoneInfo("UTC")
    try:
        stamp = datetime.fromtimestamp(t, zone).isoformat(timespec="seconds")
    except (OverflowError, ValueError, OSError):
        # Past what a date holds (a schedule stored before intervals were bounded): the
        # listing still shows every other schedule.
        return f"at {t:.0f} (epoch s, beyond year 9999)"
    delta = t - now
    rel = f"in {span_text(delta)}" if delta >= 0 else f"{span_text(-delta)} ago"
    return f"{stamp} ({rel})"


def span_text(s: float) -> str:
    """How long `s` seconds is, the way a person says it: `42s`, `12m`, `22h 21m`,
    `1 day 4h`, `3 days` (rounded to what matters at that length)."""
    if s < 120:
        return f"{s:.0f}s" if s >= 1 or s == 0 else f"{s:.1f}s"
    minutes = round(s / 60)
    if minutes < 60:
        return f"{minutes}m"
    if minutes < 24 * 60:
        h, m = divmod(minutes, 60)
        return f"{h}h {m}m" if m else f"{h}h"
    hours = round(s / 3600)
    if hours < 48:
        d, h = divmod(hours, 24)
        return f"{d} day {h}h" if h else f"{d} day"
    return f"{round(s / 86400)} days"


def _seconds(s: float) -> str:
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("m", 60.0)):
        if s >= size and (s / size).is_integer():
            return f"{s / size:.0f}{unit}"
    return f"{s:.0f}s" if s >= 1 or s == 0 else f"{s:.1f}s"


def target_text(info: ScheduleInfo, titles: Mapping[str, str] | None = None) -> str:
    """Where runs go: the topic (by its title when known), or a new topic of the assistant."""
    if not info.topic_id:
        return f"a new topic of assistant {info.assistant} per run"
    title = (titles or {}).get(info.topic_id, "")
    return f"topic {title!r} ({info.topic_id})" if title else f"topic {info.topic_id}"


def render_one(verb: str, info: ScheduleInfo, console: Output, *, now: float) -> None:
    done = {"add": "added", "pause": "paused", "resume": "resumed", "run-now": "ran"}[verb]
    state = "" if info.enabled else ", paused"
    console.print(
        f"{done} schedule {info.id}: {when_text(info)} on {target_text(info)}{state}; "
        f"next run {due_text(info.next_due, info.tz, now)}",
        markup=False,
    )
    if verb == "run-now" and info.last_status:
        console.print(f"last run: {info.last_status} {info.last_error}".rstrip(), markup=False)


#: How much of a schedule's message `schedule list` shows (the rest: `--json`).
TEXT_CHARS = 70
_BUSY = {"queue": "queue behind the answer", "skip": "skip that run"}
_MISSED = {"run-once": "run once at start", "skip": "skip them"}


def message_line(text: str) -> str:
    """A schedule's message on one line, cut at `TEXT_CHARS`."""
    # A multi-line message (a script) keeps its line breaks visible.
    line = " ⏎ ".join(" ".join(part.split()) for part in text.splitlines() if part.strip())
    return line if len(line) <= TEXT_CHARS else line[: TEXT_CHARS - 1] + "…"


def render_list(
    schedules: list[ScheduleInfo],
    console: Output,
    *,
    now: float,
    titles: Mapping[str, str] | None = None,
) -> None:
    """Each schedule as a short block: what, where, when, and how it went. Topics are named
    by their titles (two schedules on one topic differ by their messages)."""
    from hostd.cli.common import terminal_safe

    if not schedules:
        console.print("no schedules", markup=False)
        return
    blocks = []
    for s in schedules:
        state = "on" if s.enabled else "paused"
        nxt = due_text(s.next_due, s.tz, now) if s.enabled else "- (paused)"
        last: str = s.last_status or "-"
        if s.last_error:
            last += f": {s.last_error}"
        blocks.append("\n".join((
            f"{s.id}  {state}  {when_text(s)} on {target_text(s, titles)}",
            f"  message: {message_line(s.text)}",
            f"  next run: {nxt}",
            f"  when busy: {_BUSY.get(s.busy, s.busy)} · missed runs: {_MISSED.get(s.missed, s.missed)}",
            f"  runs {s.runs} · skipped {s.skipped} · last: {last}",
        )))
    console.print(terminal_safe("\n".join(blocks)), markup=False)
