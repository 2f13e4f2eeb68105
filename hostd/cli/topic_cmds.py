"""`hostd topics | new | send | history | attach`: topics from the command line."""

from __future__ import annotations

import argparse
import datetime as dt
from typing import Any

from hostd.cli.common import console, fail, run_client
from hostd_protocol.client_messages import (
    ApprovalRequested,
    MessageRow,
    NoticeEvent,
    RowAppended,
    RowOpened,
    RowUpdated,
    Snapshot,
    TopicDeleted,
    TurnEnded,
    TurnStarted,
)
from hostd_protocol.common import TextDelta, ThinkingDelta, ToolCall, ToolResult


def _parse_options(items: list[str]) -> dict[str, Any] | int:
    import msgspec

    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            return fail(f"--option wants KEY=VALUE, got {item!r}")
        try:
            out[key] = msgspec.json.decode(value)
        except msgspec.DecodeError:
            out[key] = value
    return out


def _when(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M") if ts else ""


def cmd_topics(args: argparse.Namespace) -> int:
    from rich.table import Table

    async def go(c: Any) -> Any:
        return await c.list_topics()

    topics = run_client(args, go)
    if isinstance(topics, int):
        return topics
    if not topics:
        console().print("no topics yet; create one with `hostd new`")
        return 0
    table = Table()
    for col in ("id", "title", "driver", "model", "state", "updated"):
        table.add_column(col)
    for t in topics:
        table.add_row(t.id, t.title, t.driver, t.model, t.state, _when(t.updated_at))
    console().print(table)
    return 0


def cmd_new(args: argparse.Namespace) -> int:
    options = _parse_options(args.option)
    if isinstance(options, int):
        return options

    async def go(c: Any) -> Any:
        return await c.create_topic(
            title=args.title,
            driver=args.driver,
            model=args.model,
            working_dir=args.working_dir,
            options=options,
        )

    topic = run_client(args, go)
    if isinstance(topic, int):
        return topic
    console().print(topic.id, markup=False)
    return 0


def cmd_send(args: argparse.Namespace) -> int:
    async def go(c: Any) -> Any:
        if not args.follow:
            return await c.send(args.topic, args.text, args.intent)
        async with c.attach(args.topic, max_rows=0) as sub:
            result = await c.send(args.topic, args.text, args.intent)
            printer = StreamPrinter()
            async for item in sub:
                printer.show(item)
                if isinstance(item, TurnEnded) and item.turn_id == (result.turn_id or item.turn_id):
                    break
                # A resync's fresh snapshot may already be past the turn's end.
                if isinstance(item, Snapshot) and item is not sub.first and not item.active_turn_id:
                    break
            return result

    result = run_client(args, go)
    if isinstance(result, int):
        return result
    if not args.follow:
        console().print(f"{result.disposition} {result.row_id}", markup=False)
    return 0


def cmd_history(args: argparse.Namespace) -> int:
    async def go(c: Any) -> Any:
        return await c.history(args.topic, limit=args.limit)

    page = run_client(args, go)
    if isinstance(page, int):
        return page
    if page.has_more:
        console().print(f"(older messages not shown; --limit {args.limit})", style="dim")
    for row in page.rows:
        print_row(row)
    return 0


def cmd_attach(args: argparse.Namespace) -> int:
    async def go(c: Any) -> Any:
        async with c.attach(args.topic) as sub:
            printer = StreamPrinter()
            async for item in sub:
                printer.show(item)
                if isinstance(item, TurnEnded | TopicDeleted):
                    break
                if isinstance(item, Snapshot) and item is not sub.first and not item.active_turn_id:
                    break
        return 0

    result = run_client(args, go)
    return result if isinstance(result, int) else 0


def row_text(row: MessageRow) -> str:
    out = []
    for p in row.parts:
        if isinstance(p, TextDelta):
            out.append(p.text)
        elif isinstance(p, ThinkingDelta):
            out.append(f"[thinking] {p.text}\n")
        elif isinstance(p, ToolCall):
            out.append(f"\n[tool {p.name}]\n")
        elif isinstance(p, ToolResult):
            out.append(f"[tool result{' (error)' if p.is_error else ''}]\n")
    return "".join(out)


def print_row(row: MessageRow) -> None:
    c = console()
    status = "" if row.status == "success" else f" ({row.status})"
    c.print(f"{row.role}{status}:", style="bold", markup=False)
    if row.anchor is not None:
        c.print(f"  [compaction: {row.anchor.tokens_before} -> {row.anchor.tokens_after} tokens]",
                markup=False)
    c.print(row_text(row), markup=False)
    if row.error:
        c.print(f"  error: {row.error}", style="red", markup=False)


class StreamPrinter:
    """Prints a snapshot, then streamed text as it comes."""

    def __init__(self) -> None:
        self.c = console()

    def show(self, item: Any) -> None:
        c = self.c
        if isinstance(item, Snapshot):
            for row in item.rows:
                print_row(row)
            if item.active_turn_id:
                c.print("(answering...)", style="dim")
        elif isinstance(item, RowOpened):
            if item.row.role == "user":
                c.print(f"user: {row_text(item.row)}", markup=False)
            elif item.row.role == "assistant":
                c.print("assistant:", style="bold")
        elif isinstance(item, RowAppended):
            ch = item.chunk
            if isinstance(ch, TextDelta):
                c.print(ch.text, end="", markup=False)
            elif isinstance(ch, ToolCall):
                c.print(f"\n[tool {ch.name}]", markup=False)
        elif isinstance(item, RowUpdated) and item.error:
            c.print(f"\nerror: {item.error}", style="red", markup=False)
        elif isinstance(item, ApprovalRequested):
            a = item.approval
            c.print(f"\n[approval needed: {a.tool}] {a.description} (id {a.id})", markup=False)
        elif isinstance(item, NoticeEvent):
            c.print(f"\n[{item.level}] {item.message}", style="yellow", markup=False)
        elif isinstance(item, TurnStarted):
            pass
        elif isinstance(item, TurnEnded):
            c.print()
            if item.status != "success":
                c.print(f"(turn {item.status}{': ' + item.error if item.error else ''})",
                        style="dim", markup=False)
        elif isinstance(item, TopicDeleted):
            c.print("(topic deleted)", style="dim")
