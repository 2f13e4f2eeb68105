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

The slash commands are `chat_commands` (pure); the `hostd chat` command itself (options,
which topic, starting the daemon) is `chat_cmd`.

Ctrl-C once stops the running turn (the partial answer is kept, unsent messages come back as
drafts); twice within `QUIT_WINDOW` seconds quits. Quitting never stops the daemon or the topic.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import msgspec
import trio
from rich.console import Console, RenderableType
from rich.live import Live
from rich.panel import Panel
from rich.text import Text

from hostd.cli.chat_answers import also_note, choose_row, parse_also
from hostd.cli.chat_commands import HELP, Command, parse_command
from hostd.cli.chat_input import (
    EndOfInput,
    InputEvent,
    Interrupt,
    LineEditor,
    Submit,
    read_chunks,
)
from hostd.cli.chat_render import (
    allow_always_option,
    render_chat_live,
    render_row,
    render_turn_error,
    roll_labels,
    row_text,
    total_usage,
)
from hostd.cli.chat_state import ChatState
from hostd.cli.common import terminal_safe
from hostd.client import Client, Subscription
from hostd.core.transcript import Transcript
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
from hostd_protocol.common import AnswerTarget, Usage
from hostd_protocol.errors import AlreadyAnswered, HostdError, ProtocolError

if TYPE_CHECKING:
    from prompt_toolkit.history import History

__all__ = ["ChatApp", "Command", "Quit", "parse_command", "render_turn_error"]

#: Frames per second at most: bursts of chunks are coalesced into one redraw.
FPS = 20
#: A second Ctrl-C within this many seconds quits.
QUIT_WINDOW = 3.0


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
        #: Who else answers the messages typed here (`/also`; hostd.cli.chat_answers).
        self.also: list[AnswerTarget] = []

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
        # Notes quote titles, tool names and the daemon's messages (which quote content).
        self.note(Text(terminal_safe(text), style=style))

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
        title = terminal_safe(topic.title or topic.id)
        head = Text.assemble(("hostd chat", "bold"), "  ", (title, "bold cyan"))
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
        try:
            async for item in self.sub:
                self._on_event(item)
                self.redraw()
                self._event_seen.set()
                self._event_seen = trio.Event()
        except ProtocolError:
            pass  # the connection's end: said below, as the chat's last line
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
        if cmd.name == "also":
            targets = parse_also(cmd.arg)
            if isinstance(targets, str):
                self.note_text(targets, "red")
                return
            self.also = targets
            self.note_text(also_note(targets))
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
            result = await c.send(tid, cmd.arg, "auto", also=self.also)
            if result.disposition == "steered":
                self.state.steers[result.row_id] = active
            elif result.disposition == "queued":
                self._queued_here.add(result.row_id)
                self.state.steers.pop(result.row_id, None)
                if active:
                    self.note_text("queued: it runs when this answer ends (no steering now)")
            self.redraw()
        elif cmd.name == "stop":
            active = self.transcript.active_turn_id
            if not active:
                self.note_text("nothing to stop")
                return
            if cmd.arg:  # `/stop N`: answer N alone; the others go on
                picked = choose_row(self.transcript.rows(), cmd.arg)
                if isinstance(picked, str) or picked.turn_id != active:
                    self.note_text(
                        picked if isinstance(picked, str) else "the running answer is one: /stop",
                        "red",
                    )
                    return
                await c.stop(tid, row_id=picked.id)
                self.note_text(f"stopping answer {picked.lane}; the others go on")
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
        elif cmd.name == "choose":
            picked = choose_row(self.transcript.rows(), cmd.arg)
            if isinstance(picked, str):
                self.note_text(picked, "red")
                return
            await c.choose_answer(tid, picked.id)
            self.note_text(f"continuing from answer {picked.lane}; the others are alternatives")
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
