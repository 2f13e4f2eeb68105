"""`hostd topics | new | send | history`: topics from the command line (and the stream
printer `hostd attach`, in `attach_cmd`, uses)."""

from __future__ import annotations

import argparse
import datetime as dt
import os
from typing import Any

from hostd.cli.answers_cmd import answer_label
from hostd.cli.common import (
    Output,
    TerminalSafe,
    console,
    driver_label,
    fail,
    out,
    parse_options,
    plan_checklist,
    print_json,
    request,
    run_client,
    set_line_open,
    text_table,
)
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
from hostd_protocol.common import PlanChunk, TextDelta, ThinkingDelta, ToolCall, ToolResult


def _parse_options(items: list[str]) -> dict[str, Any] | int:
    try:
        return parse_options(items)
    except ValueError as exc:
        return fail(str(exc))


def _when(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M") if ts else ""


def _short(path: str) -> str:
    """`path` with the home folder written `~`."""
    home = os.path.expanduser("~")
    if path == home or path.startswith(home + os.sep):
        return "~" + path[len(home):]
    return path


def cmd_topics(args: argparse.Namespace) -> int:
    result = request(args, ListTopics(id=0))
    if isinstance(result, int):
        return result
    assert isinstance(result, TopicListResult)
    if args.json:
        print_json(result.topics)
        return 0
    if not result.topics:
        out().print("no topics yet; create one with `hostd new`", markup=False)
        return 0
    rows = [
        (t.id, t.title, driver_label(t), t.model, t.state, _when(t.updated_at), _short(t.working_dir))
        for t in result.topics
    ]
    headers = ("id", "title", "driver", "model", "state", "updated", "working dir")
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
            assistant=args.assistant,
            driver=args.driver,
            model=args.model,
            # Like `claude` and `opencode`: the agent works where the command runs.
            working_dir=os.path.abspath(args.working_dir or os.getcwd()),
            options=options,
        ),
    )
    if isinstance(result, int):
        return result
    assert isinstance(result, TopicResult)
    if args.json:
        print_json(result.topic)
        return 0
    out().print(result.topic.id, markup=False)
    return 0


def message_text(args: argparse.Namespace) -> str | int:
    """The message of `send`: the argument, or stdin (`-`), or a file (`--file`). Reading
    from stdin or a file has no length limit of the command line (ARG_MAX)."""
    import sys

    if args.file is not None and args.text is not None:
        return fail("give the message as an argument or with --file, not both")
    source = args.file if args.file is not None else args.text
    if source is None:
        return fail("no message: give it as an argument, or - to read stdin, or --file PATH")
    if source == "-":
        if sys.stdin.isatty():
            print("(reading the message from stdin; end it with Ctrl-D)", file=sys.stderr)
        try:
            # Bytes decoded here, strictly: the text stream would turn undecodable bytes
            # into lone surrogates that no request can carry.
            text = sys.stdin.buffer.read().decode("utf-8")
        except UnicodeDecodeError as exc:
            return fail(_not_text("the message from stdin", exc))
    elif args.file is not None:
        try:
            with open(source, encoding="utf-8") as fh:
                text = fh.read()
        except UnicodeDecodeError as exc:
            return fail(_not_text(source, exc))
        except OSError as exc:
            return fail(f"cannot read {source}: {exc.strerror or exc}")
    else:
        text = source
    if not text.strip():
        return fail("the message is empty")
    return text


def _not_text(what: str, exc: UnicodeDecodeError) -> str:
    """A message that is not UTF-8 text, in a user's words (not the codec's)."""
    return (f"{what} is not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset "
            f"{exc.start}): send text; images go with --image")


def cmd_send(args: argparse.Namespace) -> int:
    text = message_text(args)
    if isinstance(text, int):
        return text
    args.text = text
    from hostd.cli.images import ImageRefused, read_images

    try:
        images = read_images(args.image)  # refused before anything is sent
    except ImageRefused as exc:
        return fail(str(exc))
    if not args.follow:
        sent = request(args, SendMessage(id=0, topic_id=args.topic, text=args.text,
                                         intent=args.intent, also=args.also,
                                         attachments=images))
        if isinstance(sent, int):
            return sent
        assert isinstance(sent, SendResult)
        if args.json:
            print_json(sent)
            return 0
        out().print(f"{sent.disposition} {sent.row_id}", markup=False)
        return 0

    async def go(c: Any) -> Any:
        async with c.attach(args.topic, max_rows=0) as sub:
            result = await c.send(args.topic, args.text, args.intent, also=args.also,
                                  attachments=images)
            printer = StreamPrinter()
            async for item in sub:
                printer.show(item)
                if isinstance(item, TurnEnded) and item.turn_id == (result.turn_id or item.turn_id):
                    return 0 if item.status == "success" else 1
                # A resync's fresh snapshot may already be past the turn's end.
                if isinstance(item, Snapshot) and item is not sub.first and not item.active_turn_id:
                    break
            return 0

    return int(run_client(args, go, on_interrupt=(
        f"interrupted: the turn keeps running in the daemon (`hostd attach {args.topic}` "
        f"to watch it, `hostd stop {args.topic}` to stop it)"
    )))


def cmd_history(args: argparse.Namespace) -> int:
    show_all = getattr(args, "all", False)
    page = request(args, History(id=0, topic_id=args.topic, limit=args.limit, all=show_all))
    if isinstance(page, int):
        return page
    assert isinstance(page, HistoryResult)
    from hostd.cli.manage_cmds import whole_rows

    rows = whole_rows(args, args.topic, page.rows)  # a row bigger than one reply: read whole
    if isinstance(rows, int):
        return rows
    if args.json:
        print_json({"rows": rows, "has_more": page.has_more})
        return 0
    o = out()
    if page.has_more:
        o.print(f"(older messages not shown; --limit {args.limit})", style="dim", markup=False)
    for row in rows:
        print_row(row, o, ids=show_all or getattr(args, "ids", False))
    return 0


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
        elif isinstance(p, PlanChunk):
            out.append(f"\n[plan]\n{plan_checklist(p)}\n")
    return "".join(out)


def sender(row: MessageRow) -> str:
    """Who wrote a row: its role, or `schedule ID` for a user row a schedule sent (a
    scheduled run must not read as if the user had typed it)."""
    if row.role == "user":
        from hostd_protocol.client_messages import scheduled_by

        if schedule := scheduled_by(row.meta):
            return f"schedule {schedule}"
    return row.role


def print_row(row: MessageRow, c: Output | None = None, *, ids: bool = False) -> None:
    """One row: `role (status):`, its text, its error. On `c`, else the rich console.
    With `ids`: `role (status) [id]:`, and `superseded` for a row a rewind removed."""
    c = TerminalSafe(c or console())
    status = "" if row.status == "success" else f" ({row.status})"
    if row.superseded:
        status += " (superseded)"
    ident = f" [{row.id}]" if ids else ""
    lane = answer_label(row)
    if lane:
        status += f" ({lane})"
    # An answer that was not chosen is dim: shown, but not part of the conversation.
    style = "dim" if row.alternative else "bold"
    c.print(f"{sender(row)}{status}{ident}:", style=style, markup=False)
    if row.anchor is not None:
        c.print(f"  [compaction: {row.anchor.tokens_before} -> {row.anchor.tokens_after} tokens]",
                markup=False)
    c.print(row_text(row), markup=False)
    if row.error:
        c.print(f"  error: {row.error}", style="red", markup=False)


def _breaks_the_line(item: Any) -> bool:
    """Whether `StreamPrinter` starts a new line for `item` (after it, a notice fits)."""
    if isinstance(item, RowAppended):
        return isinstance(item.chunk, ToolCall)
    if isinstance(item, RowUpdated):
        return bool(item.error)
    return isinstance(item, (RowOpened, ApprovalRequested, TurnEnded, Snapshot, TopicDeleted))


class StreamPrinter:
    """Prints a snapshot, then streamed text as it comes."""

    def __init__(self) -> None:
        #: Topic content (answers, tool names, errors) is printed made terminal-safe.
        self.c: Output = TerminalSafe(console())
        #: Errors already printed (a turn's end repeats its row's error).
        self.errors: set[str] = set()
        #: Labels of a multi-answer turn's rows, and the row printed last: answers stream
        #: at the same time, so a switch of row is marked with its label.
        self.labels: dict[str, str] = {}
        self.current = ""
        #: An answer's text is being printed (its line is open): a notice that arrives now
        #: waits in `held` until the text breaks anyway (a tool call, the row's or the
        #: turn's end, another row), so it never splits the answer's words.
        self.in_text = False
        self.held: list[NoticeEvent] = []

    def show(self, item: Any) -> None:
        if isinstance(item, NoticeEvent) and self.in_text:
            self.held.append(item)
            return
        self._show(item)
        if isinstance(item, RowAppended) and isinstance(item.chunk, TextDelta):
            self.in_text = True
        elif _breaks_the_line(item):
            self.in_text = False
        set_line_open(self.in_text)
        if not self.in_text and self.held:
            held, self.held = self.held, []
            for notice in held:
                self._show(notice)

    def _show(self, item: Any) -> None:
        c = self.c
        if isinstance(item, Snapshot):
            for row in item.rows:
                print_row(row)
            if item.active_turn_id:
                c.print("(answering...)", style="dim")
        elif isinstance(item, RowOpened):
            if item.row.role == "user":
                c.print(f"{sender(item.row)}: {row_text(item.row)}", markup=False)
            elif item.row.role == "assistant":
                # While streaming, the choice is not made yet: who answers, no mark.
                label = answer_label(item.row, mark=False)
                if label:
                    self.labels[item.row.id] = label
                else:
                    c.print("assistant:", style="bold")
        elif isinstance(item, RowAppended):
            ch = item.chunk
            if item.row_id in self.labels and item.row_id != self.current:
                c.print(f"\n[{self.labels[item.row_id]}] ", end="", style="bold", markup=False)
            self.current = item.row_id
            if isinstance(ch, TextDelta):
                c.print(ch.text, end="", markup=False)
            elif isinstance(ch, ToolCall):
                c.print(f"\n[tool {ch.name}]", markup=False)
            elif isinstance(ch, PlanChunk):
                c.print(f"\n[plan]\n{plan_checklist(ch)}", markup=False)
        elif isinstance(item, RowUpdated) and item.error:
            self.errors.add(item.error)
            label = self.labels.get(item.row_id, "")
            where = f" ({label})" if label else ""
            c.print(f"\nerror{where}: {item.error}", style="red", markup=False)
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
                # The row's error was printed when the row was updated: say it once.
                said = item.error and item.error in self.errors
                detail = f": {item.error}" if item.error and not said else ""
                c.print(f"(turn {item.status}{detail})", style="dim", markup=False)
        elif isinstance(item, TopicDeleted):
            c.print("(topic deleted)", style="dim")
