"""`hostd continue TOPIC` and `hostd usage [TOPIC]`: the turn pipeline's commands.

Both send one request through the blocking `hostd.client.sync_wire` (no trio, no rich: they are
one-shot); rendering is split from fetching so the output is testable with a capture console.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hostd.cli.common import Output
    from hostd_protocol.client_messages import SendResult, UsageTotals

Handler = Callable[[argparse.Namespace], int]


def register(sub: argparse._SubParsersAction, handlers: dict[str, Handler]) -> None:  # type: ignore[type-arg]
    """Add `continue` and `usage` to the `hostd` parser."""
    from hostd.cli.parsers import common_options

    p = sub.add_parser("continue", parents=[common_options()],
                       help="continue a topic's last turn that failed or was stopped")
    p.add_argument("topic", help="topic id")
    p.add_argument("--json", action="store_true", help="print the send result as JSON")
    handlers["continue"] = run_continue
    p = sub.add_parser("usage", parents=[common_options()],
                       help="token and cost totals per topic (per turn with TOPIC)")
    p.add_argument("topic", nargs="?", default="", help="topic id: list its turns too")
    p.add_argument("--json", action="store_true", help="print JSON (for scripts)")
    handlers["usage"] = run_usage


def render_continue(result: SendResult, topic_id: str, console: Output) -> None:
    console.print(
        f"continuing topic {topic_id}: turn {result.turn_id or '(queued)'} "
        f"({result.disposition}, row {result.row_id})",
        markup=False,
    )


def render_usage(totals: UsageTotals, console: Output) -> None:
    from hostd.cli.common import text_table
    from hostd_protocol.common import Usage

    def row(name: str, u: Usage) -> tuple[str, ...]:
        return (
            name,
            str(u.input_tokens),
            str(u.output_tokens),
            str(u.cache_read_tokens),
            str(u.cache_write_tokens),
            f"${u.cost_usd:.4f}",
        )

    def table(title: str, first: str, rows: list[tuple[str, ...]]) -> str:
        headers = (first, "input", "output", "cache read", "cache write", "cost")
        return f"{title}\n{text_table(headers, rows, right=range(1, 6))}"

    if not totals.topics:
        console.print("no usage reported yet", markup=False)
        return
    topics = [row(topic_id, usage) for topic_id, usage in sorted(totals.topics.items())]
    console.print(table("usage per topic", "topic", topics),
                  markup=False)
    if totals.turns:
        turns = [row(turn.turn_id, turn.usage) for turn in totals.turns]
        console.print("\n" + table("usage per turn", "turn", turns), markup=False)


def _request(args: argparse.Namespace, msg: Any) -> Any:
    """One request through the blocking client (no trio: these commands are one-shot): the
    result, or None once the error is printed (one line on stderr, like every command)."""
    from hostd.cli.common import request

    result = request(args, msg)
    return None if isinstance(result, int) else result


def run_continue(args: argparse.Namespace, console: Output | None = None) -> int:
    from hostd.cli.common import out, print_json
    from hostd_protocol.client_messages import ContinueTurn

    console = console or out()
    result = _request(args, ContinueTurn(id=0, topic_id=args.topic))
    if result is None:
        return 1
    if getattr(args, "json", False):
        print_json(result)
        return 0
    render_continue(result, args.topic, console)
    return 0


def run_usage(args: argparse.Namespace, console: Output | None = None) -> int:
    from hostd.cli.common import out, print_json
    from hostd_protocol.client_messages import GetUsage

    console = console or out()
    totals = _request(args, GetUsage(id=0, topic_id=args.topic))
    if totals is None:
        return 1
    if getattr(args, "json", False):
        print_json(totals)
        return 0
    render_usage(totals, console)
    return 0
