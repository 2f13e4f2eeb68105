"""Pure rendering for `hostd chat` and `hostd demo`: transcript rows in, rich renderables out.

No I/O, no trio, no client: every function takes plain values (rows, approvals, topic info,
usage) and returns something a `rich.console.Console` can print, so the screen is tested with
a capture console and the interactive loop (`chat_app`) only decides *when* to draw.

What the screen shows, and why:

- A user row is one line, `you` (or `schedule ID` for a scheduled run) and the text; an assistant row is its parts in order:
  thinking collapsed and dimmed (a UI must not drown the answer in reasoning), text as
  markdown, each tool call as a compact panel that also holds its result (pairing by
  `call_id`, so the reader sees cause and effect together).
- Rows are labelled the way DESIGN.md talks about a steer roll: user messages U1, U2, ...;
  the answer to Un is An, and an answer cut by a steer boundary is Ana (A1a / U2 / A2).
- A streaming answer can be taller than the terminal; `Tail` keeps its last lines so the live
  region never scrolls (rich's Live cannot redraw what scrolled off).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.markdown import Markdown
from rich.padding import Padding
from rich.panel import Panel
from rich.rule import Rule
from rich.segment import Segment
from rich.styled import Styled
from rich.table import Table
from rich.text import Text

from hostd.cli.answers_cmd import answer_label
from hostd.cli.common import driver_label, terminal_safe
from hostd_protocol.client_messages import ApprovalInfo, MessageRow, TopicInfo, scheduled_by
from hostd_protocol.common import (
    ApprovalOption,
    PlanChunk,
    TextDelta,
    ThinkingDelta,
    ToolCall,
    ToolResult,
    Usage,
    sum_usage,
)

__all__ = [
    "ChatView",
    "allow_always_option",
    "Tail",
    "render_approval",
    "render_chat_live",
    "render_queue",
    "render_row",
    "render_rows",
    "render_status_line",
    "render_tool",
    "render_turn_error",
    "close_open_markdown",
    "render_window",
    "roll_labels",
    "row_text",
    "total_usage",
]

#: Statuses of rows not (or not yet) in the history: they sit after it, in sending order.
UNSENT = frozenset({"queued", "draft"})
#: The prompt mark (U+276F, a heavy right-pointing angle).
PROMPT_MARK = "\u276f"
#: How many lines of a tool's output the compact panel shows.
TOOL_OUTPUT_LINES = 4
#: How many characters of a tool's input summary the panel title shows.
TOOL_INPUT_CHARS = 60


# --- labels ---------------------------------------------------------------------------------


def roll_labels(rows: Sequence[MessageRow]) -> dict[str, str]:
    """Labels of history rows: U1, A1, U2, A1a, ... (unsent and marker rows get none).

    An assistant row is `A<n>` where n is the number of the latest user row before it; when a
    later assistant row of the same turn follows (the turn was steered: the answer rolled at
    a steer boundary), it gets an `a`, which gives the A1a / U2 / A2 of DESIGN.md.
    """
    history = [r for r in rows if r.status not in UNSENT and r.role != "marker"]
    labels: dict[str, str] = {}
    user_n = 0
    for i, row in enumerate(history):
        if row.role == "user":
            user_n += 1
            labels[row.id] = f"U{user_n}"
            continue
        if row.target is not None:  # one of several answers to U<n>: A<n>.<lane>
            labels[row.id] = f"A{user_n}.{row.lane}"
            continue
        cut = any(
            later.role == "assistant"
            and later.turn_id
            and later.turn_id == row.turn_id
            and later.target is None
            for later in history[i + 1 :]
        )
        labels[row.id] = f"A{user_n}{'a' if cut else ''}"
    return labels


# --- rows -----------------------------------------------------------------------------------


def row_text(row: MessageRow) -> str:
    """The visible text of a row (text parts only), e.g. a user message."""
    return "".join(p.text for p in row.parts if isinstance(p, TextDelta))


def _tool_summary(call: ToolCall) -> str:
    if not call.input:
        return ""
    if len(call.input) == 1:
        (value,) = call.input.values()
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    else:
        text = json.dumps(call.input, ensure_ascii=False, sort_keys=True)
    text = " ".join(text.split())
    return text if len(text) <= TOOL_INPUT_CHARS else text[: TOOL_INPUT_CHARS - 1] + "…"


#: What a tool call without a result shows once its row has ended (it will never run on).
_UNFINISHED = {"stopped": "stopped before it finished", "error": "did not finish (the turn failed)"}


def render_tool(
    call: ToolCall | None, result: ToolResult | None, *, row_status: str = "pending"
) -> Panel:
    """A compact panel: the call (name and a one-line input summary) and its result's head.
    A call with no result is "running…" only while its row is still pending."""
    name = terminal_safe(call.name) if call is not None else "tool"
    title = Text.assemble(("⚙ ", "cyan"), (name, "bold cyan"))
    if call is not None and (summary := _tool_summary(call)):
        title.append(f"  {terminal_safe(summary)}", style="cyan")
    if result is None and row_status not in ("pending", "queued"):
        why = _UNFINISHED.get(row_status, "no result")
        body: RenderableType = Text(why, style="yellow italic")
        border, subtitle = "yellow", "■ " + ("stopped" if row_status == "stopped" else "no result")
    elif result is None:
        body = Text("running…", style="dim italic")
        border, subtitle = "cyan", None
    else:
        lines = terminal_safe(result.output).rstrip("\n").splitlines() or ["(no output)"]
        shown = lines[:TOOL_OUTPUT_LINES]
        body = Text("\n".join(shown), style="red" if result.is_error else "dim")
        more = len(lines) - len(shown)
        if more > 0:
            body.append(f"\n… {more} more line{'s' if more > 1 else ''}", style="dim italic")
        border = "red" if result.is_error else "green"
        subtitle = "✗ error" if result.is_error else "✓ done"
    return Panel(
        body,
        title=title,
        title_align="left",
        subtitle=subtitle,
        subtitle_align="right",
        border_style=border,
        padding=(0, 1),
        expand=True,
    )


def render_thinking(text: str, *, live: bool) -> Text:
    """Thinking collapsed to one dim line: its size, and while streaming its latest words."""
    text = terminal_safe(text)
    words = len(text.split())
    line = Text(f"▸ thinking ({words} word{'s' if words != 1 else ''})", style="dim italic")
    if live:
        tail = " ".join(text.split()[-8:])
        line.append(f"  … {tail}", style="dim")
    return line


def _label_text(label: str, role: str) -> Text:
    style = "bold cyan" if role == "user" else "bold magenta"
    return Text(f"{label:<3} ", style=style) if label else Text("")


def render_row(row: MessageRow, *, label: str = "", live: bool = False) -> RenderableType:
    """One row. `live`: the row is still streaming (thinking shows its tail, a cursor shows)."""
    if row.role == "marker":
        return _render_marker(row)
    if row.role == "user":
        line = _label_text(label, "user")
        # A scheduled run was not typed by the user: it says which schedule sent it.
        if schedule := scheduled_by(row.meta):
            line.append(f"schedule {terminal_safe(schedule)} {PROMPT_MARK} ", style="bold yellow")
        else:
            line.append(f"you {PROMPT_MARK} ", style="bold cyan")
        line.append(terminal_safe(row_text(row)))
        if row.status in UNSENT:
            line.append(f"  ({row.status})", style="yellow")
        return line
    head = _label_text(label, "assistant")
    head.append("assistant", style="bold magenta")
    if row.target is not None:
        # One of several answers to one message: who wrote it; dim when not chosen.
        head.append(f"  [{terminal_safe(answer_label(row))}]", style="magenta")
    if row.status == "pending":
        head.append("  answering…", style="dim")
    elif row.status == "stopped":
        head.append("  (stopped: partial answer kept)", style="yellow")
    elif row.status == "error":
        head.append("  (failed)", style="red")
    elif row.empty:
        head.append("  (no output)", style="dim")
    parts: list[RenderableType] = [head]
    parts.extend(_render_parts(row, live=live))
    if row.error:
        # The first line only: a driver failure's details (stderr tail) get their own panel.
        first = row.error.strip().splitlines()[0] if row.error.strip() else row.error
        parts.append(Text(f"✗ {terminal_safe(first)}", style="red"))
    if row.alternative:
        return Styled(Group(*parts), "dim")
    return Group(*parts)


def close_open_markdown(text: str) -> str:
    """Close what a half-streamed markdown text left open (a code fence, bold, inline code),
    so the live answer is drawn formatted as it grows instead of flipping from raw to
    formatted when the closing marker arrives."""
    if text.count("```") % 2:
        return text + "\n```"
    if text.count("**") % 2:
        text += "**"
    if text.replace("```", "").count("`") % 2:
        text += "`"
    return text


#: How a plan entry's status reads in the checklist.
_PLAN_MARKS = {"completed": ("[x] ", "green"), "in_progress": ("[~] ", "bold yellow")}


def render_plan(plan: PlanChunk) -> Panel:
    """The agent's plan as a checklist: [x] done, [~] in progress, [ ] to do."""
    body = Text()
    for i, entry in enumerate(plan.entries):
        mark, style = _PLAN_MARKS.get(entry.status, ("[ ] ", ""))
        if i:
            body.append("\n")
        body.append(mark, style=style or "dim")
        done = entry.status == "completed"
        body.append(terminal_safe(entry.content), style="dim strike" if done else style)
    if not plan.entries:
        body.append("(empty)", style="dim italic")
    done_n = sum(e.status == "completed" for e in plan.entries)
    title = Text.assemble(("☰ ", "magenta"), ("plan", "bold magenta"))
    subtitle = f"{done_n}/{len(plan.entries)} done"
    return Panel(
        body,
        title=title,
        title_align="left",
        subtitle=subtitle,
        subtitle_align="right",
        border_style="magenta",
        expand=False,
    )


def _render_parts(row: MessageRow, *, live: bool) -> Iterable[RenderableType]:
    results = {p.call_id: p for p in row.parts if isinstance(p, ToolResult)}
    called: set[str] = set()
    # Each plan part is the whole plan at that moment: only the newest is shown.
    plans = [i for i, p in enumerate(row.parts) if isinstance(p, PlanChunk)]
    last_plan = plans[-1] if plans else -1
    for i, part in enumerate(row.parts):
        if isinstance(part, TextDelta):
            text = terminal_safe(part.text)
            text = close_open_markdown(text) if live else text
            yield Padding(Markdown(text), (0, 0, 0, 2))
        elif isinstance(part, ThinkingDelta):
            last = i == len(row.parts) - 1
            yield Padding(render_thinking(part.text, live=live and last), (0, 0, 0, 2))
        elif isinstance(part, ToolCall):
            called.add(part.call_id)
            tool = render_tool(part, results.get(part.call_id), row_status=row.status)
            yield Padding(tool, (0, 0, 0, 2))
        elif isinstance(part, PlanChunk):
            if i == last_plan:
                yield Padding(render_plan(part), (0, 0, 0, 2))
        elif part.call_id not in called:  # a result whose call is not in this row
            yield Padding(render_tool(None, part, row_status=row.status), (0, 0, 0, 2))


def _render_marker(row: MessageRow) -> Rule:
    anchor = row.anchor
    if anchor is None:
        return Rule("context compacted", style="dim")
    return Rule(
        f"context compacted: {anchor.tokens_before:,} → {anchor.tokens_after:,} tokens",
        style="dim",
    )


def render_rows(
    rows: Sequence[MessageRow], labels: Mapping[str, str] | None = None, *, live_row_id: str = ""
) -> Group:
    """Rows one after the other, each followed by a blank line."""
    labels = labels if labels is not None else roll_labels(rows)
    out: list[RenderableType] = []
    for row in rows:
        out.append(render_row(row, label=labels.get(row.id, ""), live=row.id == live_row_id))
        out.append(Text(""))
    return Group(*out)


# --- status, approvals, queue ---------------------------------------------------------------


def total_usage(usages: Iterable[Usage]) -> Usage:
    """The sum of per-turn usage records."""
    return sum_usage(usages)


def _tokens(n: int) -> str:
    return f"{n / 1000:.1f}k" if n >= 1000 else str(n)


_STATE_STYLE = {
    "idle": ("idle", "green"),
    "answering": ("answering", "bold yellow"),
    "compacting": ("compacting", "bold blue"),
    "awaiting approval": ("awaiting approval", "bold red"),
    "closed": ("closed", "red"),
}


def render_status_line(
    topic: TopicInfo, state: str, *, approvals_open: int = 0, usage: Usage | None = None
) -> Text:
    """`driver · model · state · tokens · cost`: what is running and what it cost so far."""
    shown = "awaiting approval" if approvals_open and state != "closed" else state
    label, style = _STATE_STYLE.get(shown, (shown, "bold"))
    line = Text()
    line.append(terminal_safe(driver_label(topic, "default driver")), style="bold")
    if topic.model:
        line.append(f" · {terminal_safe(topic.model)}")
    line.append(" · ")
    line.append(f"● {label}", style=style)
    if usage is not None and (usage.input_tokens or usage.output_tokens):
        line.append(
            f" · {_tokens(usage.input_tokens)} in / {_tokens(usage.output_tokens)} out", style="dim"
        )
    if usage is not None and usage.cost_usd:
        line.append(f" · ${usage.cost_usd:.4f}", style="dim")
    return line


def allow_always_option(approval: ApprovalInfo) -> ApprovalOption | None:
    """The driver's "allow always" answer for this approval, if it offers one."""
    return next((o for o in approval.options if o.kind == "allow_always"), None)


def render_approval(approval: ApprovalInfo) -> Panel:
    """The approval prompt: what the tool wants to do, and how to answer."""
    body = Text()
    tool = terminal_safe(approval.tool)
    body.append(terminal_safe(approval.description) or f"{tool} wants to run", style="bold")
    if approval.input:
        body.append("\n")
        shown = json.dumps(approval.input, ensure_ascii=False, sort_keys=True)
        body.append(terminal_safe(shown), style="dim")
    body.append("\n")
    body.append("y", style="bold green")
    body.append(" allow once   ")
    if (always := allow_always_option(approval)) is not None:
        body.append("a", style="bold green")
        body.append(f" {terminal_safe(always.label) or 'allow always'}   ")
    body.append("n", style="bold red")
    body.append(" deny")
    return Panel(
        body,
        title=Text.assemble(("approve ", "bold red"), (tool, "bold")),
        title_align="left",
        border_style="red",
        padding=(0, 1),
    )


def render_queue(rows: Sequence[MessageRow], kinds: Mapping[str, str] | None = None) -> Group:
    """Unsent messages, numbered for `/discard N`. `kinds` names a row "steer" or "queued"."""
    kinds = kinds or {}
    out: list[RenderableType] = []
    for n, row in enumerate(rows, 1):
        kind = "draft" if row.status == "draft" else kinds.get(row.id, "queued")
        line = Text(f" {n}. ", style="bold yellow")
        line.append(f"[{kind}] ", style="yellow")
        line.append(terminal_safe(row_text(row)))
        out.append(line)
    if out:
        out.append(Text(" /send N · /edit N · /discard N", style="dim"))
    return Group(*out)


# --- compositions ---------------------------------------------------------------------------


class Tail:
    """Render `renderable` and keep only its last `height` lines (with a hint of what's cut)."""

    def __init__(self, renderable: RenderableType, height: int) -> None:
        self.renderable = renderable
        self.height = max(1, height)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        lines = console.render_lines(self.renderable, options, pad=False)
        if len(lines) > self.height:
            cut = len(lines) - self.height + 1
            yield Segment(f"… {cut} line{'s' if cut > 1 else ''} above", console.get_style("dim"))
            yield Segment.line()
            lines = lines[-(self.height - 1) :] if self.height > 1 else []
        for line in lines:
            yield from line
            yield Segment.line()


@dataclass
class ChatView:
    """Everything the live (bottom) region of `hostd chat` shows, as plain values."""

    topic: TopicInfo
    state: str = "idle"
    #: Rows still changing (the answer being streamed), in position order.
    live_rows: list[MessageRow] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    #: Queued, steering and draft rows, in sending order (numbered for /discard).
    unsent: list[MessageRow] = field(default_factory=list)
    unsent_kinds: dict[str, str] = field(default_factory=dict)
    approvals: list[ApprovalInfo] = field(default_factory=list)
    usage: Usage | None = None
    #: What the user is typing (None: the input line is not drawn, e.g. piped stdin).
    input_text: str | None = None
    #: Where the cursor is in `input_text` (None: at its end).
    input_cursor: int | None = None
    #: A one-line hint under the status (e.g. "Ctrl-C again to quit").
    hint: str = ""
    #: How many lines the live answer may take (the rest scrolls off as "… N lines above").
    max_answer_lines: int = 30


def render_chat_live(view: ChatView) -> Group:
    """The live region: streaming answer, queue, approval prompt, status line, input line."""
    out: list[RenderableType] = []
    if view.live_rows:
        body = render_rows(view.live_rows, view.labels, live_row_id=view.live_rows[-1].id)
        out.append(Tail(body, view.max_answer_lines))
    if view.unsent:
        out.append(render_queue(view.unsent, view.unsent_kinds))
    for approval in view.approvals[:1]:  # one prompt at a time; the rest wait their turn
        out.append(render_approval(approval))
    if len(view.approvals) > 1:
        out.append(Text(f"({len(view.approvals) - 1} more approval(s) waiting)", style="dim"))
    status = render_status_line(
        view.topic, view.state, approvals_open=len(view.approvals), usage=view.usage
    )
    if view.hint:
        status.append(f"   {view.hint}", style="yellow")
    out.append(Rule(style="dim"))
    out.append(status)
    if view.input_text is not None:
        text = view.input_text
        at = len(text) if view.input_cursor is None else max(0, min(view.input_cursor, len(text)))
        prompt = Text(f"{PROMPT_MARK} ", style="bold cyan")
        # A multi-line message: its later lines are indented under the first.
        indent = "\n" + " " * (len(PROMPT_MARK) + 1)
        prompt.append(text[:at].replace("\n", indent))
        prompt.append("▏", style="blink")
        prompt.append(text[at:].replace("\n", indent))
        out.append(prompt)
    return Group(*out)


def render_window(
    title: str,
    rows: Sequence[MessageRow],
    topic: TopicInfo,
    state: str,
    *,
    usage: Usage | None = None,
    approvals: int = 0,
    border_style: str = "blue",
) -> Panel:
    """One whole window as a panel (the demo shows two side by side)."""
    labels = roll_labels(rows)
    live = next((r.id for r in rows if r.status == "pending"), "")
    table = Table.grid(expand=True)
    table.add_row(render_rows(rows, labels, live_row_id=live))
    table.add_row(Rule(style="dim"))
    table.add_row(render_status_line(topic, state, approvals_open=approvals, usage=usage))
    return Panel(
        table,
        title=Text(terminal_safe(title), style="bold"),
        border_style=border_style,
        padding=(0, 1),
    )


def render_turn_error(code: str, error: str, driver: str) -> RenderableType | None:
    """A turn the driver failed, said for humans: which driver, what broke (with the stderr
    tail the host attached), what to do. None for other failures: the failed row already
    shows its error."""
    driver = terminal_safe(driver) or "the driver"
    error = terminal_safe(error)
    if code == "driver_unavailable":
        body = Text.assemble(
            (f"{driver} is unavailable", "bold"),
            "\n",
            (error or "(no details)", ""),
            (
                "\nFix what it says (install the driver or the CLI it needs, set its API key), "
                "or pick another driver: `hostd drivers` lists them.",
                "dim",
            ),
        )
        return Panel(body, title="driver unavailable", title_align="left", border_style="red")
    if code in _DRIVER_FAILURES:
        body = Text.assemble(
            (f"{driver} {_DRIVER_FAILURES[code]}", "bold"),
            "\n",
            (error or "(no details)", ""),
            ("\nThe next message restarts it and resumes the session.", "dim"),
        )
        return Panel(body, title="driver failed", title_align="left", border_style="red")
    return None


_DRIVER_FAILURES = {
    "driver_crashed": "crashed",
    "driver_timeout": "stopped answering",
    "driver_protocol_error": "broke the protocol",
    "driver_error": "failed",
}
