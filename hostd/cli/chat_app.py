"""`hostd chat [TOPIC]`: the interactive terminal client, built on `hostd.client` only.

Shape (three trio tasks in one nursery, all owned by `ChatApp.run`):

- *events*: iterates the topic subscription (snapshot, then live events; the client library
  hides replay and resync) and turns the few events that deserve a line of their own (a roll,
  an approval answered elsewhere, a failed turn, a notice) into notes;
- *keys*: reads the keyboard (`chat_input`), edits the input line, and queues *actions*;
- *actions*: runs requests one at a time, in the order typed (sends, stop, discard, approval
  answers), so the host receives them in the user's order; their errors become notes;

and a *painter* that redraws at most `FPS` times a second when something changed: settled rows
and notes are printed above rich's `Live` region (into the scrollback), the rest is redrawn in
it. All drawing goes through `chat_render` (pure), all bookkeeping through `chat_state` (pure).

Ctrl-C once stops the running turn (the partial answer is kept, unsent messages come back as
drafts); twice within `QUIT_WINDOW` seconds quits. Quitting never stops the daemon or the topic.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec
import trio
from rich.console import Console, RenderableType
from rich.live import Live
from rich.panel import Panel
from rich.text import Text

from hostd.cli.chat_input import (
    EndOfInput,
    InputEvent,
    Interrupt,
    LineEditor,
    Submit,
    chat_history,
    raw_terminal,
    read_chunks,
)
from hostd.cli.chat_render import (
    allow_always_option,
    render_chat_live,
    render_row,
    roll_labels,
    row_text,
    total_usage,
)
from hostd.cli.chat_state import ChatState
from hostd.client import Client, DaemonNotRunning, Subscription, open_client, start_daemon
from hostd.core.transcript import Transcript
from hostd.shell.paths import Paths
from hostd_protocol.client_messages import (
    ApprovalInfo,
    ApprovalRequested,
    ApprovalResolved,
    MessageRow,
    NoticeEvent,
    Rolled,
    RowOpened,
    Snapshot,
    TopicDeleted,
    TopicInfo,
    TurnEnded,
    TurnStarted,
)
from hostd_protocol.common import Usage
from hostd_protocol.errors import AlreadyAnswered, HostdError, UnknownTopic

if TYPE_CHECKING:
    from prompt_toolkit.history import History

__all__ = ["ChatApp", "cmd_chat", "parse_command"]

#: Frames per second at most: bursts of chunks are coalesced into one redraw.
FPS = 20
#: A second Ctrl-C within this many seconds quits.
QUIT_WINDOW = 3.0

HELP = """\
[bold]Type[/bold] a message and press Enter. While an answer streams, what you type steers it
(or waits as a queued message if the driver cannot steer).
  [bold cyan]/stop[/bold cyan]          stop the answer (Ctrl-C); unsent messages come back as drafts
  [bold cyan]/discard N[/bold cyan]     drop unsent message N
  [bold cyan]/send N[/bold cyan]        send unsent message N now (stops the running answer)
  [bold cyan]/edit N[/bold cyan]        put unsent message N back on the input line
  [bold cyan]y[/bold cyan] / [bold cyan]n[/bold cyan]          allow once / deny a tool approval (also /allow, /deny [reason])
  [bold cyan]/regenerate[/bold cyan]    answer the last message again (stops a running answer)
  [bold cyan]/undo[/bold cyan]          remove the last message and its answer from the history
  [bold cyan]/fork[/bold cyan]          copy this topic (up to the last finished row) into a new one
  [bold cyan]/quit[/bold cyan]          leave (Ctrl-C twice, Ctrl-D); the daemon and the topic keep going
  [bold cyan]//text[/bold cyan]         send a message that starts with "/" (e.g. scripted directives)"""


# --- commands (pure) ------------------------------------------------------------------------


@dataclass(frozen=True)
class Command:
    """A parsed input line: `name` "" means a plain message (`arg` holds it)."""

    name: str
    arg: str = ""


COMMANDS = frozenset(
    {"help", "quit", "stop", "discard", "send", "edit", "allow", "always", "deny", "regenerate",
     "undo", "fork"}
)
_ALIASES = {"exit": "quit", "q": "quit", "?": "help", "h": "help"}


def parse_command(line: str, *, approval_open: bool = False) -> Command:
    """What a submitted line asks for. Unknown `/words` are errors, not messages."""
    text = line.strip()
    if not text:
        return Command("noop")
    if text.startswith("//"):
        return Command("", text[1:])
    if approval_open and text.lower() in ("y", "yes"):
        return Command("allow")
    if approval_open and text.lower() in ("n", "no"):
        return Command("deny")
    if approval_open and text.lower() in ("a", "always"):
        return Command("always")
    if not text.startswith("/"):
        return Command("", line)
    name, _, arg = text[1:].partition(" ")
    name = _ALIASES.get(name.lower(), name.lower())
    if name not in COMMANDS:
        return Command("unknown", name)
    return Command(name, arg.strip())


# --- the app --------------------------------------------------------------------------------


class Quit(Exception):
    """Leave the chat (the daemon and the topic keep going)."""

    def __init__(self, code: int = 0, message: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class ChatApp:
    """One terminal window on one topic."""

    def __init__(
        self,
        client: Client,
        sub: Subscription,
        console: Console,
        *,
        client_name: str,
        input_fd: int | None = None,
        interactive: bool = True,
        history: History | None = None,
    ) -> None:
        self.client = client
        self.sub = sub
        self.console = console
        self.client_name = client_name
        self.input_fd = input_fd
        self.interactive = interactive
        self.topic_id = sub.topic_id
        self.state = ChatState()
        self.editor = LineEditor(history, piped=not interactive)
        self.notes: list[RenderableType] = []
        self.hint = ""
        self._hint_until = 0.0
        self._last_interrupt = -math.inf
        self._dirty = trio.Event()
        #: Set (and replaced) after every topic event: what `_wait_idle` waits on.
        self._event_seen = trio.Event()
        self._answered_here: set[str] = set()
        self._approvals_seen: dict[str, ApprovalInfo] = {}
        self._driver = ""
        self._model = ""
        #: Usage per turn stored before this window opened (the transcript has only what
        #: streams from now on): the footer shows both, so a reopened topic keeps its cost.
        self.stored_usage: dict[str, Usage] = {}
        self._send_actions, self._recv_actions = trio.open_memory_channel[Command](256)
        #: Whether the running turn's driver takes steers (from `TurnStarted`).
        self._can_steer = False
        #: Rows this window sent that the host queued (not steered), whatever order the
        #: reply and the row's event arrive in.
        self._queued_here: set[str] = set()

    # --- reading the transcript -----------------------------------------------------------

    @property
    def transcript(self) -> Transcript:
        transcript: Transcript = self.sub.transcript
        return transcript

    def topic(self) -> TopicInfo:
        topic: TopicInfo = self.transcript.topic
        if (self._driver and not topic.driver) or (self._model and not topic.model):
            topic = msgspec.structs.replace(
                topic, driver=topic.driver or self._driver, model=topic.model or self._model
            )
        return topic

    def note(self, renderable: RenderableType) -> None:
        self.notes.append(renderable)
        self.redraw()

    def note_text(self, text: str, style: str = "dim") -> None:
        self.note(Text(text, style=style))

    def set_hint(self, text: str, seconds: float = QUIT_WINDOW) -> None:
        self.hint = text
        self._hint_until = trio.current_time() + seconds
        self.redraw()

    def redraw(self) -> None:
        self._dirty.set()

    # --- run ------------------------------------------------------------------------------

    async def run(self) -> int:
        """Until /quit, Ctrl-C twice, Ctrl-D, the end of piped input, or a lost connection."""
        self._print_header()
        code = 0
        live = Live(
            console=self.console,
            auto_refresh=False,
            transient=True,
            redirect_stdout=False,
            redirect_stderr=False,
        )
        try:
            with live:
                try:
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(self._painter, live)
                        nursery.start_soon(self._events)
                        nursery.start_soon(self._actions)
                        if self.input_fd is not None:
                            nursery.start_soon(self._keys)
                except* Quit as group:
                    quit_exc = group.exceptions[0]
                    assert isinstance(quit_exc, Quit)
                    code = quit_exc.code
                    if quit_exc.message:
                        self.notes.append(Text(quit_exc.message, style="red"))
                except* HostdError as group:
                    # E.g. the daemon went away and re-attaching failed: say it, exit 1.
                    err = group.exceptions[0]
                    assert isinstance(err, HostdError)
                    code = 1
                    self.notes.append(Text(f"{err.message} [{err.code}]", style="red"))
                self._paint(live, final=True)
        finally:
            self._print_notes()
        self.console.print(
            Text.assemble(
                ("bye", "bold"),
                f": the topic keeps going in the daemon; come back with `hostd chat {self.topic_id}`",
            ),
            style="dim",
        )
        return code

    def _print_header(self) -> None:
        topic = self.topic()
        head = Text.assemble(("hostd chat", "bold"), "  ", (topic.title or topic.id, "bold cyan"))
        if topic.title:
            head.append(f"  ({topic.id})", style="dim")
        help_line = Text(
            "type to send; typing while it answers steers · /help · Ctrl-C stops, twice quits",
            style="dim",
        )
        self.console.print(Panel(Text.assemble(head, "\n", help_line), border_style="cyan"))
        if self.transcript.truncated:
            self.console.print(Text("(older messages not shown: `hostd history`)", style="dim"))

    # --- painting -------------------------------------------------------------------------

    async def _painter(self, live: Live) -> None:
        while True:
            # A hint expires by itself: wake up for that too.
            with trio.move_on_at(self._hint_until if self.hint else math.inf):
                await self._dirty.wait()
            self._dirty = trio.Event()
            self._paint(live)
            # Coalesce: chunks that arrive within one frame are drawn together.
            await trio.sleep(1 / FPS)

    def _print_notes(self) -> None:
        for note in self.notes:
            self.console.print(note)
        self.notes.clear()

    def _paint(self, live: Live, *, final: bool = False) -> None:
        rows = self.transcript.rows()
        labels = roll_labels(rows)
        for row in self.state.take_settled(rows):
            self.console.print(render_row(row, label=labels.get(row.id, "")))
            self.console.print()
        drafts = self.state.new_drafts(rows)
        if drafts:
            unsent = [r.id for r in ChatState.unsent(rows)]
            numbers = ", ".join(str(unsent.index(d.id) + 1) for d in drafts if d.id in unsent)
            self.notes.append(
                Text(
                    f"{len(drafts)} unsent message(s) came back as drafts ({numbers}): "
                    "/send N sends, /edit N puts it back on the input line, /discard N drops",
                    style="yellow",
                )
            )
        self._print_notes()
        if self.hint and trio.current_time() >= self._hint_until:
            self.hint = ""
        if final:
            live.update(Text(""), refresh=True)
            return
        view = self.state.view(
            rows,
            self.topic(),
            self.transcript.state,
            active_turn_id=self.transcript.active_turn_id,
            approvals=self.transcript.approvals(),
            usage=self._usage(),
            input_text=self.editor.text if self.interactive else None,
            input_cursor=self.editor.cursor,
            hint=self.hint,
            height=self.console.height,
        )
        live.update(render_chat_live(view), refresh=True)

    # --- topic events ---------------------------------------------------------------------

    async def _events(self) -> None:
        async for item in self.sub:
            self._on_event(item)
            self.redraw()
            self._event_seen.set()
            self._event_seen = trio.Event()
        raise Quit(1, "lost the connection to hostd (was the daemon stopped?)")

    def _on_event(self, item: Any) -> None:
        if isinstance(item, Snapshot):
            return  # a fresh snapshot after a resync: the painter redraws from it
        if isinstance(item, TurnStarted):
            self._driver = item.driver or self._driver
            self._model = item.model or self._model
            self._can_steer = item.capabilities.inject_steering
        elif isinstance(item, RowOpened):
            active = self.transcript.active_turn_id
            mine_queued = item.row.id in self._queued_here
            if item.row.status == "queued" and active and self._can_steer and not mine_queued:
                # Sent while answering to a driver that steers: a steer (this window's own
                # sends are corrected by their reply, other windows' are a fair guess).
                self.state.steers[item.row.id] = active
        elif isinstance(item, Rolled):
            labels = roll_labels(self.transcript.rows())
            a1 = labels.get(item.closed_row_id, "A")
            u2 = " ".join(labels.get(r, "U") for r in item.steer_row_ids)
            a2 = labels.get(item.new_row_id, "A")
            self.notes.append(
                Text(f"↳ steer landed: {a1} closed, {u2} placed, {a2} continues", style="green")
            )
        elif isinstance(item, ApprovalRequested):
            self._approvals_seen[item.approval.id] = item.approval
        elif isinstance(item, ApprovalResolved):
            self._on_approval_resolved(item)
        elif isinstance(item, TurnEnded):
            self._on_turn_ended(item)
        elif isinstance(item, NoticeEvent):
            style = {"info": "dim", "warning": "yellow", "error": "red"}[item.level]
            self.notes.append(Text(f"[{item.code}] {item.message}", style=style))
        elif isinstance(item, TopicDeleted):
            raise Quit(0, "the topic was deleted (by another window)")

    def _on_approval_resolved(self, item: ApprovalResolved) -> None:
        info = self._approvals_seen.pop(item.approval_id, None)
        tool = info.tool if info is not None else "tool"
        if item.approval_id in self._answered_here:
            return  # our own answer: the answering action already said so
        if item.status in ("allowed", "denied"):
            who = item.answered_by or "another window"
            self.notes.append(
                Text(f"approval for {tool}: {item.status} in {who}; prompt closed", style="yellow")
            )
        elif item.status == "timed_out":
            self.notes.append(Text(f"approval for {tool} timed out (denied)", style="yellow"))
        elif item.status == "cancelled":
            self.notes.append(Text(f"approval for {tool} cancelled (turn ended)", style="dim"))

    def _usage(self) -> Usage | None:
        per_turn = {**self.stored_usage, **self.transcript.usage}
        return total_usage(per_turn.values()) if per_turn else None

    def _on_turn_ended(self, item: TurnEnded) -> None:
        if self.hint.startswith("stopping…"):
            # The stop is done: the footer must not say "idle" and "stopping…" at once.
            self.set_hint("stopped (Ctrl-C again to quit)")
        if item.status == "stopped":
            self.notes.append(Text("■ stopped: the partial answer is kept", style="yellow"))
        elif item.status == "error":
            panel = render_turn_error(item.error_code, item.error, self.topic().driver)
            if panel is not None:
                self.notes.append(panel)

    # --- keyboard -------------------------------------------------------------------------

    async def _keys(self) -> None:
        assert self.input_fd is not None
        async for text in read_chunks(self.input_fd):
            if text.strip("\x03"):
                # "Twice" means two Ctrl-C in a row: any other key starts the count again.
                self._last_interrupt = -math.inf
            if not self.interactive:
                # Piped input: lines, no editing keys, no live input line.
                text = text.replace("\r", "")
            for event in self.editor.feed(text):
                await self._on_input(event)
            self.redraw()
        if self.editor.text and not self.interactive:  # a last line without a newline
            await self._on_input(Submit(self.editor.text))
        await self._on_input(EndOfInput())

    async def _on_input(self, event: InputEvent) -> None:
        if isinstance(event, Interrupt):
            self._on_ctrl_c()
        elif isinstance(event, EndOfInput):
            if self.interactive:
                raise Quit(0)
            # Piped input ran out: let the answer finish (and queued messages run), then leave.
            await self._send_actions.send(Command("drain"))
        elif isinstance(event, Submit):
            cmd = parse_command(event.text, approval_open=bool(self.transcript.approvals()))
            await self._on_command(cmd)

    def _on_ctrl_c(self) -> None:
        now = trio.current_time()
        if now - self._last_interrupt <= QUIT_WINDOW:
            raise Quit(0)
        self._last_interrupt = now
        if self.transcript.active_turn_id:
            self._send_actions.send_nowait(Command("stop"))
            self.set_hint("stopping… (Ctrl-C again to quit)")
        elif self.editor.text:
            self.editor.set("")
            self.set_hint("input cleared (Ctrl-C again to quit)")
        else:
            self.set_hint("Ctrl-C again to quit (the topic keeps going)")

    async def _on_command(self, cmd: Command) -> None:
        if cmd.name == "noop":
            return
        if cmd.name == "quit":
            raise Quit(0)
        if cmd.name == "help":
            self.note(Text.from_markup(HELP))
            return
        if cmd.name == "unknown":
            self.note_text(
                f"unknown command /{cmd.arg}: /help lists them; //{cmd.arg} sends it as a message",
                "red",
            )
            return
        if cmd.name == "edit":
            row = self._unsent_row(cmd.arg)
            if row is not None:
                self.editor.set(row_text(row))
                await self._send_actions.send(Command("discard-quiet", row.id))
            return
        await self._send_actions.send(cmd)

    def _unsent_row(self, arg: str) -> MessageRow | None:
        unsent = ChatState.unsent(self.transcript.rows())
        try:
            n = int(arg)
        except ValueError:
            self.note_text(f"which one? give its number (1..{len(unsent)})", "red")
            return None
        if not 1 <= n <= len(unsent):
            if unsent:
                self.note_text(f"no unsent message {n} (1..{len(unsent)})", "red")
            else:
                self.note_text("no unsent messages", "red")
            return None
        return unsent[n - 1]

    # --- requests -------------------------------------------------------------------------

    async def _actions(self) -> None:
        async for cmd in self._recv_actions:
            try:
                await self._run(cmd)
            except HostdError as exc:
                self.note_text(f"{exc.message} [{exc.code}]", "red")

    async def _run(self, cmd: Command) -> None:
        c, tid = self.client, self.topic_id
        if cmd.name == "":
            active = self.transcript.active_turn_id
            result = await c.send(tid, cmd.arg, "auto")
            if result.disposition == "steered":
                self.state.steers[result.row_id] = active
            elif result.disposition == "queued":
                self._queued_here.add(result.row_id)
                self.state.steers.pop(result.row_id, None)
                if active:
                    self.note_text("queued: it runs when this answer ends (no steering now)")
            self.redraw()
        elif cmd.name == "stop":
            if not self.transcript.active_turn_id:
                self.note_text("nothing to stop")
                return
            await c.stop(tid)
        elif cmd.name in ("discard", "send"):
            row = self._unsent_row(cmd.arg)
            if row is None:
                return
            if cmd.name == "discard":
                await c.discard_queued(tid, row.id)
                self.note_text("discarded")
            else:
                await c.send_now(tid, row.id)
        elif cmd.name == "discard-quiet":
            await c.discard_queued(tid, cmd.arg)
        elif cmd.name in ("regenerate", "undo", "fork"):
            await self._topic_op(cmd.name)
        elif cmd.name in ("allow", "deny"):
            await self._answer(cmd.name == "allow", cmd.arg)
        elif cmd.name == "always":
            await self._answer(True, cmd.arg, always=True)
        elif cmd.name == "drain":
            await self._wait_idle()
            raise Quit(0)

    async def _topic_op(self, name: str) -> None:
        """`/regenerate`, `/undo` (rewind before the last message), `/fork` (at the last
        finished row): the topic operations, one request each."""
        c, tid = self.client, self.topic_id
        sent = [r for r in self.transcript.rows() if r.status not in ("queued", "draft")]
        if name == "regenerate":
            await c.regenerate(tid, stop=True)
            return
        if name == "undo":
            users = [r for r in sent if r.role == "user"]
            if not users:
                self.note_text("nothing to undo")
                return
            cut = await c.rewind(tid, users[-1].id, include=True, stop=True)
            self.note_text(f"removed {len(cut)} row(s) from the history")
            return
        done = [r for r in sent if r.status != "pending"]
        if not done:
            self.note_text("nothing to fork yet")
            return
        fork = await c.fork_topic(tid, done[-1].id)
        self.note_text(f"forked into {fork.id} ({fork.title}): hostd chat {fork.id}")

    async def _answer(self, allow: bool, reason: str, *, always: bool = False) -> None:
        approvals = self.transcript.approvals()
        if not approvals:
            self.note_text("no approval is waiting")
            return
        approval = approvals[0]
        option_id = ""
        if always:
            # Allow-always exists only where the driver offers it (an approval option).
            option = allow_always_option(approval)
            if option is None:
                self.note_text(f"{approval.tool}: this driver offers no allow-always; y or n")
                return
            option_id = option.id
        self._answered_here.add(approval.id)
        try:
            await self.client.answer_approval(
                self.topic_id, approval.id, allow, reason, option_id=option_id
            )
        except AlreadyAnswered as exc:
            self._answered_here.discard(approval.id)
            self.note_text(f"too late: {exc.message}", "yellow")
            return
        verb = "allowed always (this topic)" if always else "allowed once" if allow else "denied"
        self.note_text(f"{approval.tool}: {verb}", "green" if allow else "yellow")

    async def _wait_idle(self) -> None:
        """Until no turn runs and nothing is queued (piped input: let the answers finish)."""
        while True:
            rows = self.transcript.rows()
            if not self.transcript.active_turn_id and not any(r.status == "queued" for r in rows):
                return
            await self._event_seen.wait()


def render_turn_error(code: str, error: str, driver: str) -> RenderableType | None:
    """A turn the driver failed, said for humans: which driver, what broke (with the stderr
    tail the host attached), what to do. None for other failures: the failed row already
    shows its error."""
    driver = driver or "the driver"
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


# --- the command ----------------------------------------------------------------------------


def _parse_options(items: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise Quit(2, f"--option wants KEY=VALUE, got {item!r}")
        try:
            out[key] = msgspec.json.decode(value)
        except msgspec.DecodeError:
            out[key] = value
    return out


def _read_line(fd: int) -> str:
    """One line from `fd`, read a byte at a time: what follows it stays unread for the chat
    (Python's buffered `input()` would swallow piped lines meant as messages)."""
    data = b""
    while True:
        byte = os.read(fd, 1)
        if not byte or byte == b"\n":
            return data.decode(errors="replace")
        data += byte


async def _choose_topic(client: Client, *, latest: bool) -> str:
    """`chat -c`: the topic updated last; `chat --pick`: one chosen from a numbered list."""
    topics = sorted(await client.list_topics(), key=lambda t: t.updated_at, reverse=True)
    if not topics:
        raise Quit(1, "no topics yet: `hostd chat` starts one")
    if latest:
        return str(topics[0].id)
    shown = topics[:20]
    for n, t in enumerate(shown, 1):
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(t.updated_at))
        title = t.title or "(untitled)"
        print(f"{n:>3}  {when}  {title[:50]:<50}  {t.id}  {t.working_dir}")
    print(f"topic [1-{len(shown)}]: ", end="", flush=True)
    answer = (await trio.to_thread.run_sync(_read_line, sys.stdin.fileno())).strip()
    if answer.isdigit() and 1 <= int(answer) <= len(shown):
        return str(shown[int(answer) - 1].id)
    match = [str(t.id) for t in topics if t.id == answer]
    if match:
        return match[0]
    raise Quit(1, f"no topic {answer!r} in the list")


async def _open_topic(client: Client, args: argparse.Namespace) -> TopicInfo:
    """The topic named on the command line (or the latest with -c, or one picked from the
    list with --pick), or a new one; with a usable driver."""
    if getattr(args, "cont", False) or getattr(args, "pick", False):
        args.topic = await _choose_topic(client, latest=bool(getattr(args, "cont", False)))
    if args.topic:
        try:
            topic = await client.get_topic(args.topic)
        except UnknownTopic:
            raise Quit(
                1,
                f"no topic {args.topic!r}: `hostd topics` lists them; "
                "`hostd chat --driver NAME` starts a new one",
            ) from None
    else:
        topic = await client.create_topic(
            title=args.title,
            driver=args.driver,
            model=args.model,
            assistant=args.assistant,
            working_dir=args.working_dir,
            options=_parse_options(args.option),
        )
    if topic.driver:
        drivers = {d.name: d for d in await client.list_drivers()}
        info = drivers.get(topic.driver)
        if info is None:
            known = ", ".join(sorted(drivers)) or "none"
            raise Quit(
                1,
                f"driver {topic.driver!r} is not installed (installed: {known}); "
                "install its package, or pick one with --driver",
            )
        if not info.available:
            raise Quit(
                1,
                f"driver {topic.driver!r} is unavailable: {info.reason or 'it failed to load'}. "
                "Fix that, or pick another driver (`hostd drivers`).",
            )
    return topic


def _offer_to_start(console: Console, paths: Paths, exc: DaemonNotRunning) -> bool:
    """Ask (on a terminal) whether to start the daemon; start it if yes."""
    console.print(Text(f"hostd is not running (socket {paths.socket_path}).", style="yellow"))
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        console.print(
            "Start it with [bold]hostd serve --detach[/bold] (or run [bold]hostd --autostart "
            "chat[/bold])."
        )
        return False
    try:
        answer = console.input("Start it now in the background? [Y/n] ").strip().lower()
    except (EOFError, KeyboardInterrupt):
        return False
    if answer not in ("", "y", "yes"):
        console.print("Start it later with [bold]hostd serve --detach[/bold].")
        return False
    try:
        start_daemon(paths)
    except HostdError as err:
        console.print(Text(f"could not start hostd: {err.message}", style="red"))
        return False
    return True


async def chat_main(args: argparse.Namespace, console: Console, paths: Paths) -> int:
    client_name = f"hostd chat {os.getpid()}"
    stdin_fd: int | None = None
    try:
        stdin_fd = sys.stdin.fileno()
    except (OSError, ValueError, AttributeError):
        stdin_fd = None
    interactive = stdin_fd is not None and os.isatty(stdin_fd)
    async with open_client(
        paths, client_name=client_name, autostart=getattr(args, "autostart", False)
    ) as client:
        topic = await _open_topic(client, args)
        async with client.attach(topic.id) as sub:
            app = ChatApp(
                client,
                sub,
                console,
                client_name=client_name,
                input_fd=stdin_fd,
                interactive=interactive,
                history=chat_history(paths.data_dir / "chat-history") if interactive else None,
            )
            try:
                stored = await client.usage(topic.id)
                app.stored_usage = {t.turn_id: t.usage for t in stored.turns}
            except HostdError:
                pass  # an older daemon: the footer starts from this window's turns
            if interactive:
                assert stdin_fd is not None
                with raw_terminal(stdin_fd):
                    return await app.run()
            return await app.run()


def cmd_chat(args: argparse.Namespace) -> int:
    console = Console(highlight=False)
    paths = Paths.from_env(getattr(args, "home", None))
    # Like `claude` and `opencode`: a new topic's agent works where the command runs.
    args.working_dir = os.path.abspath(args.working_dir or os.getcwd())
    for attempt in range(2):
        try:
            return trio.run(chat_main, args, console, paths)
        except DaemonNotRunning as exc:
            if attempt or not _offer_to_start(console, paths, exc):
                return 1
        except Quit as exc:
            if exc.message:
                console.print(Text(f"hostd chat: {exc.message}", style="red"))
            return exc.code
        except HostdError as exc:
            console.print(Text(f"hostd chat: {exc.message} [{exc.code}]", style="red"))
            return 1
        except KeyboardInterrupt:
            return 130
    return 1
