"""`hostd` entry point: parse the command line and dispatch to one command module.

Command modules are imported lazily, so `hostd topics` does not pay for what `hostd chat`
needs (CLI start-up time is a benchmark target).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from hostd import __version__

Handler = Callable[[argparse.Namespace], int]


def _cmd_protocol_schema(args: argparse.Namespace) -> int:
    from hostd_protocol.schema_export import wire_schema_json

    text = wire_schema_json()
    if args.output and args.output != "-":
        with open(args.output, "w", encoding="utf-8") as fh:
            fh.write(text)
        print(f"wrote {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def _cmd_drivers(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from hostd.driver_registry import DriverRegistry

    table = Table(title="hostd drivers")
    table.add_column("driver")
    table.add_column("available")
    table.add_column("description / reason")
    for info in DriverRegistry.discover().infos():
        table.add_row(
            info.name,
            "yes" if info.available else "[red]no[/red]",
            info.description if info.available else info.reason,
        )
    Console().print(table)
    return 0


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, Handler]]:
    parser = argparse.ArgumentParser(prog="hostd", description="hostd: local agent host daemon")
    parser.add_argument("--version", action="version", version=f"hostd {__version__}")
    parser.add_argument(
        "--home", default=None, help="put every hostd path under this folder (like HOSTD_HOME)"
    )
    parser.add_argument(
        "--autostart", action="store_true", help="start the daemon if it is not running"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    handlers: dict[str, Handler] = {}

    p = sub.add_parser("protocol-schema", help="write the wire protocol's JSON Schema")
    p.add_argument("output", nargs="?", default="-", help="file to write (default: stdout)")
    handlers["protocol-schema"] = _cmd_protocol_schema

    sub.add_parser("drivers", help="list installed drivers and why any is unavailable")
    handlers["drivers"] = _cmd_drivers

    from hostd.cli import assistants_cmd  # light: its heavy imports happen when it runs

    assistants_cmd.register(sub, handlers)

    from hostd.cli.chat_parsers import add_chat_parsers  # `hostd chat`, `hostd demo`

    add_chat_parsers(sub, handlers)

    from hostd.cli import turn_cmds  # `hostd continue`, `hostd usage` (turn pipeline)

    turn_cmds.register(sub, handlers)

    # Daemon-core commands; their modules import rich/trio only when they run.
    from hostd.cli.parsers import add_daemon_parsers, add_topic_parsers

    add_daemon_parsers(sub, handlers)
    add_topic_parsers(sub, handlers)

    return parser, handlers


def main(argv: Sequence[str] | None = None) -> int:
    parser, handlers = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    return handlers[args.command](args)
