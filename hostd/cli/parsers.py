"""Argument parsers of the daemon-core commands. Light on purpose: the command modules (and
trio, rich, msgspec) are imported only when a command runs (CLI start-up time matters)."""

from __future__ import annotations

import argparse
import importlib
import os
from collections.abc import Callable
from typing import Any


def _lazy(module: str, name: str) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        fn: Any = getattr(importlib.import_module(f"hostd.cli.{module}"), name)
        result: int = fn(args)
        return result

    return run


def _count(text: str) -> int:
    """A number of messages: 0 or more (argparse `type`: anything else is a usage error)."""
    try:
        n = int(text)
    except ValueError:
        n = -1
    if n < 0:
        raise argparse.ArgumentTypeError(f"invalid count {text!r}: use 0 or a positive number")
    return n


def common_options() -> argparse.ArgumentParser:
    """The options every daemon command takes after its name too (`--home`, `--autostart`)."""
    return _common()


def _common() -> argparse.ArgumentParser:
    # `--home` / `--autostart` also after the command (`hostd serve --home X`); SUPPRESS keeps
    # a value given before the command when it is not repeated after it.
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--home", default=argparse.SUPPRESS, help="hostd folder (like HOSTD_HOME)")
    p.add_argument("--autostart", action="store_true", default=argparse.SUPPRESS,
                   help="start the daemon if it is not running")
    return p


def add_daemon_parsers(sub: argparse._SubParsersAction, handlers: dict) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("serve", parents=[_common()], help="run the daemon (foreground; --detach to daemonise)")
    p.add_argument("--detach", action="store_true", help="run in the background and return")
    p.add_argument("--default-driver", default=os.environ.get("HOSTD_DEFAULT_DRIVER", ""),
                   help="driver for topics created without one")
    p.add_argument("--flush-interval", type=float, default=None,
                   help="store flush interval in seconds (bound on what kill -9 loses)")
    p.add_argument("--driver-nice", type=int, default=None,
                   help="CPU nice value (0-19) of driver processes and their session groups, "
                   "so the daemon and the desktop win under load (default: 10, or "
                   "$HOSTD_DRIVER_NICE; 0 turns it off)")
    p.add_argument("--log-level", default=os.environ.get("HOSTD_LOG_LEVEL", "INFO").upper(),
                   type=str.upper, choices=["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"],
                   help="how much the daemon logs (default: INFO, or $HOSTD_LOG_LEVEL)")
    p.add_argument("--ready-fd", type=int, default=None, help=argparse.SUPPRESS)
    handlers["serve"] = _lazy("daemon_cmds", "cmd_serve")

    p = sub.add_parser("status", parents=[_common()], help="show whether the daemon runs, and what it does")
    p.add_argument("--json", action="store_true", help="print JSON (for scripts)")
    handlers["status"] = _lazy("daemon_cmds", "cmd_status")

    p = sub.add_parser(
        "stop", parents=[_common()],
        help="stop a topic's turn (hostd stop TOPIC), or the daemon (hostd stop)",
        description="With a topic: stop its running turn; the partial answer is kept as "
        "'stopped' and queued messages come back as drafts. With --row: stop only that "
        "answer of a message sent with --also (the other answers go on). Without a topic: "
        "stop the daemon gracefully (turns are stopped, the store flushed, the socket removed).",
    )
    p.add_argument("topic", nargs="?", default="", help="topic whose turn to stop")
    p.add_argument("--row", default="", metavar="ROW",
                   help="stop only this answer (a row id) of the running turn")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--timeout", type=float, default=15.0,
                   help="seconds to wait for the daemon to exit (default: 15)")
    handlers["stop"] = _lazy("daemon_cmds", "cmd_stop")


def add_topic_parsers(sub: argparse._SubParsersAction, handlers: dict) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("topics", parents=[_common()], help="list topics")
    p.add_argument("--json", action="store_true", help="print JSON (for scripts)")
    handlers["topics"] = _lazy("topic_cmds", "cmd_topics")

    p = sub.add_parser("new", parents=[_common()], help="create a topic and print its id")
    p.add_argument("--title", default="", help="the topic's title")
    p.add_argument("--driver", default="",
                   help="driver (default: the `default` role of roles.toml, else claude-code when "
                        "ready; `hostd drivers` lists them)")
    p.add_argument("--model", default="", help="model name, or use::<role> (roles.toml)")
    p.add_argument("--assistant", default="", help="assistant preset (`hostd assistants`)")
    p.add_argument("--working-dir", default="",
                   help="where the agent works (default: the current directory)")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="driver option (repeatable); values are JSON if they parse, else text")
    p.add_argument("--json", action="store_true", help="print the topic as JSON")
    handlers["new"] = _lazy("topic_cmds", "cmd_new")

    p = sub.add_parser("send", parents=[_common()], help="send a message to a topic")
    p.add_argument("topic", help="topic id")
    p.add_argument("text", nargs="?", default=None,
                   help="the message; - reads it from stdin (see also --file)")
    p.add_argument("--file", default=None, metavar="PATH",
                   help="read the message from this file (- for stdin)")
    p.add_argument("--intent", choices=["auto", "start", "steer", "queue"], default="auto",
                   help="start: only when idle; steer: into the running answer; queue: after "
                   "it; auto (default): start when idle, else steer")
    p.add_argument("--image", action="append", default=[], metavar="PATH",
                   help="send this image along (PNG, JPEG, GIF, WebP; repeatable); a message "
                   "with images waits for a running answer's end instead of steering it")
    p.add_argument("--follow", action="store_true", help="print the answer until the turn ends")
    p.add_argument("--json", action="store_true", help="print the send result as JSON (without --follow)")
    from hostd.cli.answers_cmd import add_also_option

    add_also_option(p)
    handlers["send"] = _lazy("topic_cmds", "cmd_send")

    p = sub.add_parser("history", parents=[_common()], help="print a topic's messages")
    p.add_argument("topic", help="topic id")
    p.add_argument("--limit", type=int, default=100, help="newest messages to print (default 100)")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    p.add_argument("--all", action="store_true",
                   help="include rows a rewind removed (marked superseded); shows row ids")
    p.add_argument("--ids", action="store_true",
                   help="show each row's id (for rewind, fork, resend)")
    handlers["history"] = _lazy("topic_cmds", "cmd_history")

    p = sub.add_parser(
        "attach", parents=[_common()],
        help="show a topic's state and recent messages, then its live stream until the turn "
        "ends (an idle topic: the next turn; Ctrl-C detaches)")
    p.add_argument("topic", help="topic id")
    p.add_argument("--last", type=_count, default=10, metavar="N",
                   help="recent messages shown first (default: 10; older: hostd history)")
    p.add_argument("--keep", action="store_true",
                   help="stay attached after the turn ends, following every turn (until Ctrl-C)")
    handlers["attach"] = _lazy("attach_cmd", "cmd_attach")

    add_manage_parsers(sub, handlers)


def add_manage_parsers(sub: argparse._SubParsersAction, handlers: dict) -> None:  # type: ignore[type-arg]
    """`rename`, `delete`, `export`, `paths` and `logs` (`stop TOPIC` is in `stop`)."""
    common = _common
    p = sub.add_parser("rename", parents=[common()], help="give a topic a new title")
    p.add_argument("topic", help="topic id")
    p.add_argument("title", help="the new title")
    p.add_argument("--json", action="store_true", help="print the topic as JSON")
    handlers["rename"] = _lazy("manage_cmds", "cmd_rename")

    p = sub.add_parser("delete", parents=[common()],
                       help="delete a topic and its history (stops its turn first)")
    p.add_argument("topic", help="topic id")
    p.add_argument("-y", "--yes", action="store_true", help="do not ask to confirm")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    handlers["delete"] = _lazy("manage_cmds", "cmd_delete")

    p = sub.add_parser("export", parents=[common()],
                       help="write a topic's whole conversation as Markdown or JSON")
    p.add_argument("topic", help="topic id")
    p.add_argument("--format", choices=["md", "json"], default="md",
                   help="md (default): readable; json: every stored field")
    p.add_argument("-o", "--output", default="-", help="file to write (default: stdout)")
    handlers["export"] = _lazy("manage_cmds", "cmd_export")

    p = sub.add_parser("paths", parents=[common()],
                       help="where hostd keeps its config, data, log and socket")
    p.add_argument("--json", action="store_true", help="print JSON (for scripts)")
    handlers["paths"] = _lazy("manage_cmds", "cmd_paths")

    p = sub.add_parser("logs", parents=[common()], help="print the daemon's log (-f to follow)")
    p.add_argument("-n", "--lines", type=int, default=50, help="lines to print (default 50)")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing new lines")
    handlers["logs"] = _lazy("manage_cmds", "cmd_logs")
