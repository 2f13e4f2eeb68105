"""`hostd continue TOPIC` and `hostd usage [TOPIC]`: the turn pipeline's commands.

Both talk to the running daemon through `hostd.client`; rendering is split from fetching so
the output is testable with a capture console.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

    from hostd_protocol.client_messages import SendResult, UsageTotals

Handler = Callable[[argparse.Namespace], int]


def register(sub: argparse._SubParsersAction, handlers: dict[str, Handler]) -> None:  # type: ignore[type-arg]
    """Add `continue` and `usage` to the `hostd` parser."""
    p = sub.add_parser("continue", help="continue a topic's last turn that failed or was stopped")
    p.add_argument("topic", help="topic id")
    handlers["continue"] = run_continue
    p = sub.add_parser("usage", help="token and cost totals per topic (per turn with TOPIC)")
    p.add_argument("topic", nargs="?", default="", help="topic id: list its turns too")
    handlers["usage"] = run_usage


def _home(args: argparse.Namespace) -> str | None:
    home = getattr(args, "home", None)
    return str(home) if home else None


def render_continue(result: SendResult, topic_id: str, console: Console) -> None:
    console.print(
        f"continuing topic {topic_id}: turn {result.turn_id or '(queued)'} "
        f"({result.disposition}, row {result.row_id})"
    )


def render_usage(totals: UsageTotals, console: Console) -> None:
    from rich.table import Table

    def add_row(table: Table, name: str, u: object) -> None:
        from hostd_protocol.common import Usage

        assert isinstance(u, Usage)
        table.add_row(
            name,
            str(u.input_tokens),
            str(u.output_tokens),
            str(u.cache_read_tokens),
            str(u.cache_write_tokens),
            f"${u.cost_usd:.4f}",
        )

    def table(title: str, first: str) -> Table:
        t = Table(title=title)
        t.add_column(first)
        for column in ("input", "output", "cache read", "cache write", "cost"):
            t.add_column(column, justify="right")
        return t

    if not totals.topics:
        console.print("no usage reported since the daemon started")
        return
    topics = table("usage per topic (since the daemon started)", "topic")
    for topic_id, usage in sorted(totals.topics.items()):
        add_row(topics, topic_id, usage)
    console.print(topics)
    if totals.turns:
        turns = table("usage per turn", "turn")
        for turn in totals.turns:
            add_row(turns, turn.turn_id, turn.usage)
        console.print(turns)


def run_continue(args: argparse.Namespace, console: Console | None = None) -> int:
    import trio
    from rich.console import Console

    from hostd.client import open_client
    from hostd_protocol.errors import HostdError

    console = console or Console()

    async def go() -> SendResult:
        async with open_client(home=_home(args)) as client:
            return await client.continue_turn(args.topic)

    try:
        result = trio.run(go)
    except HostdError as exc:
        console.print(f"[red]error:[/red] {exc.message}")
        return 1
    render_continue(result, args.topic, console)
    return 0


def run_usage(args: argparse.Namespace, console: Console | None = None) -> int:
    import trio
    from rich.console import Console

    from hostd.client import open_client
    from hostd_protocol.errors import HostdError

    console = console or Console()

    async def go() -> UsageTotals:
        async with open_client(home=_home(args)) as client:
            return await client.usage(args.topic)

    try:
        totals = trio.run(go)
    except HostdError as exc:
        console.print(f"[red]error:[/red] {exc.message}")
        return 1
    render_usage(totals, console)
    return 0
