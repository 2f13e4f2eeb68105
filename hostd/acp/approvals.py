"""`hostd acp`'s approvals: a topic's open approvals as the editor's
`session/request_permission` requests.

Rules this module guards:
- each open approval is asked once per session while it is open (`Session.asking`);
- the first answer from any window wins: the editor's answer goes to the daemon, and one
  that comes after another window's (or after the turn ended) is dropped quietly;
- when an approval closes elsewhere, the editor's card shows the outcome
  (`tool_call_update`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import trio

from hostd.acp.link import DaemonLink
from hostd.acp.sessions import Session
from hostd.acp.updates import permission_answer, permission_request
from hostd_acp.rpc_peer import PeerGone, PeerRpcError, RpcPeer
from hostd_protocol.client_messages import ApprovalInfo, ApprovalResolved
from hostd_protocol.errors import AlreadyAnswered, NotFound, UnknownTopic

__all__ = ["Approvals"]


class Approvals:
    """Asks the editor about a session's approvals and passes its answers on."""

    def __init__(
        self, link: DaemonLink, update: Callable[[Session, dict[str, Any]], Awaitable[None]]
    ) -> None:
        self.link = link
        self._update = update
        self.peer: RpcPeer | None = None
        self.nursery: trio.Nursery | None = None

    def ask(self, session: Session, approval: ApprovalInfo) -> None:
        if approval.id in session.asking or approval.status != "open":
            return
        session.asking.add(approval.id)
        assert self.nursery is not None
        self.nursery.start_soon(self._permission, session, approval)

    async def resolved(self, session: Session, event: ApprovalResolved) -> None:
        """An approval closed (in any window, or with its turn): the editor's card shows the
        outcome; its own answer, whenever it comes, is dropped quietly."""
        if event.approval_id not in session.asking:
            return
        session.asking.discard(event.approval_id)
        status = "failed" if event.status != "allowed" else "in_progress"
        await self._update(session, {"sessionUpdate": "tool_call_update",
                                     "toolCallId": event.approval_id, "status": status})

    async def _permission(self, session: Session, approval: ApprovalInfo) -> None:
        assert self.peer is not None
        params, kinds = permission_request(session.topic_id, approval)
        try:
            raw = await self.peer.request("session/request_permission", params)
        except (PeerGone, PeerRpcError):
            return  # the editor is gone or refused: other windows can still answer
        finally:
            session.asking.discard(approval.id)
        allow, option_id, reason = permission_answer(raw, kinds)
        try:
            await (await self.link.client()).answer_approval(
                session.topic_id, approval.id, allow, reason, option_id=option_id
            )
        except (AlreadyAnswered, NotFound, UnknownTopic):
            pass  # another window answered first (or the turn ended): first answer wins
