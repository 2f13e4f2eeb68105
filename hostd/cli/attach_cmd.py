"""`hostd attach TOPIC`: say at once what the topic is doing, show its recent rows, then follow.

A terminal that attached to an idle topic and printed nothing looked hung: the user could
not tell an attached terminal from a stuck one. So the first thing printed, before any
turn, is the topic's state from the attach snapshot (`Snapshot.topic.state`, its rows, its
open approvals): one header line (id, title, driver/model, state), the newest `--last`
rows (with how to see older ones), the last turn's outcome when idle, the approvals waiting
for an answer, and one hint line saying what happens next. Then the live stream, until the
turn ends (`--keep`: until Ctrl-C).
"""

from __future__ import annotations

import argparse
from typing import Any

from hostd.cli.common import driver_label, run_client
from hostd.cli.topic_cmds import StreamPrinter, print_row
from hostd_protocol.client_messages import (
    MessageRow,
    Snapshot,
    TopicDeleted,
    TurnEnded,
)

#: Rows shown on attach unless `--last` says otherwise (the rest: `hostd history`).
DEFAULT_LAST = 10


def header(snap: Snapshot) -> str:
    """`topic ID "title" (driver/model): state`, one line."""
    t = snap.topic
    title = f" {t.title!r}" if t.title else ""
    target = "/".join(x for x in (driver_label(t), t.model) if x)
    where = f" ({target})" if target else ""
    state = "answering" if snap.active_turn_id and t.state == "idle" else t.state
    return f"topic {t.id}{title}{where}: {state}"


def last_outcome(rows: list[MessageRow]) -> str:
    """How the last turn ended, from its answer row ("" when there is none yet)."""
    answer = next((r for r in reversed(rows) if r.role == "assistant"), None)
    if answer is None:
        return ""
    if answer.status == "success":
        return "last turn: success"
    error = f": {answer.error}" if answer.error else ""
    return f"last turn: {answer.status}{error}"


def hint(snap: Snapshot, *, keep: bool) -> str:
    """What the terminal does now, and how to leave."""
    topic = snap.topic.id
    leave = "Ctrl-C detaches" if keep else "exits when the turn ends; Ctrl-C detaches"
    if snap.approvals:
        return f"attached: waiting for an approval (answer it in hostd chat {topic}); {leave}"
    if snap.active_turn_id or snap.topic.state != "idle":
        return f"attached: following the running turn; {leave}"
    after = "" if keep else " and follows it"
    return (
        f"attached: idle, waiting for the next turn{after} (send one from another terminal: "
        f'hostd send {topic} "..."); Ctrl-C detaches'
    )


def show_attached(printer: StreamPrinter, snap: Snapshot, *, keep: bool) -> None:
    """Everything printed on attach, before the first live event."""
    c = printer.c
    c.print(header(snap), style="bold", markup=False)
    if snap.truncated:
        c.print(
            f"(older messages not shown: hostd history {snap.topic.id})", style="dim", markup=False
        )
    for row in snap.rows:
        print_row(row, c)
    if not snap.rows:
        c.print("(no messages yet)", style="dim")
    if not snap.active_turn_id:
        outcome = last_outcome(list(snap.rows))
        if outcome:
            c.print(f"({outcome})", style="dim", markup=False)
    for a in snap.approvals:
        c.print(f"[approval needed: {a.tool}] {a.description} (id {a.id})", markup=False)
    c.print(hint(snap, keep=keep), style="dim", markup=False)


def cmd_attach(args: argparse.Namespace) -> int:
    keep: bool = args.keep

    async def go(c: Any) -> int:
        async with c.attach(args.topic, max_rows=max(args.last, 0)) as sub:
            printer = StreamPrinter()
            async for item in sub:
                if isinstance(item, Snapshot) and item is sub.first:
                    show_attached(printer, item, keep=keep)
                    continue
                printer.show(item)
                if isinstance(item, TopicDeleted):
                    break
                if keep:
                    continue
                if isinstance(item, TurnEnded):
                    break
                if isinstance(item, Snapshot) and not item.active_turn_id:
                    break  # a resync: the turn we followed ended meanwhile
        return 0

    result = run_client(args, go)
    return result if isinstance(result, int) else 0


__all__ = ["DEFAULT_LAST", "cmd_attach", "header", "hint", "last_outcome", "show_attached"]
