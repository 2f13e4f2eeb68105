"""What a `TopicHost` needs of its topic's runtime, as a `Protocol`: the core's
`hostd.core.topic_runtime.TopicRuntime` satisfies it, and so does the shell tests' fake
(production never bends to a fake: the fake satisfies this interface)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from hostd.core.effects import Effect
from hostd.core.runtime_outbox import NoticeLevel
from hostd_protocol.client_messages import MessageRow, SendResult, Snapshot
from hostd_protocol.common import (
    AnswerTarget,
    Attachment,
    Capabilities,
    HistoryMessage,
    SendIntent,
    TopicState,
)
from hostd_protocol.driver_messages import DriverEvent
from hostd_protocol.errors import HostdError

__all__ = ["Runtime"]


class Runtime(Protocol):
    """What a host needs of its topic's runtime (`hostd.core.topic_runtime.TopicRuntime`;
    the shell tests' fake satisfies it too). Every method returns the effects to execute."""

    @property
    def seq(self) -> int: ...
    @property
    def state(self) -> TopicState: ...
    @property
    def active_turn_id(self) -> str | None: ...
    @property
    def stopping(self) -> bool: ...
    def row(self, row_id: str) -> MessageRow | None: ...
    def snapshot(self, max_rows: int = 500) -> Snapshot: ...
    def send(
        self,
        text: str,
        intent: SendIntent,
        now: float,
        *,
        client_msg_id: str = "",
        options: dict[str, Any] | None = None,
        also: Sequence[AnswerTarget] = (),
        attachments: Sequence[Attachment] = (),
    ) -> tuple[SendResult, list[Effect]]: ...
    def stop(self, now: float, *, row_id: str = "") -> list[Effect]: ...
    def answer_approval(
        self,
        approval_id: str,
        allow: bool,
        now: float,
        *,
        by: str = "",
        reason: str = "",
        option_id: str = "",
    ) -> list[Effect]: ...
    def edit_queued(self, row_id: str, text: str, now: float) -> list[Effect]: ...
    def discard_queued(self, row_id: str, now: float) -> list[Effect]: ...
    def send_now(self, row_id: str, now: float) -> list[Effect]: ...
    def rename(self, title: str, now: float) -> list[Effect]: ...
    def resume_queue(self, now: float) -> list[Effect]: ...
    def notice(
        self, code: str, message: str, level: NoticeLevel = "info", now: float = 0.0
    ) -> list[Effect]: ...
    def driver_ready(self, capabilities: Capabilities, now: float) -> list[Effect]: ...
    def driver_event(self, event: DriverEvent, now: float) -> list[Effect]: ...
    def driver_lost(self, error: HostdError, now: float) -> list[Effect]: ...
    def tick(self, now: float) -> list[Effect]: ...

    # multi-answer turns (hostd.core.runtime_lanes)
    def lane_event(self, lane: int, event: DriverEvent, now: float) -> list[Effect]: ...
    def lane_lost(self, lane: int, error: HostdError, now: float) -> list[Effect]: ...
    def choose_answer(self, row_id: str, now: float) -> list[Effect]: ...

    # topic operations (hostd.core.runtime_rewind)
    last_rewound: list[str]

    def rewind(
        self, row_id: str, now: float, *, include: bool = False, stop: bool = False
    ) -> tuple[list[str], list[Effect]]: ...
    def resend(
        self, row_id: str, text: str, now: float, *, stop: bool = False, client_msg_id: str = ""
    ) -> tuple[SendResult, list[Effect]]: ...
    def regenerate(
        self, now: float, *, stop: bool = False, client_msg_id: str = ""
    ) -> tuple[SendResult, list[Effect]]: ...
    def fork_rows(self, row_id: str) -> list[MessageRow]: ...
    def fork_source(self, row_id: str, resume_token: str | None) -> str | None: ...
    def history_for(self, row_id: str) -> list[HistoryMessage]: ...
