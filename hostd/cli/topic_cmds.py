"""`hostd topics | new | send | history | attach`: topics from the command line."""

from __future__ import annotations

import argparse
import datetime as dt
from typing import Any

from hostd.cli.common import Output, console, fail, out, request, run_client, text_table
from hostd_protocol.client_messages import (
    ApprovalRequested,
    CreateTopic,
    History,
    HistoryResult,
    ListTopics,
    MessageRow,
    NoticeEvent,
    RowAppended,
    RowOpened,
    RowUpdated,
    SendMessage,
    SendResult,
    Snapshot,
    TopicDeleted,
    TopicListResult,
    TopicResult,
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
    result = request(args, ListTopics(id=0))
    if isinstance(result, int):
        return result
    assert isinstance(result, TopicListResult)
    if not result.topics:
        out().print("no topics yet; create one with `hostd new`", markup=False)
        return 0
    rows = [(t.id, t.title, t.driver, t.model, t.state, _when(t.updated_at)) for t in result.topics]
    headers = ("id", "title", "driver", "model", "state", "updated")
    out().print(text_table(headers, rows), markup=False)
    return 0


def cmd_new(args: argparse.Namespace) -> int:
    options = _parse_options(args.option)
    if isinstance(options, int):
        return options
    result = request(
        args,
        CreateTopic(
            id=0,
            title=args.title,
            driver=args.driver,
            model=args.model,
            working_dir=args.working_dir,
            options=options,
        ),
    )
    if isinstance(result, int):
        return result
    assert isinstance(result, TopicResult)
    out().print(result.topic.id, markup=False)
    return 0


def cmd_send(args: argparse.Namespace) -> int:
    if not args.follow:
        sent = request(args, SendMessage(id=0, topic_id=args.topic, text=args.text,
                                         intent=args.intent))
        if isinstance(sent, int):
            return sent
        assert isinstance(sent, SendResult)
        out().print(f"{sent.disposition} {sent.row_id}", markup=False)
        return 0

    async def go(c: Any) -> Any:
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
    return result if isinstance(result, int) else 0


def cmd_history(args: argparse.Namespace) -> int:
    page = request(args, History(id=0, topic_id=args.topic, limit=args.limit))
    if isinstance(page, int):
        return page
    assert isinstance(page, HistoryResult)
    o = out()
    if page.has_more:
        o.print(f"(older messages not shown; --limit {args.limit})", style="dim", markup=False)
    for row in page.rows:
        print_row(row, o)
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


def print_row(row: MessageRow, c: Output | None = None) -> None:
    """One row: `role (status):`, its text, its error. On `c`, else the rich console."""
    c = c or console()
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
