"""Vendor fork for the ACP driver: `session/fork`, when the agent offers it.

The host offers a source in `Init.fork_from` (hostd's fork of a topic at its last row: the
original's ACP session id). ACP agents that list `fork` in their
`agentCapabilities.sessionCapabilities` at `initialize` (claude-agent-acp 0.23.1 does; the
method is unstable in the ACP schema) answer `session/fork {sessionId, cwd, mcpServers}`
with a new session that holds the source's conversation.

Rules this module guards:

- The fork is made while the driver answers `Init` (the agent is started for it), so the
  `Ready` says the truth: `fork_session` is true only when the new session exists. An agent
  that does not offer fork, refuses it, or cannot start leaves it false, and the host feeds
  the new session the history instead (`prompt_text`). Nothing is faked.
- ACP has no way to resume a session at an earlier point, so this driver never reports a
  `Checkpoint` nor declares `rewind_session`: a rewind always takes the host path.
- A fresh session's first prompt carries the host's history (`Send.history`, sent only then)
  before the user's text, the way the Claude Code driver does; a slash command stays whole.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from hostd_acp.config import AcpOptions
from hostd_acp.schema import InitializeResult, NewSessionResult, SessionModels
from hostd_protocol.common import SessionSource
from hostd_protocol.driver_messages import Log, Notice, ResumeToken, Send
from hostd_protocol.errors import HostdError

__all__ = ["ForkSessionParams", "SessionFork", "prompt_text"]


class ForkSessionParams(msgspec.Struct, rename="camel", kw_only=True, omit_defaults=True):
    """`session/fork` params."""

    session_id: str
    cwd: str
    mcp_servers: list[Any]
    _meta: dict[str, Any] | None = msgspec.field(default=None, name="_meta")


def prompt_text(send: Send) -> str:
    """What the agent is sent for a turn: the host's history first when the host sent one (a
    fresh session after a rewind or a fork it could not copy)."""
    if not send.history or send.text.lstrip().startswith("/"):
        return send.text
    turns = "\n".join(f"<{m.role}>\n{m.text}\n</{m.role}>" for m in send.history)
    return (
        "This conversation continues an earlier one; here it is, oldest first:\n"
        f"<conversation>\n{turns}\n</conversation>\n\n{send.text}"
    )


class SessionFork:
    """`session/fork` for `AcpDriver` (a mixin: one concept, kept apart)."""

    _agent_name: str
    _cwd: str
    _opts: AcpOptions
    _info: InitializeResult | None
    _session_id: str | None
    _session_live: bool
    _deferred: list[Notice | Log | ResumeToken]

    if TYPE_CHECKING:  # provided by AcpDriver

        async def _start_agent(self) -> None: ...

        async def _session_call(self, method: str, params: Any) -> msgspec.Raw: ...

        async def _apply_model(self, session_id: str, models: SessionModels | None) -> None: ...

        def _session_meta(self) -> dict[str, Any] | None: ...

    async def _fork_session(self, source: SessionSource) -> bool:
        """Open this driver's session as the agent's fork of `source`; whether it did."""
        name = self._agent_name
        try:
            await self._start_agent()
            info = self._info
            if info is None or "fork" not in info.agent_capabilities.session_capabilities:
                self._deferred.append(
                    Log(
                        level="info",
                        message=f"ACP agent {name!r} offers no session/fork: the host feeds "
                        "the new session the history",
                    )
                )
                return False
            raw = await self._session_call(
                "session/fork",
                ForkSessionParams(
                    session_id=source.token,
                    cwd=self._cwd,
                    mcp_servers=list(self._opts.mcp_servers),
                    _meta=self._session_meta(),
                ),
            )
            created = msgspec.json.decode(raw, type=NewSessionResult)
        except (HostdError, msgspec.ValidationError) as exc:
            self._deferred.append(
                Log(
                    level="warning",
                    message=f"ACP agent {name!r} could not fork session {source.token}: {exc}; "
                    "the host feeds the new session the history",
                )
            )
            return False
        self._session_id = created.session_id
        self._session_live = True
        self._deferred.append(ResumeToken(token=created.session_id))
        await self._apply_model(created.session_id, created.models)
        return True
