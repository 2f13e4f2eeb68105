"""The requests `hostd chat` sends, one at a time in the order typed (`ChatRequests`, a
part of `chat_app.ChatApp`): sends, stop, discard and send-now, `/undo`, `/regenerate`,
`/fork`, `/choose`, approval answers, and the wait before piped input's exit.

One *actions* task runs them (`_actions`), so the host gets them in the user's order; their
errors become notes. A command that depends on what an earlier one did (a message sent just
before `/undo` may have started a turn; what is typed after `/fork` goes to the new topic)
waits until the queue is done (`_settle`). `/fork` ends with `SwitchTopic`: `hostd chat`
opens the new topic in the same terminal.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio

from hostd.cli.chat_answers import choose_row
from hostd.cli.chat_commands import Command
from hostd.cli.chat_render import allow_always_option, roll_labels
from hostd.cli.chat_state import ChatState
from hostd.cli.chat_topic_ops import fork_row, undo_row
from hostd_protocol.client_messages import MessageRow
from hostd_protocol.errors import AlreadyAnswered, HostdError

if TYPE_CHECKING:
    from hostd.client import Client
    from hostd.core.transcript import Transcript
    from hostd_protocol.common import AnswerTarget, Attachment

__all__ = ["ChatRequests", "Quit", "SwitchTopic"]


class Quit(Exception):
    """Leave the chat (the daemon and the topic keep going)."""

    def __init__(self, code: int = 0, message: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class SwitchTopic(Exception):
    """Go on in another topic (`/fork`): `hostd chat` opens it in the same terminal."""

    def __init__(self, topic_id: str) -> None:
        super().__init__(topic_id)
        self.topic_id = topic_id


class ChatRequests:
    """The request side of `ChatApp` (which sets these attributes and defines the rest)."""

    client: Client
    topic_id: str
    state: ChatState
    also: list[AnswerTarget]
    images: list[Attachment]
    _queued_here: set[str]
    _answered_here: set[str]
    _send_actions: trio.MemorySendChannel[Command]
    _recv_actions: trio.MemoryReceiveChannel[Command]
    _queued_n: int
    _done_n: int
    _action_done: trio.Event
    _started: set[str]
    _ended: set[str]
    _event_seen: trio.Event

    if TYPE_CHECKING:  # provided by ChatApp

        @property
        def transcript(self) -> Transcript: ...

        def note_text(self, text: str, style: str = "dim") -> None: ...

        def redraw(self) -> None: ...

    async def _enqueue(self, cmd: Command) -> None:
        self._queued_n += 1
        await self._send_actions.send(cmd)

    async def _settle(self) -> None:
        """Until every action queued so far is done."""
        while self._done_n < self._queued_n:
            await self._action_done.wait()

    def _answering(self) -> bool:
        """A turn runs: the host said so, or a request of this window started one."""
        return bool(self.transcript.active_turn_id) or bool(self._started - self._ended)

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

    async def _actions(self) -> None:
        async for cmd in self._recv_actions:
            try:
                await self._run(cmd)
            except HostdError as exc:
                self.note_text(f"{exc.message} [{exc.code}]", "red")
            # Not when it raised something else (a switch of topic, quitting): a command
            # waiting in `_settle` must not go on in the old window.
            self._done_n += 1
            self._action_done.set()
            self._action_done = trio.Event()

    async def _run(self, cmd: Command) -> None:
        c, tid = self.client, self.topic_id
        if cmd.name == "":
            active = self.transcript.active_turn_id
            try:
                result = await c.send(tid, cmd.arg, "auto", also=self.also,
                                      attachments=cmd.images)
            except HostdError:
                if cmd.images and not self.images:
                    self.images = list(cmd.images)  # refused: kept for the next (/image clear)
                raise
            if result.disposition == "started" and result.turn_id:
                self._started.add(result.turn_id)
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
            if not self._answering():
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
            await self._topic_op(cmd.name, cmd.arg)
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

    async def _topic_op(self, name: str, arg: str) -> None:
        """`/regenerate`, `/undo`, `/fork [N]` (hostd.cli.chat_topic_ops): one request each;
        a fork switches the chat to the new topic."""
        c, tid = self.client, self.topic_id
        if name == "regenerate":
            result = await c.regenerate(tid, stop=True)
            if result.turn_id:
                self._started.add(result.turn_id)
            return
        if name == "undo":
            user = undo_row(self.transcript.rows())
            if user is None:
                self.note_text("nothing to undo")
                return
            cut = await c.rewind(tid, user.id, include=True, stop=True)
            self.note_text(f"removed {len(cut)} row(s) from the history")
            return
        row = fork_row(self.transcript.rows(), arg)
        if isinstance(row, str):
            self.note_text(row, "red")
            return
        # Titled by the row's label as the chat shows it ("at A1"), not by a row count.
        label = roll_labels(self.transcript.rows()).get(row.id, "")
        origin = self.transcript.topic
        title = f"Fork of {origin.title or origin.id} at {label}" if label else ""
        fork = await c.fork_topic(tid, row.id, title=title)
        self.note_text(f"forked into {fork.id} ({fork.title}); the chat goes on there")
        raise SwitchTopic(fork.id)

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
        """Until no turn runs and nothing is queued (piped input: let the answers finish).

        "Runs" as `_answering` says: the send's reply can come before its `turn-started`
        event is seen, and a loaded machine then left `echo hi | hostd chat` before the answer.
        """
        while True:
            rows = self.transcript.rows()
            if not self._answering() and not any(r.status == "queued" for r in rows):
                return
            await self._event_seen.wait()
