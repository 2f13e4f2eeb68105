"""Request handlers for topic operations: rewind, regenerate, edit-and-resend, fork, and
choosing the answer of a multi-answer turn (`hostd.core.runtime_lanes`).

The decisions (which rows go, which are copied, what is refused) are the runtime's
(`hostd.core.runtime_rewind`); this module only carries them out around the daemon:

- Rewind / regenerate / edit-and-resend answer after their effects are committed. With
  `stop` while a turn runs, the runtime cuts at that turn's end; a rewind then answers once
  the turn has ended, with the ids that were cut.
- Fork writes the new topic and its copied rows durably before it answers, then loads it like
  any topic. Copies get new ids (a row belongs to one topic) and keep positions, roles,
  statuses, turn ids and content; idempotency keys are not copied (they belong to the
  original's sends). The fork has no resume token: its first session is offered the
  original's vendor session to copy when the runtime names one (`fork_source`: the fork's
  last row is the original's last, or has a vendor checkpoint), and a driver declaring
  `fork_session` starts as that copy; any other first session is fresh and the host feeds
  it the copied history (`TopicHost`, `hostd.core.vendor_session`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec
import trio

from hostd.core.options import state_dir
from hostd.core.payload_bounds import check_text
from hostd.shell.store import store as st
from hostd.shell.topic_host import new_id
from hostd_protocol.client_messages import (
    ChooseAnswer,
    EditResend,
    Empty,
    ForkTopic,
    MessageRow,
    Regenerate,
    Result,
    Rewind,
    RewindResult,
    TopicInfo,
    TopicResult,
)
from hostd_protocol.common import SessionSource
from hostd_protocol.limits import MAX_SEND_BYTES

if TYPE_CHECKING:
    from hostd.shell.connection import Connection
    from hostd.shell.daemon import Daemon

__all__ = ["fork_title", "topic_op_handlers"]


def fork_title(origin: TopicInfo, rows: list[MessageRow]) -> str:
    """Where a fork came from, in words: the origin's title (or id) and the message count."""
    return f"Fork of {origin.title or origin.id} at message {len(rows)}"


def topic_op_handlers(daemon: Daemon) -> dict[type, Callable[[Connection, Any], Any]]:
    """The handlers of `rewind`, `regenerate`, `edit-resend` and `fork-topic`."""

    async def rewind(conn: Connection, msg: Rewind) -> Result:
        host = await daemon.host(msg.topic_id)
        running = host.runtime.active_turn_id
        cut = await host.rewind(msg.row_id, include=msg.include, stop=msg.stop)
        if running is not None:
            await host.wait_turn_over(running)
            cut = list(host.runtime.last_rewound)
            await daemon.writer.wait_committed()
        return RewindResult(row_ids=cut)

    async def regenerate(conn: Connection, msg: Regenerate) -> Result:
        host = await daemon.host(msg.topic_id)
        daemon.turns.check(conn.peer_uid, host.topic_info())
        result: Result = await host.regenerate(stop=msg.stop, client_msg_id=msg.client_msg_id)
        return result

    async def edit_resend(conn: Connection, msg: EditResend) -> Result:
        check_text("the message", msg.text, MAX_SEND_BYTES)
        host = await daemon.host(msg.topic_id)
        daemon.turns.check(conn.peer_uid, host.topic_info())
        result: Result = await host.resend(
            msg.row_id, msg.text, stop=msg.stop, client_msg_id=msg.client_msg_id
        )
        return result

    async def fork(conn: Connection, msg: ForkTopic) -> Result:
        check_text("the title", msg.title, MAX_SEND_BYTES)
        host = await daemon.host(msg.topic_id)
        rows = host.runtime.fork_rows(msg.row_id)
        source = host.runtime.fork_source(msg.row_id, host.resume_token)
        origin = host.topic_info()
        now = time.time()
        info = TopicInfo(
            id=new_id("tp"),
            title=msg.title or fork_title(origin, rows),
            assistant=origin.assistant,
            driver=origin.driver,
            model=origin.model,
            working_dir=origin.working_dir,
            options=origin.options,
            created_at=now,
            updated_at=now,
        )
        copies = [
            msgspec.structs.replace(
                row,
                id=new_id("r"),
                topic_id=info.id,
                meta={k: v for k, v in row.meta.items() if k != "client_msg_id"},
            )
            for row in rows
        ]
        writer = daemon.writer
        writer.put(st.PutTopic(info), durable=True)
        gen = 0
        for row in copies:
            gen = writer.put(st.PutRow(row), durable=True)
        await writer.wait_committed(gen or None)
        with trio.CancelScope(shield=True):  # stored: it must be served too
            new_host = await daemon.add_topic(info, copies)
        if source is not None:
            # Where the original's driver keeps its vendor files (the session options' rule).
            where = state_dir(str(daemon.turns.workspaces), origin.id)
            new_host.start_from(SessionSource(token=source, state_dir=where))
        return TopicResult(topic=new_host.topic_info())

    async def choose_answer(conn: Connection, msg: ChooseAnswer) -> Result:
        host = await daemon.host(msg.topic_id)
        await host.choose_answer(msg.row_id)
        return Empty()

    return {
        Rewind: rewind,
        Regenerate: regenerate,
        EditResend: edit_resend,
        ForkTopic: fork,
        ChooseAnswer: choose_answer,
    }
