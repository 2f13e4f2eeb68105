"""`hostd acp`'s sessions: one topic's events to the editor, on each daemon connection.

A mixin of `hostd.acp.agent.AcpAgent` (one concept, kept apart): opening a session (new or
loaded, withdrawn by the editor mid-way), following its topic on a connection (`since=` on
the same daemon, a fresh snapshot on a restarted one), and turning each event into ACP
updates, prompt answers and permission requests.
"""

from __future__ import annotations

import sys
from typing import Any, Literal

import trio

from hostd.acp.approvals import Approvals
from hostd.acp.link import DaemonLink
from hostd.acp.sessions import Session, ours
from hostd.acp.updates import commands_update, updates_for_chunk, updates_for_row
from hostd.client.async_client import Client
from hostd_acp.rpc_peer import PeerGone, RpcPeer
from hostd_protocol.client_messages import (
    ApprovalRequested,
    ApprovalResolved,
    CommandsChanged,
    DriverInfo,
    MessageRow,
    RowAppended,
    RowOpened,
    RowUpdated,
    Snapshot,
    TopicDeleted,
    TopicEvent,
    TopicInfo,
    TurnEnded,
)
from hostd_protocol.errors import ConnectionBroken, HostdError

__all__ = ["Follow", "SessionEvents"]

#: How a session attaches on a connection (see `SessionEvents._follow`).
Follow = Literal["open", "replay", "since", "fresh"]


class SessionEvents:
    """The session half of `AcpAgent`."""

    link: DaemonLink
    approvals: Approvals
    peer: RpcPeer | None
    sessions: dict[str, Session]

    async def _opening(
        self, topic: TopicInfo, driver: DriverInfo | None, *, replay: bool
    ) -> Session:
        """`_open` for a request the editor may withdraw: then the session is closed again
        (a later `session/load` opens it afresh)."""
        try:
            session = await self._open(topic, driver, replay=replay)
            if replay:
                await session.replayed.wait()
            return session
        except trio.Cancelled:
            gone = self.sessions.pop(topic.id, None)
            if gone is not None:
                gone.gone = True
                if gone.follow is not None:
                    gone.follow.cancel()
            raise

    async def _open(
        self, topic: TopicInfo, driver: DriverInfo | None, *, replay: bool
    ) -> Session:
        client, nursery = self.link.current, self.link.nursery
        if client is None or nursery is None:  # not kept: a reconnect must not follow it
            raise ConnectionBroken("lost the daemon while opening the session; try again")
        session = self.sessions[topic.id] = Session(topic, driver)
        await nursery.start(self._follow, client, session, "replay" if replay else "open")
        return session

    async def _follow(
        self,
        client: Client,
        session: Session,
        how: Follow,
        task_status: Any = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Forward the topic's events on this connection; a new connection starts another:
        `since` its last seq on the same daemon, `fresh` (a snapshot) on a restarted one,
        whose replay buffer starts empty at the stored seq and would tell nothing."""
        started = False
        session.follow = trio.CancelScope()
        with session.follow:
            try:
                async with client.attach(
                    session.topic_id, since=session.seq if how == "since" else None
                ) as sub:
                    task_status.started()
                    started = True
                    if how != "since":
                        first = await sub.__anext__()
                        assert isinstance(first, Snapshot)
                        if how == "fresh":
                            await self._resynced(client, session, first)
                        else:
                            await self._begin(client, session, first, how == "replay")
                        session.seq = sub.seq
                    async for item in sub:
                        if isinstance(item, Snapshot):  # a resync: the daemon could not replay
                            await self._resynced(client, session, item)
                        else:
                            await self._forward(session, item)
                        session.seq = sub.seq
            except ConnectionBroken:
                pass  # the daemon is gone: the link connects again and re-attaches
            except (PeerGone, HostdError) as exc:
                print(f"hostd acp: session {session.topic_id} ended: {exc}", file=sys.stderr)
                await self._end(session, "the session's topic is gone")
            finally:
                session.replayed.set()
                if not started:
                    task_status.started()

    async def _end(self, session: Session, why: str) -> None:
        session.gone = True
        for prompt in list(session.prompts.values()):
            prompt.finish("error", why)
        await self.approvals.withdraw_all(session)

    async def _begin(
        self, client: Client, session: Session, first: Snapshot, replay: bool
    ) -> None:
        session.seq = first.seq
        rows = await self._history(client, first) if replay else list(first.rows)
        for row in rows:
            session.shown.add(row.id)
            if replay:
                for update in updates_for_row(row):
                    await self._update(session, update)
        session.replayed.set()
        await session.live.wait()
        if first.commands:
            await self._update(session, commands_update(first.commands))
        for approval in first.approvals:
            self.approvals.ask(session, approval)

    async def _resynced(self, client: Client, session: Session, snap: Snapshot) -> None:
        """A fresh snapshot on a new connection (the daemon restarted): show the rows the
        editor has not seen, ask its open approvals, and answer the prompts whose turn no
        longer runs from their answer rows."""
        for row in snap.rows:
            if row.id in session.shown:
                continue
            session.shown.add(row.id)
            self._track(session, row)
            if not ours(row):
                for update in updates_for_row(row):
                    await self._update(session, update)
        for prompt in list(session.prompts.values()):
            if not prompt.turn_id or prompt.turn_id == snap.active_turn_id:
                continue  # not started yet (queued rows survive), or still running
            answers = [r for r in snap.rows if r.turn_id == prompt.turn_id and r.role != "user"]
            status = answers[-1].status if answers else "error"
            if status == "success":
                prompt.finish("success")
            elif status == "stopped":
                prompt.finish("stopped")
            else:
                error = answers[-1].error if answers else ""
                prompt.finish("error", "the daemon stopped during this answer"
                              + (f": {error}" if error else "") + "; send it again")
        # Approvals asked before the restart that are not open now ended with their turn.
        await self.approvals.withdraw_all(
            session, [a.id for a in snap.approvals if a.status == "open"])
        for approval in snap.approvals:
            self.approvals.ask(session, approval)

    async def _history(self, client: Client, snap: Snapshot) -> list[MessageRow]:
        rows = list(snap.rows)
        while snap.truncated and rows:
            page = await client.history(
                snap.topic.id, before_position=rows[0].position, limit=1000
            )
            rows = list(page.rows) + rows
            if not page.has_more:
                break
        return rows

    async def _update(self, session: Session, update: dict[str, Any]) -> None:
        assert self.peer is not None
        await self.peer.notify("session/update", {"sessionId": session.topic_id, "update": update})

    async def _forward(self, session: Session, event: TopicEvent) -> None:
        if isinstance(event, RowAppended):
            for update in updates_for_chunk(event.chunk):
                await self._update(session, update)
        elif isinstance(event, RowOpened):
            self._track(session, event.row)
            row = event.row
            session.shown.add(row.id)
            if ours(row):
                return  # the editor shows what it sent itself
            for update in updates_for_row(row):
                await self._update(session, update)
        elif isinstance(event, RowUpdated):
            for prompt in session.prompts.values():
                if prompt.row_id == event.row_id:
                    if event.turn_id and event.status == "success":  # sent in that turn
                        prompt.turn_id = event.turn_id
                    if event.status == "draft":
                        prompt.finish("stopped")  # handed back by a stop: never sent
        elif isinstance(event, TurnEnded):
            session.ended[event.turn_id] = event
            if len(session.ended) > 64:
                del session.ended[next(iter(session.ended))]
            for prompt in session.prompts.values():
                if prompt.turn_id == event.turn_id:
                    prompt.finish(event.status, event.error)
        elif isinstance(event, CommandsChanged):
            await self._update(session, commands_update(event.commands))
        elif isinstance(event, ApprovalRequested):
            self.approvals.ask(session, event.approval)
        elif isinstance(event, ApprovalResolved):
            await self.approvals.resolved(session, event.approval_id, event.status)
        elif isinstance(event, TopicDeleted):
            await self._end(session, "the topic was deleted")

    def _track(self, session: Session, row: MessageRow) -> None:
        key = row.meta.get("client_msg_id")
        prompt = session.prompts.get(key) if isinstance(key, str) else None
        if prompt is not None:
            prompt.row_id = row.id
            if row.status == "success" and row.turn_id:
                prompt.turn_id = row.turn_id
