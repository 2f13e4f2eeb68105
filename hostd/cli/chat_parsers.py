"""Argument parsers of `hostd chat` and `hostd demo`. Light on purpose: the command modules
(trio, rich, the client) are imported only when a command runs (CLI start-up time matters)."""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from typing import Any


def _lazy(module: str, name: str) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        fn: Any = getattr(importlib.import_module(f"hostd.cli.{module}"), name)
        result: int = fn(args)
        return result

    return run


def add_chat_parsers(sub: argparse._SubParsersAction, handlers: dict) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "chat",
        help="chat with a topic in the terminal (type while it answers to steer)",
        description="Open (or create) a topic and chat with it. Type while the answer streams "
        "to steer it; /help lists the commands. Enter sends; Alt-Enter, Ctrl-J or \\ then "
        "Enter start a new line; a paste is kept whole; Up/Down recall what you sent. "
        "Ctrl-C stops the answer, twice quits; the "
        "daemon and the topic keep going.",
    )
    p.add_argument("topic", nargs="?", default="", help="topic id (default: a new topic)")
    p.add_argument("-c", "--continue", dest="cont", action="store_true",
                   help="open the topic used last (like `claude -c`)")
    p.add_argument("--pick", action="store_true", help="choose a topic from a numbered list")
    p.add_argument("--driver", default="", help="driver for a new topic (see `hostd drivers`)")
    p.add_argument("--assistant", default="", help="assistant for a new topic")
    p.add_argument("--model", default="", help="model for a new topic")
    p.add_argument("--title", default="", help="title for a new topic")
    p.add_argument("--working-dir", default="", help="working directory for a new topic (default: the current directory)")
    p.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="driver option for a new topic (repeatable; JSON values if they parse)",
    )
    handlers["chat"] = _lazy("chat_cmd", "cmd_chat")

    p = sub.add_parser(
        "demo",
        help="show hostd's main job end to end (temporary daemon, scripted driver, no API key)",
    )
    p.add_argument("--report", default=None, metavar="FILE", help=argparse.SUPPRESS)
    handlers["demo"] = _lazy("demo", "cmd_demo")
