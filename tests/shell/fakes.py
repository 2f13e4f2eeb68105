"""Small stand-ins for the topic runtime and the supervisor, so the daemon core's I/O tests
are deterministic and need no subprocess.

`FakeRuntime` follows the runtime contract (docs/internal-contracts.md) for the basics: a
send starts a turn (user row + pending assistant row) or queues; chunks append; `TurnEnd`
closes the row and starts the next queued row; stop interrupts. `FakeSupervisor` hands out
`FakeSession`s whose turns the test drives by hand (`FakeTurn.chunk/end`), or that answer by
themselves when the text starts with `auto:<n>` (n chunks, then success).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgspec
import trio

from hostd.core.effects import (
    Effect,
    Emit,
    SaveRow,
    SaveTopic,
    SaveTurn,
    StartTurn,
    ToDriver,
    TouchRow,
)
from hostd.core.rows import LiveRow
from hostd.shell.drivers.supervisor import SessionEnded
from hostd_protocol.client_messages import (
    ApprovalInfo,
    MessageRow,
    NoticeEvent,
    RowAppended,
    RowOpened,
    RowUpdated,
    SendResult,
    Snapshot,
    StateChanged,
    TopicChanged,
    TopicInfo,
    TurnEnded,
    TurnStarted,
)
from hostd_protocol.common import (
    AnswerTarget,
    Capabilities,
    HistoryMessage,
    SendIntent,
    SessionSource,
    TextDelta,
    TopicState,
)
from hostd_protocol.driver_messages import (
    ChunkEvent,
    DriverEvent,
    HostCommand,
    Interrupt,
    Send,
    TurnEnd,
)
from hostd_protocol.errors import (
    DriverCrashed,
    DriverError,
    HostdError,
    InvalidArgument,
    NotFound,
    NothingToStop,
    TopicBusy,
)


class FakeRuntime:
    def __init__(
        self,
        topic: TopicInfo,
        rows: list[MessageRow],
        approvals: list[ApprovalInfo],
        last_seq: int,
        *,
        new_id: Any,
        wall: Any,
        **_: Any,
    ) -> None:
        self.topic = topic
        self._rows: dict[str, MessageRow] = {r.id: r for r in rows}
        self._seq = last_seq
        self._state: TopicState = "idle"
        self._turn: str | None = None
        self._answer: str | None = None
        self._new_id = new_id
        self._wall = wall
        self._next_pos = max((r.position for r in rows), default=0) + 1

    # helpers
    def _emit(self, event_cls: Any, **fields: Any) -> Emit:
        self._seq += 1
        return Emit(event_cls(topic_id=self.topic.id, seq=self._seq, **fields))

    def _put(self, row: MessageRow) -> None:
        self._rows[row.id] = row

    def _start(self, user: MessageRow) -> list[Effect]:
        turn = self._new_id("t")
        self._turn = turn
        answer = MessageRow(
            id=self._new_id("r"),
            topic_id=self.topic.id,
            role="assistant",
            status="pending",
            position=self._next_pos,
            turn_id=turn,
            created_at=self._wall(),
        )
        self._next_pos += 1
        self._answer = answer.id
        self._put(answer)
        self._state = "answering"
        return [
            SaveTurn(turn, None),
            self._emit(TurnStarted, turn_id=turn, driver=self.topic.driver),
            SaveRow(answer, durable=True),
            self._emit(RowOpened, row=answer),
            self._emit(StateChanged, state="answering"),
            StartTurn(turn, Send(turn_id=turn, text=_text(user), message_id=user.id)),
        ]

    # requests
    def send(
        self,
        text: str,
        intent: SendIntent,
        now: float,
        *,
        client_msg_id: str = "",
        options: dict[str, Any] | None = None,
        also: Sequence[AnswerTarget] = (),
    ) -> tuple[SendResult, list[Effect]]:
        if also:
            raise InvalidArgument("the fake runtime answers with one lane only")
        if self._turn is not None and intent == "start":
            raise TopicBusy("a turn is running")
        busy = self._turn is not None
        user = MessageRow(
            id=self._new_id("r"),
            topic_id=self.topic.id,
            role="user",
            status="queued" if busy else "success",
            position=self._next_pos,
            parts=[TextDelta(text)],
            created_at=self._wall(),
        )
        self._next_pos += 1
        self._put(user)
        effects: list[Effect] = [SaveRow(user, durable=True), self._emit(RowOpened, row=user)]
        if busy:
            return SendResult(row_id=user.id, disposition="queued", position=user.position), effects
        effects += self._start(user)
        assert self._turn is not None
        return (
            SendResult(
                row_id=user.id, disposition="started", turn_id=self._turn, position=user.position
            ),
            effects,
        )

    def stop(self, now: float) -> list[Effect]:
        if self._turn is None:
            raise NothingToStop("nothing to stop")
        return [ToDriver(Interrupt(turn_id=self._turn))]

    def resume_queue(self, now: float) -> list[Effect]:
        if self._turn is not None:
            return []
        queued = sorted(
            (r for r in self._rows.values() if r.status == "queued"), key=lambda r: r.position
        )
        if not queued:
            return []
        user = msgspec.structs.replace(queued[0], status="success")
        self._put(user)
        return [
            SaveRow(user, durable=True),
            self._emit(RowUpdated, row_id=user.id, status="success"),
            *self._start(user),
        ]

    def rename(self, title: str, now: float) -> list[Effect]:
        self.topic = msgspec.structs.replace(self.topic, title=title)
        return [SaveTopic(self.topic), self._emit(TopicChanged, topic=self.topic)]

    # driver side
    def driver_ready(self, capabilities: Capabilities, now: float) -> list[Effect]:
        return []

    def driver_event(self, event: DriverEvent, now: float) -> list[Effect]:
        if isinstance(event, ChunkEvent) and event.turn_id == self._turn:
            assert self._answer is not None
            row = self._rows[self._answer]
            parts = list(row.parts)
            chunk = event.chunk
            if parts and isinstance(parts[-1], TextDelta) and isinstance(chunk, TextDelta):
                parts[-1] = TextDelta(parts[-1].text + chunk.text)
            else:
                parts.append(chunk)
            row = msgspec.structs.replace(row, parts=parts)
            self._put(row)
            return [
                self._emit(RowAppended, row_id=row.id, chunk=chunk),
                TouchRow(LiveRow(row).snapshot()),
            ]
        if isinstance(event, TurnEnd) and event.turn_id == self._turn:
            return self._end(event.status, event.error)
        return []

    def _end(self, status: Any, error: str = "") -> list[Effect]:
        assert self._turn is not None and self._answer is not None
        turn, row = self._turn, self._rows[self._answer]
        row = msgspec.structs.replace(row, status=status, error=error)
        self._put(row)
        self._turn = self._answer = None
        self._state = "idle"
        effects: list[Effect] = [
            SaveRow(row, durable=True),
            self._emit(RowUpdated, row_id=row.id, status=status, error=error or None),
            SaveTurn(turn, status, error=error),
            self._emit(TurnEnded, turn_id=turn, status=status, error=error),
            self._emit(StateChanged, state="idle"),
        ]
        return effects + self.resume_queue(0.0)

    def driver_lost(self, error: DriverError, now: float) -> list[Effect]:
        if self._turn is None:
            return []
        return self._end("error", error.message)

    def tick(self, now: float) -> list[Effect]:
        return []

    def notice(
        self, code: str, message: str, level: Any = "info", now: float = 0.0
    ) -> list[Effect]:
        self._seq += 1
        return [
            Emit(
                NoticeEvent(
                    topic_id=self.topic.id, seq=self._seq, code=code, message=message, level=level
                )
            )
        ]

    # The queue and approvals are the real runtime's (tests/core); the fake has neither.
    def answer_approval(
        self, approval_id: str, allow: bool, now: float, *, by: str = "", reason: str = "",
        option_id: str = "",
    ) -> list[Effect]:
        raise NotFound(f"no approval {approval_id!r} (the fake runtime has none)")

    # Multi-answer turns are the real runtime's (tests/core); the fake runs no lanes.
    def lane_event(self, lane: int, event: DriverEvent, now: float) -> list[Effect]:
        return []

    def lane_lost(self, lane: int, error: HostdError, now: float) -> list[Effect]:
        return []

    def choose_answer(self, row_id: str, now: float) -> list[Effect]:
        raise NotFound(f"no row {row_id!r} (the fake runtime has no answers to choose)")

    # Topic operations are the real runtime's (tests/core); the fake keeps no history.
    last_rewound: list[str] = []

    def history_for(self, row_id: str) -> list[HistoryMessage]:
        return []

    def fork_rows(self, row_id: str) -> list[MessageRow]:
        raise NotFound(f"no row {row_id!r} (the fake runtime cannot fork)")

    def rewind(self, row_id: str, now: float, *, include: bool = False,
               stop: bool = False) -> tuple[list[str], list[Effect]]:
        raise NotFound(f"no row {row_id!r} (the fake runtime cannot rewind)")

    def resend(self, row_id: str, text: str, now: float, *, stop: bool = False,
               client_msg_id: str = "") -> tuple[SendResult, list[Effect]]:
        raise NotFound(f"no row {row_id!r} (the fake runtime cannot resend)")

    def regenerate(self, now: float, *, stop: bool = False,
                   client_msg_id: str = "") -> tuple[SendResult, list[Effect]]:
        raise NotFound("nothing to regenerate (the fake runtime keeps no history)")

    def edit_queued(self, row_id: str, text: str, now: float) -> list[Effect]:
        raise NotFound(f"no queued row {row_id!r} (the fake runtime has no queue)")

    def discard_queued(self, row_id: str, now: float) -> list[Effect]:
        raise NotFound(f"no queued row {row_id!r} (the fake runtime has no queue)")

    def send_now(self, row_id: str, now: float) -> list[Effect]:
        raise NotFound(f"no queued row {row_id!r} (the fake runtime has no queue)")

    # queries
    def snapshot(self, max_rows: int = 500) -> Snapshot:
        rows = sorted(self._rows.values(), key=lambda r: r.position)
        return Snapshot(
            topic=msgspec.structs.replace(self.topic, state=self._state, seq=self._seq),
            seq=self._seq,
            rows=rows[-max_rows:] if max_rows else [],
            active_turn_id=self._turn or "",
            truncated=len(rows) > max_rows,
        )

    def row(self, row_id: str) -> MessageRow | None:
        return self._rows.get(row_id)

    @property
    def state(self) -> TopicState:
        return self._state

    @property
    def active_turn_id(self) -> str | None:
        return self._turn

    @property
    def seq(self) -> int:
        return self._seq

    @property
    def stopping(self) -> bool:
        return False


def _text(row: MessageRow) -> str:
    return "".join(p.text for p in row.parts if isinstance(p, TextDelta))


# --- supervisor ---------------------------------------------------------------------------------


@dataclass
class FakeTurn:
    session: FakeSession
    send: Send

    @property
    def turn_id(self) -> str:
        return self.send.turn_id

    def chunk(self, text: str) -> None:
        self.session.emit(ChunkEvent(turn_id=self.turn_id, chunk=TextDelta(text)))

    def end(self, status: Any = "success", error: str = "") -> None:
        self.session.emit(TurnEnd(turn_id=self.turn_id, status=status, error=error))

    def crash(self) -> None:
        self.session.end(DriverCrashed("fake driver crashed", driver="fake", exit_code=-9))


class FakeSession:
    def __init__(self, supervisor: FakeSupervisor, topic_id: str, driver: str) -> None:
        self._sup = supervisor
        self.topic_id = topic_id
        self.driver = driver
        self.capabilities = Capabilities()
        self.fork_from: SessionSource | None = None
        self.pid = 0
        self._send, self.events = trio.open_memory_channel[Any](math.inf)
        self.commands: list[HostCommand] = []
        self.turn: FakeTurn | None = None

    @property
    def alive(self) -> bool:
        return not self._send._closed  # type: ignore[attr-defined]

    def emit(self, *events: DriverEvent) -> None:
        self._send.send_nowait(list(events))

    def end(self, error: DriverError | None = None) -> None:
        if self._send._closed:  # type: ignore[attr-defined]
            return
        self._send.send_nowait(SessionEnded(error))
        self._send.close()

    async def send(self, cmd: HostCommand) -> None:
        self.commands.append(cmd)
        if isinstance(cmd, Send):
            turn = self.turn = FakeTurn(self, cmd)
            if cmd.text.startswith("auto:"):
                n = int(cmd.text.split(":")[1])
                self.emit(
                    *[
                        ChunkEvent(turn_id=cmd.turn_id, chunk=TextDelta(f"{cmd.text}#{i} "))
                        for i in range(n)
                    ],
                    TurnEnd(turn_id=cmd.turn_id, status="success"),
                )
            else:
                self._sup.turns_send.send_nowait(turn)

    async def interrupt(self, turn_id: str, grace: float = 3.0) -> None:
        self.commands.append(Interrupt(turn_id=turn_id))
        self.emit(TurnEnd(turn_id=turn_id, status="stopped"))

    async def aclose(self) -> None:
        self.end(None)


@dataclass(frozen=True)
class FakeStatistics:
    sessions: int = 0
    warm: int = 0


class FakeSupervisor:
    def __init__(self) -> None:
        self.sessions: dict[str, FakeSession] = {}
        self.turns_send, self.turns = trio.open_memory_channel[FakeTurn](math.inf)
        self.opened = 0
        #: (topic, resume token, fork source) of every open, in order.
        self.inits: list[tuple[str, str | None, SessionSource | None]] = []
        #: What every session opened from now on declares in its `Ready`.
        self.capabilities = Capabilities()

    async def serve(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()

    async def open(
        self,
        topic_id: str,
        opts: Any,
        resume_token: str | None = None,
        *,
        fork_from: SessionSource | None = None,
    ) -> FakeSession:
        self.opened += 1
        self.inits.append((topic_id, resume_token, fork_from))
        session = self.sessions[topic_id] = FakeSession(self, topic_id, opts.driver)
        session.fork_from = fork_from
        session.capabilities = self.capabilities
        return session

    def mark_idle(self, topic_id: str) -> None:
        pass

    def driver_environ(self, spec: Any, options: Any = None) -> dict[str, str]:
        return {}

    def mark_busy(self, topic_id: str) -> None:
        pass

    async def prewarm(
        self, opts: Any, resume_token: str | None = None, *, topic_id: str = ""
    ) -> None:
        pass

    async def close(self, topic_id: str) -> None:
        session = self.sessions.pop(topic_id, None)
        if session is not None:
            await session.aclose()

    def statistics(self) -> FakeStatistics:
        return FakeStatistics(sessions=len(self.sessions))

    async def aclose(self) -> None:
        for tid in list(self.sessions):
            await self.close(tid)
