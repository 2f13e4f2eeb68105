"""`hostd` entry point: parse the command line and dispatch to one command module.

Command modules are imported lazily, so `hostd topics` does not pay for what `hostd chat`
needs (CLI start-up time is a benchmark target).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from hostd import __version__

Handler = Callable[[argparse.Namespace], int]

_NEGATIVE_VALUE = re.compile(r"^-(\d+\.?\d*|\.\d+)[A-Za-z]*$")


class CommandParser(argparse.ArgumentParser):
    """An `ArgumentParser` whose commands take options before or after their positionals
    (`hostd schedule add TOPIC --every 5m TEXT`, `hostd send TOPIC --follow TEXT`).

    Plain argparse matches positionals greedily: once `TOPIC` stood alone before an option,
    a later `TEXT` was an "unrecognized argument". A command without subcommands is parsed
    the intermixed way (options first, then the positionals that are left); a parser with
    subcommands (`hostd`, `hostd schedule`) cannot be and is parsed as usual. Sub-parsers
    are made of this class too (argparse builds them from the parent's class).
    """

    _intermixing = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # `-1d`, `-5m`, `-2.5` are values (a wrong one gets its option's own message), not
        # options: argparse's default takes only plain negative numbers for values, and
        # `--every -1d` read "expected one argument".
        self._negative_number_matcher = _NEGATIVE_VALUE

    def error(self, message: str) -> NoReturn:
        """Every usage error is one line: what is wrong, and the help of this command to read
        (argparse's usage block before it was up to five wrapped lines; `--help` shows it)."""
        self.exit(2, f"hostd: {message}; see `{self.prog} --help`\n")

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        if self._intermixing or not self._intermixable():
            return super().parse_known_args(args, namespace)
        # parse_known_intermixed_args calls parse_known_args twice itself: those are plain.
        self._intermixing = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._intermixing = False

    def _intermixable(self) -> bool:
        positionals = self._get_positional_actions()
        if any(a.nargs in (argparse.PARSER, argparse.REMAINDER) for a in positionals):
            return False
        return not any(
            a in positionals for g in self._mutually_exclusive_groups for a in g._group_actions
        )


def leaf_parser(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The parser of the (sub)command `args` were parsed for: `hostd schedule add`'s for
    `hostd schedule add ...`, so its errors show its usage rather than `hostd`'s."""
    while True:
        sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
        name = getattr(args, sub.dest, None) if sub is not None else None
        if sub is None or not isinstance(name, str) or name not in sub.choices:
            return parser
        parser = sub.choices[name]


def _cmd_protocol_schema(args: argparse.Namespace) -> int:
    from hostd_protocol.schema_export import wire_schema_json

    text = wire_schema_json()
    if args.output and args.output != "-":
        try:
            with open(args.output, "w", encoding="utf-8") as fh:
                fh.write(text)
        except OSError as exc:
            print(f"hostd: cannot write {args.output}: {exc.strerror or exc}", file=sys.stderr)
            return 1
        print(f"wrote {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def _add_own(sub: argparse._SubParsersAction, handlers: dict[str, Handler]) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("protocol-schema", help="write the wire protocol's JSON Schema")
    p.add_argument("output", nargs="?", default="-", help="file to write (default: stdout)")
    handlers["protocol-schema"] = _cmd_protocol_schema

    from hostd.cli import drivers_cmd  # light: its imports happen when it runs

    drivers_cmd.register(sub, handlers)

    from hostd.cli import service_cmd

    service_cmd.register(sub, handlers)

    from hostd.cli import completion_cmd

    completion_cmd.register(sub, handlers, lambda: build_parser())


def _add_assistants(sub: argparse._SubParsersAction, handlers: dict[str, Handler]) -> None:  # type: ignore[type-arg]
    from hostd.cli import assistants_cmd  # light: its heavy imports happen when it runs

    assistants_cmd.register(sub, handlers)


def _add_chat(sub: argparse._SubParsersAction, handlers: dict[str, Handler]) -> None:  # type: ignore[type-arg]
    from hostd.cli.chat_parsers import add_chat_parsers  # `hostd chat`, `hostd demo`

    add_chat_parsers(sub, handlers)


def _add_turn(sub: argparse._SubParsersAction, handlers: dict[str, Handler]) -> None:  # type: ignore[type-arg]
    from hostd.cli import turn_cmds  # `hostd continue`, `hostd usage` (turn pipeline)

    turn_cmds.register(sub, handlers)


def _add_topic_ops(sub: argparse._SubParsersAction, handlers: dict[str, Handler]) -> None:  # type: ignore[type-arg]
    from hostd.cli import answers_cmd, topic_ops_cmds  # rewind / regenerate / resend / fork

    topic_ops_cmds.register(sub, handlers)
    answers_cmd.register(sub, handlers)  # `hostd choose` (several answers to one message)


def _add_daemon(sub: argparse._SubParsersAction, handlers: dict[str, Handler]) -> None:  # type: ignore[type-arg]
    # Daemon-core commands; their modules import rich/trio only when they run.
    from hostd.cli.parsers import add_daemon_parsers

    add_daemon_parsers(sub, handlers)


def _add_topic(sub: argparse._SubParsersAction, handlers: dict[str, Handler]) -> None:  # type: ignore[type-arg]
    from hostd.cli.parsers import add_topic_parsers

    add_topic_parsers(sub, handlers)


def _add_schedule(sub: argparse._SubParsersAction, handlers: dict[str, Handler]) -> None:  # type: ignore[type-arg]
    from hostd.cli import schedule_cmds  # `hostd schedule ...` (scheduled prompts)

    schedule_cmds.register(sub, handlers)


def _add_web(sub: argparse._SubParsersAction, handlers: dict[str, Handler]) -> None:  # type: ignore[type-arg]
    from hostd.web.command import register  # `hostd web` (the gateway imports on run)

    register(sub, handlers)


def _add_acp(sub: argparse._SubParsersAction, handlers: dict[str, Handler]) -> None:  # type: ignore[type-arg]
    from hostd.acp.command import register  # `hostd acp` (the agent imports on run)

    register(sub, handlers)


def _add_app(sub: argparse._SubParsersAction, handlers: dict[str, Handler]) -> None:  # type: ignore[type-arg]
    from hostd.app.command import register  # `hostd app` (pywebview imports on run)

    register(sub, handlers)


_GROUPS = (
    _add_own,
    _add_assistants,
    _add_chat,
    _add_turn,
    _add_topic_ops,
    _add_daemon,
    _add_topic,
    _add_schedule,
    _add_web,
    _add_acp,
    _add_app,
)

#: The group that adds each command: `hostd topics` builds only its own group's parsers
#: (argparse spends ~0.5 ms per parser; the CLI start-up time is a benchmark target).
#: `tests/cli/test_basic_commands.py` checks this table against the full parser.
COMMAND_GROUPS = {
    "protocol-schema": _add_own,
    "drivers": _add_own,
    "service": _add_own,
    "completion": _add_own,
    "assistants": _add_assistants,
    "chat": _add_chat,
    "demo": _add_chat,
    "continue": _add_turn,
    "usage": _add_turn,
    "rewind": _add_topic_ops,
    "regenerate": _add_topic_ops,
    "resend": _add_topic_ops,
    "fork": _add_topic_ops,
    "choose": _add_topic_ops,
    "serve": _add_daemon,
    "status": _add_daemon,
    "stop": _add_daemon,
    "topics": _add_topic,
    "new": _add_topic,
    "send": _add_topic,
    "history": _add_topic,
    "attach": _add_topic,
    "schedule": _add_schedule,
    "web": _add_web,
    "acp": _add_acp,
    "app": _add_app,
    "rename": _add_topic,
    "delete": _add_topic,
    "export": _add_topic,
    "paths": _add_topic,
    "logs": _add_topic,
}


def command_of(argv: Sequence[str]) -> str | None:
    """The command word of `argv` (after the global options), or None when there is none or
    help is asked for before it (the top-level help lists every command)."""
    args = iter(argv)
    for arg in args:
        if arg in ("-h", "--help"):
            return None
        if arg == "--home":
            next(args, None)
        elif not arg.startswith("-"):
            return arg
    return None


def build_parser(
    command: str | None = None,
) -> tuple[argparse.ArgumentParser, dict[str, Handler]]:
    """The `hostd` parser and each command's handler. With a known `command`, only the
    parsers of its group are added (the rest is not needed to parse that command line)."""
    parser = CommandParser(prog="hostd", description="hostd: local agent host daemon")
    parser.add_argument("-V", "--version", action="version", version=f"hostd {__version__}")
    parser.add_argument(
        "--home", default=None, help="put every hostd path under this folder (like HOSTD_HOME)"
    )
    parser.add_argument(
        "--autostart", action="store_true", help="start the daemon if it is not running"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    handlers: dict[str, Handler] = {}
    group = COMMAND_GROUPS.get(command) if command is not None else None
    for add in (group,) if group is not None else _GROUPS:
        add(sub, handlers)
    return parser, handlers


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser, handlers = build_parser(command_of(argv))
    args, extras = parser.parse_known_args(argv)
    if extras:
        leaf_parser(parser, args).error(f"unrecognized arguments: {' '.join(extras)}")
    if args.command is None:
        parser.print_help()
        return 2
    try:
        return handlers[args.command](args)
    except BaseException as exc:
        # Every failure is one line and a non-zero exit code; only a bug shows a traceback.
        from hostd.cli.common import exit_for

        if isinstance(exc, SystemExit):
            raise
        code = exit_for(exc)
        if code is None:
            raise
        return code
