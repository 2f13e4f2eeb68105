"""The ACP session of `AcpDriver`: opened (`session/new`), resumed (`session/resume`, else
`session/load` with its replay dropped), the topic's model selected, and the session set-up
requests bounded in time with their errors mapped to driver errors. A token that no longer
resumes starts a new session with `Notice(code="resume_failed")`.

A mixin of `AcpDriver` (`hostd_acp.driver`): one concept, kept apart.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec
import trio

from hostd_acp import DRIVER_NAME
from hostd_acp.agent_process import AgentGone, AgentProcess, AgentRpcError
from hostd_acp.config import AcpOptions
from hostd_acp.schema import (
    InitializeResult,
    LoadSessionParams,
    NewSessionParams,
    NewSessionResult,
    ResumeSessionResult,
    SessionModels,
    SessionModes,
    SetModelParams,
    SetModeParams,
)
from hostd_protocol.driver_harness import TurnFailed
from hostd_protocol.driver_messages import Init, Log, Notice, ResumeToken
from hostd_protocol.errors import DriverProtocolError, DriverTimeout

__all__ = ["AcpSession"]


class AcpSession:
    """Opening and resuming the ACP session (see the module docstring)."""

    _agent_name: str
    _cwd: str
    _opts: AcpOptions
    _init: Init | None
    _agent: AgentProcess | None
    _info: InitializeResult | None
    _session_id: str | None
    _session_live: bool
    _tainted: bool
    _broken: bool
    _loading: bool
    _session_lock: trio.Lock
    _deferred: list[Notice | Log | ResumeToken]

    if TYPE_CHECKING:  # provided by AcpDriver

        async def _restart_agent(self) -> None: ...

        def _agent_or_fail(self) -> AgentProcess: ...

    async def _ensure_session(self) -> str:
        """The live session id; (re)starts the agent and opens the session as needed."""
        async with self._session_lock:
            agent = self._agent
            # A cancelled session is never reused as it is (claude-agent-acp 0.23.1 answers
            # one prompt late after a cancel; session/close + session/resume in the same
            # process did not recover it either): the agent is restarted, the session resumed.
            if agent is None or not agent.alive or self._broken or self._tainted:
                await self._restart_agent()
            self._tainted = False
            self._broken = False
            if self._session_live and self._session_id is not None:
                return self._session_id
            if self._session_id is not None:
                await self._resume(self._session_id)
            if self._session_id is None:
                result = await self._session_call(
                    "session/new",
                    NewSessionParams(
                        cwd=self._cwd,
                        mcp_servers=list(self._opts.mcp_servers),
                        _meta=self._session_meta(),
                    ),
                )
                try:
                    created = msgspec.json.decode(result, type=NewSessionResult)
                except msgspec.ValidationError as exc:
                    raise DriverProtocolError(
                        f"the ACP agent {self._agent_name!r} answered session/new with an "
                        f"invalid result: {exc}",
                        driver=DRIVER_NAME,
                    ) from None
                self._session_id = created.session_id
                self._deferred.append(ResumeToken(token=created.session_id))
                await self._apply_model(created.session_id, created.models)
                await self._apply_mode(created.session_id, created.modes)
            self._session_live = True
            return self._session_id

    async def _apply_model(self, session_id: str, models: SessionModels | None) -> None:
        """Select the topic's model in the session when the agent offers model selection."""
        init = self._init
        wanted = init.model if init is not None else ""
        if not wanted:
            return
        if models is None or not models.available_models:
            self._deferred.append(
                Log(
                    level="warning",
                    message=f"model {wanted!r} ignored: ACP agent {self._agent_name!r} offers "
                    "no model selection (configure the model in the agent)",
                )
            )
            return
        lower = wanted.lower()
        match = next(
            (m for m in models.available_models if lower in (m.model_id.lower(), m.name.lower())),
            None,
        )
        if match is None:
            offered = ", ".join(m.model_id for m in models.available_models[:12])
            self._deferred.append(
                Notice(
                    code="model_unavailable",
                    message=f"ACP agent {self._agent_name!r} has no model {wanted!r} "
                    f"(it offers: {offered}); using {models.current_model_id or 'its default'}",
                )
            )
            return
        if match.model_id == models.current_model_id:
            return
        try:
            await self._session_call(
                "session/set_model", SetModelParams(session_id=session_id, model_id=match.model_id)
            )
        except TurnFailed as exc:
            self._deferred.append(Log(level="warning", message=f"model not set: {exc.message}"))

    async def _apply_mode(self, session_id: str, modes: SessionModes | None) -> None:
        """Select the `mode` option's session mode when the agent offers it."""
        wanted = self._opts.mode
        if not wanted:
            return
        offered = modes.available_modes if modes is not None else []
        lower = wanted.lower()
        match = next((m for m in offered if lower in (m.id.lower(), m.name.lower())), None)
        if match is None:
            names = ", ".join(m.id for m in offered[:12]) or "no modes"
            current = (modes.current_mode_id if modes is not None else "") or "its default"
            self._deferred.append(
                Notice(
                    code="mode_unavailable",
                    message=f"ACP agent {self._agent_name!r} has no session mode {wanted!r} "
                    f"(it offers: {names}); using {current}",
                )
            )
            return
        if modes is not None and match.id == modes.current_mode_id:
            return
        try:
            await self._session_call(
                "session/set_mode", SetModeParams(session_id=session_id, mode_id=match.id)
            )
        except TurnFailed as exc:
            self._deferred.append(
                Notice(code="mode_unavailable", message=f"session mode not set: {exc.message}")
            )

    def _session_meta(self) -> dict[str, Any] | None:
        init = self._init
        if init is None or not init.system_prompt:
            return None
        # claude-agent-acp reads an appended system prompt here; other agents ignore _meta.
        return {"systemPrompt": {"append": init.system_prompt}}

    async def _resume(self, session_id: str) -> None:
        info = self._info
        assert info is not None
        caps = info.agent_capabilities
        params = LoadSessionParams(
            session_id=session_id, cwd=self._cwd, mcp_servers=list(self._opts.mcp_servers)
        )
        try:
            if "resume" in caps.session_capabilities:
                raw = await self._session_call("session/resume", params)
            elif caps.load_session:
                self._loading = True
                try:
                    raw = await self._session_call("session/load", params)
                finally:
                    self._loading = False
            else:
                raise AgentRpcError("session/load", 0, "the agent cannot resume sessions")
            try:
                resumed = msgspec.json.decode(raw, type=ResumeSessionResult | None)
            except msgspec.ValidationError:
                resumed = None
            await self._apply_model(session_id, resumed.models if resumed else None)
            await self._apply_mode(session_id, resumed.modes if resumed else None)
        except AgentRpcError as exc:
            self._session_id = None
            self._deferred.append(
                Notice(
                    code="resume_failed",
                    message=(
                        f"Could not resume the ACP session {session_id} of agent "
                        f"{self._agent_name!r}: {exc.message}. Started a new session; the "
                        "agent does not remember the earlier conversation."
                    ),
                )
            )

    async def _session_call(self, method: str, params: Any) -> msgspec.Raw:
        """A session set-up request, bounded in time, errors mapped to driver errors."""
        agent = self._agent_or_fail()
        try:
            with trio.fail_after(self._opts.initialize_timeout):
                return await agent.request(method, params)
        except trio.TooSlowError:
            self._broken = True
            raise DriverTimeout(
                f"the ACP agent {self._agent_name!r} did not answer {method} within "
                f"{self._opts.initialize_timeout:g} s",
                driver=DRIVER_NAME,
                stderr_tail=agent.stderr_tail(),
            ) from None
        except AgentGone as exc:
            raise self._crashed(exc, f"during {method}") from None
        except AgentRpcError as exc:
            if method in ("session/resume", "session/load"):
                raise
            raise TurnFailed(
                f"the ACP agent {self._agent_name!r} refused {method}: {exc.message}",
                driver=DRIVER_NAME,
                stderr_tail=agent.stderr_tail(),
            ) from None

    def _crashed(self, exc: AgentGone, when: str) -> TurnFailed:
        code = exc.exit_code
        how = f"was killed by signal {-code}" if code is not None and code < 0 else "exited"
        return TurnFailed(
            f"the ACP agent {self._agent_name!r} {how} {when}",
            driver=DRIVER_NAME,
            exit_code=code,
            stderr_tail=exc.stderr_tail,
        )
