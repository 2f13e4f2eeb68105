"""`hostd acp`'s approvals: a topic's open approvals as the editor's
`session/request_permission` requests.

Rules this module guards:
- each open approval is asked once per session while it is open (`Session.asking`);
- the first answer from any window wins: the editor's answer goes to the daemon, and one
  that comes after another window's (or after the turn ended) is dropped quietly;
- a request the editor still shows for an approval that closed without it (answered in
  another window, timed out, its turn stopped or died, the daemon restarted, the topic
  deleted) is withdrawn: the card shows the outcome (`tool_call_update`) and the request
  is cancelled with ACP's `$/cancel_request` (stable in schema v1 of the SDK the tests pin,
  @agentclientprotocol/sdk 2.4.0), which aborts the editor's pending prompt. An editor
  that does not support it ignores the notification and keeps the card until answered;
  that late answer is dropped like any other.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection
from typing import Any

import trio

from hostd.acp.link import DaemonLink
from hostd.acp.sessions import Session
from hostd.acp.updates import permission_answer, permission_request
from hostd_acp.rpc_peer import PeerGone, PeerRpcError, RpcPeer
from hostd_protocol.client_messages import ApprovalInfo, ApprovalStatus
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
        scope = session.asking[approval.id] = trio.CancelScope()
        assert self.nursery is not None
        self.nursery.start_soon(self._permission, session, approval, scope)

    async def resolved(self, session: Session, approval_id: str, status: ApprovalStatus) -> None:
        """An approval closed (in any window, or with its turn): the editor's card shows the
        outcome and its request is withdrawn; its own answer, should it come, is dropped."""
        scope = session.asking.pop(approval_id, None)
        if scope is None:
            return  # the editor was not asked, or has answered already
        scope.cancel()
        try:
            await self._update(session, {
                "sessionUpdate": "tool_call_update", "toolCallId": approval_id,
                "status": "in_progress" if status == "allowed" else "failed",
            })
        except PeerGone:
            pass  # the editor is gone: nothing shows the card any more

    async def withdraw_all(self, session: Session, still_open: Collection[str] = ()) -> None:
        """Withdraw the requests for approvals no longer open (a restarted daemon's snapshot
        lists the open ones: the others ended with their turn; a deleted topic has none)."""
        for approval_id in [a for a in session.asking if a not in still_open]:
            await self.resolved(session, approval_id, "cancelled")

    async def _permission(
        self, session: Session, approval: ApprovalInfo, scope: trio.CancelScope
    ) -> None:
        assert self.peer is not None
        params, kinds = permission_request(session.topic_id, approval)
        raw = None
        with scope:
            try:
                raw = await self.peer.request(
                    "session/request_permission", params, withdraw=True
                )
            except (PeerGone, PeerRpcError):
                pass  # the editor is gone or refused: other windows can still answer
            finally:
                if session.asking.get(approval.id) is scope:
                    del session.asking[approval.id]
        if raw is None:
            return  # withdrawn (closed elsewhere), or no answer
        allow, option_id, reason = permission_answer(raw, kinds)
        try:
            await (await self.link.client()).answer_approval(
                session.topic_id, approval.id, allow, reason, option_id=option_id
            )
        except (AlreadyAnswered, NotFound, UnknownTopic):
            pass  # another window answered first (or the turn ended): first answer wins
