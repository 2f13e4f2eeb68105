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
    p.add_argument("--log-level", default=os.environ.get("HOSTD_LOG_LEVEL", "INFO"))
    p.add_argument("--ready-fd", type=int, default=None, help=argparse.SUPPRESS)
    handlers["serve"] = _lazy("daemon_cmds", "cmd_serve")

    sub.add_parser("status", parents=[_common()], help="show whether the daemon runs, and what it does")
    handlers["status"] = _lazy("daemon_cmds", "cmd_status")

    p = sub.add_parser("stop", parents=[_common()], help="stop the daemon gracefully")
    p.add_argument("--timeout", type=float, default=15.0)
    handlers["stop"] = _lazy("daemon_cmds", "cmd_stop")


def add_topic_parsers(sub: argparse._SubParsersAction, handlers: dict) -> None:  # type: ignore[type-arg]
    sub.add_parser("topics", parents=[_common()], help="list topics")
    handlers["topics"] = _lazy("topic_cmds", "cmd_topics")

    p = sub.add_parser("new", parents=[_common()], help="create a topic and print its id")
    p.add_argument("--title", default="")
    p.add_argument("--driver", default="")
    p.add_argument("--model", default="")
    p.add_argument("--working-dir", default="")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="driver option (repeatable); values are JSON if they parse, else text")
    handlers["new"] = _lazy("topic_cmds", "cmd_new")

    p = sub.add_parser("send", parents=[_common()], help="send a message to a topic")
    p.add_argument("topic")
    p.add_argument("text")
    p.add_argument("--intent", choices=["auto", "start", "steer", "queue"], default="auto")
    p.add_argument("--follow", action="store_true", help="print the answer until the turn ends")
    handlers["send"] = _lazy("topic_cmds", "cmd_send")

    p = sub.add_parser("history", parents=[_common()], help="print a topic's messages")
    p.add_argument("topic")
    p.add_argument("--limit", type=int, default=100)
    handlers["history"] = _lazy("topic_cmds", "cmd_history")

    p = sub.add_parser("attach", parents=[_common()], help="print a topic's live stream until the turn ends (Ctrl-C)")
    p.add_argument("topic")
    handlers["attach"] = _lazy("topic_cmds", "cmd_attach")

