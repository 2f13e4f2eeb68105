"""The client's topic operations: rewind, regenerate, edit-and-resend, fork, full history,
choosing the answer of a multi-answer turn.

A mixin of `Client` (one concept per module: these requests share their rules, documented in
`hostd_protocol.client_messages`), so the sync client derives them like every other method (`sync_client.blocking`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hostd_protocol.client_messages import (
    ChooseAnswer,
    EditResend,
    ForkTopic,
    History,
    HistoryResult,
    Regenerate,
    Rewind,
    RewindResult,
    SendResult,
    TopicInfo,
    TopicResult,
)

__all__ = ["TopicOps"]


class TopicOps:
    """Requests that change which rows make up a topic's history."""

    if TYPE_CHECKING:  # provided by Client

        async def _request(self, msg: Any) -> Any: ...

    async def rewind(
        self, topic_id: str, row_id: str, *, include: bool = False, stop: bool = False
    ) -> list[str]:
        """Cut the history after `row_id` (and `row_id` itself when `include`); the ids cut.
        `stop`: stop a running turn first (else a running turn refuses with TopicBusy)."""
        r = await self._request(
            Rewind(id=0, topic_id=topic_id, row_id=row_id, include=include, stop=stop)
        )
        assert isinstance(r, RewindResult)
        return r.row_ids

    async def regenerate(
        self, topic_id: str, *, stop: bool = False, client_msg_id: str = ""
    ) -> SendResult:
        """Answer the last user message again (it and its answer are superseded)."""
        r = await self._request(
            Regenerate(id=0, topic_id=topic_id, stop=stop, client_msg_id=client_msg_id)
        )
        assert isinstance(r, SendResult)
        return r

    async def edit_resend(
        self, topic_id: str, row_id: str, text: str, *, stop: bool = False, client_msg_id: str = ""
    ) -> SendResult:
        """Replace the sent message `row_id` (and everything after it) by `text`, sent anew."""
        r = await self._request(
            EditResend(
                id=0,
                topic_id=topic_id,
                row_id=row_id,
                text=text,
                stop=stop,
                client_msg_id=client_msg_id,
            )
        )
        assert isinstance(r, SendResult)
        return r

    async def fork_topic(self, topic_id: str, row_id: str, *, title: str = "") -> TopicInfo:
        """A new topic with the history of `topic_id` up to and including `row_id`."""
        r = await self._request(ForkTopic(id=0, topic_id=topic_id, row_id=row_id, title=title))
        assert isinstance(r, TopicResult)
        return r.topic

    async def history_all(
        self, topic_id: str, *, before_position: int | None = None, limit: int = 100
    ) -> HistoryResult:
        """A history page with the superseded rows too (marked `superseded`)."""
        r = await self._request(
            History(
                id=0, topic_id=topic_id, before_position=before_position, limit=limit, all=True
            )
        )
        assert isinstance(r, HistoryResult)
        return r

    async def choose_answer(self, topic_id: str, row_id: str) -> None:
        """Continue the conversation from answer `row_id` of a multi-answer turn (sent with
        `also`); the turn's other answers become alternatives (shown, left out of history)."""
        await self._request(ChooseAnswer(id=0, topic_id=topic_id, row_id=row_id))
