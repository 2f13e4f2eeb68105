"""Everyday topic verbs and where-things-are commands: `rename`, `delete`, `export`, `paths`,
`logs`, and `stop TOPIC` (stop a topic's turn; `hostd stop` alone still stops the daemon).

All one-shot: the blocking `hostd.client.sync_wire` client, plain text output (no trio, no rich).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import time
from collections.abc import Iterator

from hostd.cli.common import (
    driver_label,
    fail,
    out,
    paths_from,
    print_json,
    request,
    terminal_safe,
    text_table,
)
from hostd_protocol.client_messages import (
    DeleteTopic,
    GetTopic,
    History,
    HistoryResult,
    MessageRow,
    ReadRow,
    RenameTopic,
    RowContent,
    Stop,
    TopicInfo,
    TopicResult,
)
from hostd_protocol.common import PlanChunk, TextDelta, ThinkingDelta, ToolCall, ToolResult

#: Rows per `History` page when exporting a whole topic.
EXPORT_PAGE = 500


def cmd_stop_turn(args: argparse.Namespace) -> int:
    """`hostd stop TOPIC [--row ROW]`: end the topic's running turn, or only its answer
    ROW (the others go on); the partial answer is kept."""
    row = getattr(args, "row", "")
    result = request(args, Stop(id=0, topic_id=args.topic, row_id=row))
    if isinstance(result, int):
        return result
    if args.json:
        print_json({"topic": args.topic, "stopped": True, **({"row": row} if row else {})})
    elif row:
        out().print(f"stopped answer {row} of {args.topic} (its partial answer is kept; the "
                    "other answers go on)", markup=False)
    else:
        out().print(f"stopped the turn of {args.topic} (its partial answer is kept)",
                    markup=False)
    return 0


def cmd_rename(args: argparse.Namespace) -> int:
    result = request(args, RenameTopic(id=0, topic_id=args.topic, title=args.title))
    if isinstance(result, int):
        return result
    assert isinstance(result, TopicResult)
    if args.json:
        print_json(result.topic)
    else:
        out().print(f"renamed {result.topic.id}: {result.topic.title}", markup=False)
    return 0


def cmd_delete(args: argparse.Namespace) -> int:
    if not args.yes:
        if not sys.stdin.isatty():
            return fail(f"deleting {args.topic} cannot be undone: add --yes to confirm")
        try:
            answer = input(f"Delete topic {args.topic} and its history? [y/N] ")
        except (EOFError, KeyboardInterrupt):
            print(file=sys.stderr)
            return 1
        if answer.strip().lower() not in ("y", "yes"):
            return fail("not deleted")
    result = request(args, DeleteTopic(id=0, topic_id=args.topic))
    if isinstance(result, int):
        return result
    if args.json:
        print_json({"topic": args.topic, "deleted": True})
    else:
        out().print(f"deleted {args.topic}", markup=False)
    return 0


# --- export ---------------------------------------------------------------------------------


def all_rows(args: argparse.Namespace, topic_id: str) -> list[MessageRow] | int:
    """Every row of the topic, oldest first (paged through `History`)."""
    rows: list[MessageRow] = []
    before: int | None = None
    while True:
        page = request(args, History(id=0, topic_id=topic_id, before_position=before,
                                     limit=EXPORT_PAGE))
        if isinstance(page, int):
            return page
        assert isinstance(page, HistoryResult)
        rows[:0] = page.rows
        if not page.has_more or not page.rows:
            return whole_rows(args, topic_id, rows)
        before = page.rows[0].position


def whole_rows(
    args: argparse.Namespace, topic_id: str, rows: list[MessageRow]
) -> list[MessageRow] | int:
    """`rows` with each row a page delivered cut (`meta["truncated"]`) read whole with
    `read-row` (`hostd.core.row_pieces`); or the exit code of a failed request."""
    from hostd.core.row_pieces import PieceReader, omitted_of, whole

    out_rows = list(rows)
    for i, row in enumerate(rows):
        if omitted_of(row) is None:
            continue
        reader = PieceReader(row.id)
        while (at := reader.next_piece()) is not None:
            piece = request(args, ReadRow(id=0, topic_id=topic_id, row_id=row.id,
                                          part=at[0], offset=at[1]))
            if isinstance(piece, int):
                return piece
            assert isinstance(piece, RowContent)
            reader.feed(piece)
        out_rows[i] = whole(row, reader.parts)
    return out_rows


def _when(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M") if ts else ""


def _fence(text: str) -> str:
    """A code fence longer than any backtick run in `text`."""
    longest = run = 0
    for ch in text:
        run = run + 1 if ch == "`" else 0
        longest = max(longest, run)
    return "`" * max(3, longest + 1)


def markdown_lines(topic: TopicInfo, rows: list[MessageRow]) -> Iterator[str]:
    """A topic as Markdown: a header, then each message under its role."""
    yield f"# {topic.title or topic.id}"
    yield ""
    facts = [f"topic `{topic.id}`", f"driver `{driver_label(topic, 'default')}`"]
    if topic.model:
        facts.append(f"model `{topic.model}`")
    if topic.working_dir:
        facts.append(f"in `{topic.working_dir}`")
    if topic.created_at:
        facts.append(f"created {_when(topic.created_at)}")
    yield ", ".join(facts)
    for row in rows:
        if row.role == "marker":
            if row.anchor is not None:
                yield ""
                yield (f"*(conversation compacted: {row.anchor.tokens_before} -> "
                       f"{row.anchor.tokens_after} tokens)*")
            continue
        yield ""
        status = "" if row.status == "success" else f" ({row.status})"
        yield f"## {row.role.capitalize()}{status}"
        yield ""
        for part in row.parts:
            if isinstance(part, TextDelta):
                yield part.text
            elif isinstance(part, ThinkingDelta):
                yield "> " + part.text.replace("\n", "\n> ")
            elif isinstance(part, ToolCall):
                import json

                body = json.dumps(part.input, indent=2, ensure_ascii=False) if part.input else ""
                fence = _fence(body)
                yield f"**Tool `{part.name}`**"
                if body:
                    yield f"{fence}json\n{body}\n{fence}"
            elif isinstance(part, ToolResult):
                text = part.output if isinstance(part.output, str) else str(part.output)
                fence = _fence(text)
                label = "Tool result (error)" if part.is_error else "Tool result"
                yield f"*{label}*"
                yield f"{fence}\n{text}\n{fence}"
            elif isinstance(part, PlanChunk):
                yield "**Plan**"
                yield "\n".join(
                    f"- [{'x' if e.status == 'completed' else ' '}] {e.content}"
                    + (" *(in progress)*" if e.status == "in_progress" else "")
                    for e in part.entries
                )
        if row.error:
            yield ""
            yield f"*Error: {row.error}*"


def cmd_export(args: argparse.Namespace) -> int:
    topic = request(args, GetTopic(id=0, topic_id=args.topic))
    if isinstance(topic, int):
        return topic
    assert isinstance(topic, TopicResult)
    rows = all_rows(args, args.topic)
    if isinstance(rows, int):
        return rows
    if args.format == "json":
        import msgspec

        text = msgspec.json.format(
            msgspec.json.encode({"topic": topic.topic, "messages": rows}), indent=2
        ).decode() + "\n"
    else:
        text = "\n".join(markdown_lines(topic.topic, rows)) + "\n"
    if args.output and args.output != "-":
        try:
            with open(args.output, "w", encoding="utf-8") as fh:
                fh.write(text)
        except OSError as exc:
            return fail(f"cannot write {args.output}: {exc.strerror or exc}")
        print(f"wrote {args.output} ({len(rows)} messages)", file=sys.stderr)
    elif sys.stdout.isatty():
        # Read on a terminal: its escape sequences (an answer's, a tool's) made visible, as
        # every command shows them; a file or a pipe gets the exact text.
        sys.stdout.write(terminal_safe(text))
    else:
        sys.stdout.write(text)
    return 0


# --- paths and logs -------------------------------------------------------------------------


def cmd_paths(args: argparse.Namespace) -> int:
    paths = paths_from(args)
    items = {
        "config": str(paths.config_dir),
        "assistants": str(paths.config_dir / "assistants"),
        "roles": str(paths.config_dir / "roles.toml"),
        "data": str(paths.data_dir),
        "database": str(paths.db_path),
        "workspaces": str(paths.data_dir / "workspaces"),
        "chat history": str(paths.data_dir / "chat-history"),
        "log": str(paths.log_path),
        "runtime": str(paths.runtime_dir),
        "socket": str(paths.socket_path),
    }
    if args.json:
        print_json(items)
    else:
        out().print(text_table(None, list(items.items())), markup=False)
    return 0


def _tail(path: str, lines: int) -> list[bytes]:
    """The last `lines` lines of a file, reading backwards in blocks (logs can be large)."""
    with open(path, "rb") as fh:
        fh.seek(0, os.SEEK_END)
        end = fh.tell()
        data = b""
        pos = end
        while pos > 0 and data.count(b"\n") <= lines:
            step = min(65536, pos)
            pos -= step
            fh.seek(pos)
            data = fh.read(step) + data
    return data.splitlines(keepends=True)[-lines:] if lines else []


def cmd_logs(args: argparse.Namespace) -> int:
    path = str(paths_from(args).log_path)
    if not os.path.exists(path):
        return fail(f"no log yet at {path} (the daemon writes it when it runs)")
    out_stream = sys.stdout.buffer
    for line in _tail(path, args.lines):
        out_stream.write(line)
    out_stream.flush()
    if not args.follow:
        return 0
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            inode = os.fstat(fh.fileno()).st_ino
            while True:
                chunk = fh.read()
                if chunk:
                    out_stream.write(chunk)
                    out_stream.flush()
                    continue
                # Like `tail -F`: follow the file across the log's rotation.
                try:
                    if os.stat(path).st_ino != inode:
                        return cmd_logs(argparse.Namespace(**{**vars(args), "lines": 0}))
                except FileNotFoundError:
                    pass
                time.sleep(0.25)
    except KeyboardInterrupt:
        return 0
