"""`hostd rewind`, `hostd regenerate`, `hostd resend` and `hostd fork`: topic operations.

One request each through the blocking wire client (one-shot commands: no trio, no rich at
import). Row ids come from `hostd history TOPIC --ids`.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

Handler = Callable[[argparse.Namespace], int]

COMMANDS = ("rewind", "regenerate", "resend", "fork")


def register(sub: argparse._SubParsersAction, handlers: dict[str, Handler]) -> None:  # type: ignore[type-arg]
    """Add the topic operations to the `hostd` parser."""
    from hostd.cli.parsers import common_options

    p = sub.add_parser("rewind", parents=[common_options()],
                       help="remove the messages after a row from a topic's history")
    p.add_argument("topic", help="topic id")
    p.add_argument("row", help="row id to keep as the last one (see history --ids)")
    p.add_argument("--include", action="store_true", help="remove that row too")
    p.add_argument("--stop", action="store_true", help="stop a running turn first")
    p.add_argument("--json", action="store_true", help="print the removed row ids as JSON")
    handlers["rewind"] = run_rewind

    p = sub.add_parser("regenerate", parents=[common_options()],
                       help="answer a topic's last message again")
    p.add_argument("topic", help="topic id")
    p.add_argument("--stop", action="store_true", help="stop a running turn first")
    p.add_argument("--follow", action="store_true", help="print the answer until the turn ends")
    p.add_argument("--json", action="store_true", help="print the send result as JSON")
    handlers["regenerate"] = run_regenerate

    p = sub.add_parser("resend", parents=[common_options()],
                       help="edit a sent message and send it again (what followed is removed)")
    p.add_argument("topic", help="topic id")
    p.add_argument("row", help="id of the user message to replace (see history --ids)")
    p.add_argument("text", help="the new text")
    p.add_argument("--stop", action="store_true", help="stop a running turn first")
    p.add_argument("--follow", action="store_true", help="print the answer until the turn ends")
    p.add_argument("--json", action="store_true", help="print the send result as JSON")
    handlers["resend"] = run_resend

    p = sub.add_parser("fork", parents=[common_options()],
                       help="a new topic with a topic's history up to a row")
    p.add_argument("topic", help="topic id")
    p.add_argument("row", help="last row id the new topic keeps (see history --ids)")
    p.add_argument("--title", default="", help="title of the new topic")
    p.add_argument("--json", action="store_true", help="print the new topic as JSON")
    handlers["fork"] = run_fork


def _request(args: argparse.Namespace, msg: Any) -> Any:
    from hostd.cli.common import request

    result = request(args, msg)
    return None if isinstance(result, int) else result


def _show(args: argparse.Namespace, result: Any, line: str) -> int:
    from hostd.cli.common import out, print_json

    if getattr(args, "json", False):
        print_json(result)
    else:
        out().print(line, markup=False)
    return 0


def run_rewind(args: argparse.Namespace) -> int:
    from hostd_protocol.client_messages import Rewind

    msg = Rewind(id=0, topic_id=args.topic, row_id=args.row, include=args.include, stop=args.stop)
    result = _request(args, msg)
    if result is None:
        return 1
    n = len(result.row_ids)
    return _show(args, result, f"rewound topic {args.topic}: {n} row(s) removed from history")


def _sent(args: argparse.Namespace, result: Any) -> int:
    what = f"turn {result.turn_id}" if result.turn_id else "after the stopped turn"
    return _show(args, result, f"sent to topic {args.topic}: {what} (row {result.row_id})")


def _follow(args: argparse.Namespace, ask: Callable[[Any], Any]) -> int:
    """Send `msg` while attached and print the answer until its turn ends (exit 1 unless it
    succeeded). A request answered `queued` (asked with stop) follows the next turn."""
    from hostd.cli.common import run_client
    from hostd.cli.topic_cmds import StreamPrinter
    from hostd_protocol.client_messages import Snapshot, TurnEnded, TurnStarted

    async def go(c: Any) -> int:
        async with c.attach(args.topic) as sub:
            result = await ask(c)
            turn = result.turn_id
            printer = StreamPrinter()
            async for item in sub:
                if isinstance(item, Snapshot):
                    continue
                printer.show(item)
                if isinstance(item, TurnStarted) and not turn:
                    turn = item.turn_id
                if isinstance(item, TurnEnded) and item.turn_id == turn:
                    return 0 if item.status == "success" else 1
        return 1

    code = run_client(args, go)
    return code if isinstance(code, int) else 0


def run_regenerate(args: argparse.Namespace) -> int:
    from hostd_protocol.client_messages import Regenerate

    if args.follow:
        return _follow(args, lambda c: c.regenerate(args.topic, stop=args.stop))
    msg = Regenerate(id=0, topic_id=args.topic, stop=args.stop)
    result = _request(args, msg)
    return 1 if result is None else _sent(args, result)


def run_resend(args: argparse.Namespace) -> int:
    from hostd_protocol.client_messages import EditResend

    if args.follow:
        return _follow(args, lambda c: c.edit_resend(args.topic, args.row, args.text, stop=args.stop))
    msg = EditResend(id=0, topic_id=args.topic, row_id=args.row, text=args.text, stop=args.stop)
    result = _request(args, msg)
    return 1 if result is None else _sent(args, result)


def run_fork(args: argparse.Namespace) -> int:
    from hostd_protocol.client_messages import ForkTopic

    result = _request(args, ForkTopic(id=0, topic_id=args.topic, row_id=args.row, title=args.title))
    if result is None:
        return 1
    topic = result.topic
    if getattr(args, "json", False):
        return _show(args, topic, "")
    return _show(args, topic, f"{topic.id}  {topic.title}")
