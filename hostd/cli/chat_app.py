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

import dataclasses
import math
from typing import TYPE_CHECKING, Any

import msgspec
import trio
from rich.console import Console, RenderableType
from rich.live import Live
from rich.panel import Panel
from rich.text import Text

from hostd.cli.chat_answers import also_note, parse_also, unknown_target
from hostd.cli.chat_commands import HELP, Command, agent_help, parse_command
from hostd.cli.chat_input import (
    EndOfInput,
    InputEvent,
    Interrupt,
    LineEditor,
    Submit,
    read_chunks,
)
from hostd.cli.chat_render import (
    render_chat_live,
    render_row,
    render_turn_error,
    roll_labels,
    row_text,
    total_usage,
)
from hostd.cli.chat_requests import ChatRequests, Quit, SwitchTopic
from hostd.cli.chat_state import ChatState
from hostd.cli.chat_topic_ops import QUESTIONS
from hostd.cli.common import terminal_safe
from hostd.cli.images import ImageRefused, read_images, staged_note
from hostd.client import Client, Subscription
from hostd.core.payload_bounds import images_refused
from hostd.core.transcript import Transcript
from hostd_protocol.client_messages import (
    ApprovalInfo,
    ApprovalRequested,
    ApprovalResolved,
    NoticeEvent,
    Rolled,
    RowOpened,
    Snapshot,
    TopicDeleted,
    TopicInfo,
    TurnEnded,
    TurnStarted,
)
from hostd_protocol.common import AnswerTarget, Attachment, Usage
from hostd_protocol.errors import HostdError, ProtocolError

if TYPE_CHECKING:
    from prompt_toolkit.history import History

__all__ = ["ChatApp", "Command", "Quit", "SwitchTopic", "parse_command", "render_turn_error"]

#: Frames per second at most: bursts of chunks are coalesced into one redraw.
FPS = 20
#: A second Ctrl-C within this many seconds quits.
QUIT_WINDOW = 3.0


# --- the app --------------------------------------------------------------------------------


class ChatApp(ChatRequests):
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
        editor: LineEditor | None = None,
        leftover: list[InputEvent] | None = None,
    ) -> None:
        self.client = client
        self.sub = sub
        self.console = console
        self.client_name = client_name
        self.input_fd = input_fd
        self.interactive = interactive
        self.topic_id = sub.topic_id
        self.state = ChatState()
        # A switch of topic (`/fork`) hands the input line and what was typed after the
        # command (`leftover`) to the next topic's window.
        self.editor = editor or LineEditor(history, piped=not interactive)
        self.leftover: list[InputEvent] = leftover or []
        #: The topic `/fork` switched to ("" when the chat ended otherwise).
        self.switch_to = ""
        #: A command waiting for the user's y/n because it would stop the running answer.
        self.confirming: Command | None = None
        #: Actions queued and done so far: commands that look at what earlier ones did
        #: (a sent message's turn) wait until those are done (`_settle`).
        self._queued_n = 0
        self._done_n = 0
        self._action_done = trio.Event()
        #: Turns this window's requests started, and turns seen ending: a turn started
        #: here is running even before its `turn-started` event arrives.
        self._started: set[str] = set()
        self._ended: set[str] = set()
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
        #: Images that go with the next message sent (`/image`; hostd.cli.images).
        self.images: list[Attachment] = []

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

    async def _unknown_target(self, targets: list[AnswerTarget]) -> str | None:
        """`chat_answers.unknown_target` against what the daemon has (nothing to check, or a
        daemon that cannot list assistants: the send says it, as before)."""
        if not any(t.driver or t.assistant for t in targets):
            return None
        try:
            drivers = [d.name for d in await self.client.list_drivers()]
            assistants = [a.name for a in await self.client.list_assistants()]
        except HostdError:
            return None
        return unknown_target(targets, drivers, assistants)

    async def _on_image(self, arg: str) -> None:
        """`/image PATH` adds an image for the next message (checked now, as `hostd send
        --image` does, and refused at once when the topic's driver takes none); `/image`
        lists them, `/image clear` drops them."""
        if arg == "clear":
            self.images = []
        elif arg:
            driver = self.topic().driver
            try:
                info = [d for d in await self.client.list_drivers() if d.name == driver]
            except HostdError:
                info = []  # the send says it
            try:
                if info and not info[0].images:
                    raise ImageRefused(images_refused(driver).message)
                self.images = read_images([arg], self.images)
            except ImageRefused as exc:
                self.note_text(str(exc), "red")
                return
        self.note_text(staged_note(self.images))

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
                except* SwitchTopic as group:
                    switch = group.exceptions[0]
                    assert isinstance(switch, SwitchTopic)
                    self.switch_to = switch.topic_id
                except* HostdError as group:
                    # E.g. the daemon went away and re-attaching failed: say it, exit 1.
                    err = group.exceptions[0]
                    assert isinstance(err, HostdError)
                    code = 1
                    self.notes.append(Text(f"{err.message} [{err.code}]", style="red"))
                self._paint(live, final=True)
        finally:
            self._print_notes()
        if self.switch_to:
            self.console.print(
                Text(f"── now in topic {self.switch_to}; back to this one: "
                     f"hostd chat {self.topic_id}", style="dim")
            )
            return code
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
        elif item.status == "cancelled":  # its turn ended or stopped, or its driver withdrew it
            why = item.reason or "its turn ended"
            self.notes.append(Text(f"approval for {tool} closed: {why}", style="dim"))

    def _usage(self) -> Usage | None:
        per_turn = {**self.stored_usage, **self.transcript.usage}
        return total_usage(per_turn.values()) if per_turn else None

    def _on_turn_ended(self, item: TurnEnded) -> None:
        self._ended.add(item.turn_id)
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
        await self._feed(self.leftover)
        async for text in read_chunks(self.input_fd):
            if text.strip("\x03"):
                # "Twice" means two Ctrl-C in a row: any other key starts the count again.
                self._last_interrupt = -math.inf
            if not self.interactive:
                # Piped input: lines, no editing keys, no live input line.
                text = text.replace("\r", "")
            await self._feed(self.editor.feed(text))
            self.redraw()
        if self.editor.text and not self.interactive:  # a last line without a newline
            await self._on_input(Submit(self.editor.text))
        await self._on_input(EndOfInput())

    async def _feed(self, events: list[InputEvent]) -> None:
        for i, event in enumerate(events):
            self.leftover = events[i + 1 :]  # what a switch of topic carries over
            await self._on_input(event)
        self.leftover = []

    async def _on_input(self, event: InputEvent) -> None:
        if isinstance(event, Interrupt):
            self._on_ctrl_c()
        elif isinstance(event, EndOfInput):
            if self.interactive:
                raise Quit(0)
            # Piped input ran out: let the answer finish (and queued messages run), then leave.
            await self._enqueue(Command("drain"))
        elif isinstance(event, Submit):
            if self.confirming is not None:
                await self._on_answer(self.confirming, event.text)
                return
            cmd = parse_command(
                event.text,
                approval_open=bool(self.transcript.approvals()),
                agent_commands=[c.name for c in self.transcript.commands],
            )
            await self._on_command(cmd)

    async def _on_answer(self, asked: Command, text: str) -> None:
        """The y/n to `QUESTIONS`: anything but yes keeps the answer running; a line that is
        not an answer at all (a message, a command) is also taken as itself."""
        self.confirming = None
        self.set_hint("", 0)
        answer = text.strip().lower()
        if answer in ("y", "yes"):
            await self._enqueue(Command(asked.name, asked.arg, confirmed=True))
            return
        self.note_text(f"/{asked.name} cancelled: the answer goes on", "yellow")
        if answer not in ("n", "no", ""):
            await self._on_input(Submit(text))

    def _on_ctrl_c(self) -> None:
        now = trio.current_time()
        if now - self._last_interrupt <= QUIT_WINDOW:
            raise Quit(0)
        self._last_interrupt = now
        if self.transcript.active_turn_id:
            self._queued_n += 1
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
            agent = agent_help([(c.name, c.description) for c in self.transcript.commands])
            if agent:
                self.note_text(agent)
            return
        if cmd.name == "unknown":
            self.note_text(
                f"/{cmd.arg} is not a chat command: did you mean /{cmd.hint}? "
                f"(/help lists them; //{cmd.arg} sends it to the agent as a message)",
                "red",
            )
            return
        if cmd.name in QUESTIONS and not cmd.confirmed:
            await self._settle()  # a message sent just before may have started a turn
            if self._answering():
                self.confirming = cmd
                self.note_text(QUESTIONS[cmd.name], "yellow")
                self.set_hint(f"y: stop and {cmd.name} · anything else: keep the answer", 3600)
                return
        if cmd.name == "fork":
            # Wait for it: after a fork, what is typed goes to the new topic.
            await self._enqueue(cmd)
            await self._settle()
            return
        if cmd.name == "also":
            targets = parse_also(cmd.arg)
            if isinstance(targets, str):
                self.note_text(targets, "red")
                return
            wrong = await self._unknown_target(targets)
            if wrong:
                self.note_text(wrong, "red")
                return
            self.also = targets
            self.note_text(also_note(targets))
            return
        if cmd.name == "image":
            await self._on_image(cmd.arg)
            return
        if cmd.name == "edit":
            row = self._unsent_row(cmd.arg)
            if row is not None:
                self.editor.set(row_text(row))
                await self._enqueue(Command("discard-quiet", row.id))
            return
        if cmd.name == "" and self.images:
            # The images typed before this message go with it (not with a later one).
            cmd = dataclasses.replace(cmd, images=tuple(self.images))
            self.images = []
        await self._enqueue(cmd)
