"""The ACP driver: one ACP agent process (one ACP session) per driver process.

The harness (`hostd_protocol.driver_harness`) owns the frame loop, one turn at a time and the
approval bookkeeping; this module speaks ACP as the client:

- `init` reads the agents file, starts the agent (own process group) and sends
  `initialize`: a missing command, an agent that never answers, or one on another ACP
  protocol version is a `DriverFatal` with a one-line reason. `Ready.version` names the
  agent and its version from `initialize`.
- `prewarm` (or the first turn) opens the ACP session: `session/resume` when the agent
  offers it, else `session/load` (its replay of old updates is dropped: hostd has the
  history), else `session/new`; the session id is the resume token. A token that no
  longer resumes starts a new session with `Notice(code="resume_failed")`.
- A turn is one `session/prompt`; `session/update`s for our session while it runs become
  chunks and notices (`translate.py`); its `stopReason` ends the turn.
- `session/request_permission` becomes a hostd approval; the host's allow / deny picks the
  agent's allow-once / reject-once option (allow-always / reject-always when the agent
  offers nothing else). An interrupt answers `cancelled`, as ACP requires.
- Stop sends `session/cancel` and waits (bounded) for the prompt's own answer, so the turn
  ends `stopped` with its partial answer and no prompt is ever left in flight; an agent
  that does not answer in time is killed and restarted before the next turn.
- ACP cannot inject a message into a running prompt, so `inject_steering` is false and the
  host queues steers as next turns. Nothing fakes injection by cancelling.

Peer defects absorbed (claude-agent-acp 0.23.1; see README.md): a cancelled session stays one
prompt late for good, so after a cancel the agent is restarted and the session resumed
before the next prompt; updates
that arrive when no prompt of ours is running, or for another session id, are dropped and
counted, never attributed to the next turn.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Any

import msgspec
import trio

from hostd_acp import __version__
from hostd_acp.agent_process import AgentGone, AgentProcess, AgentRpcError, RequestRefused
from hostd_acp.client_methods import ClientMethodError, FileAccess
from hostd_acp.config import (
    CONFIG_FILE,
    SEEN_FILE,
    AcpOptions,
    AgentConfig,
    agent_env,
    config_dir,
    data_dir,
    load_agents,
    parse_options,
    remember_seen,
    resolve_command,
    select_agent,
)
from hostd_acp.jsonrpc import INVALID_PARAMS, METHOD_NOT_FOUND, Dropped
from hostd_acp.schema import (
    ACP_PROTOCOL_VERSION,
    PERMISSION_CANCELLED,
    ClientCapabilities,
    FsCapabilities,
    InitializeParams,
    InitializeResult,
    LoadSessionParams,
    NewSessionParams,
    NewSessionResult,
    PermissionOption,
    PromptParams,
    PromptResult,
    ReadTextFileParams,
    RequestPermissionParams,
    ResumeSessionResult,
    SessionIdParams,
    SessionModels,
    SessionNotification,
    SetModelParams,
    TextBlock,
    UpdateKind,
    WriteTextFileParams,
    permission_selected,
)
from hostd_acp.session_fork import SessionFork, prompt_text
from hostd_acp.translate import Output, UpdateTranslator
from hostd_protocol.common import (
    ApprovalOption,
    Capabilities,
    TextDelta,
    ThinkingDelta,
    ToolCall,
    ToolResult,
    TurnStatus,
    Usage,
)
from hostd_protocol.driver_harness import DriverBase, TurnContext, TurnFailed
from hostd_protocol.driver_messages import Init, Log, Notice, ResumeToken, UsageEvent
from hostd_protocol.errors import (
    DriverCrashed,
    DriverError,
    DriverProtocolError,
    DriverTimeout,
    DriverUnavailable,
    VersionMismatch,
)

log = logging.getLogger("hostd_acp")

DRIVER_NAME = "acp"

#: Log the first few drops of each kind, then every `DROP_LOG_EVERY`th (bounded logging).
DROP_LOG_FIRST = 5
DROP_LOG_EVERY = 100
#: Malformed lines in a row after which the agent counts as broken.
MAX_MALFORMED_IN_A_ROW = 100

_notification_decoder = msgspec.json.Decoder(SessionNotification)
_permission_decoder = msgspec.json.Decoder(RequestPermissionParams)
_read_decoder = msgspec.json.Decoder(ReadTextFileParams)
_write_decoder = msgspec.json.Decoder(WriteTextFileParams)


#: Updates about the session rather than a prompt (agents send them between prompts, e.g.
#: claude-agent-acp's command list right after session/new): not "late", just not shown.
_SESSION_LEVEL = frozenset(
    {
        "available_commands_update",
        "config_option_update",
        "current_mode_update",
        "session_info_update",
        "usage_update",
    }
)
_kind_decoder = msgspec.json.Decoder(UpdateKind)


def _is_session_level(update: msgspec.Raw) -> bool:
    try:
        return _kind_decoder.decode(update).session_update in _SESSION_LEVEL
    except msgspec.DecodeError:
        return False


class _Prompt:
    """The one prompt in flight: its session, turn and translator."""

    def __init__(self, session_id: str, turn: TurnContext) -> None:
        self.session_id = session_id
        self.turn = turn
        self.translator = UpdateTranslator()
        self.answered = trio.Event()
        #: What the host was told so far: usage events are cumulative for the turn.
        self.usage = Usage()
        #: The agent's running session cost at this prompt's last usage update.
        self.cost_total: float | None = None


def choose_option(options: list[PermissionOption], allow: bool) -> str | None:
    """The agent's option matching the host's answer: once-options first."""
    wanted = ("allow_once", "allow_always") if allow else ("reject_once", "reject_always")
    for kind in wanted:
        for option in options:
            if option.kind == kind:
                return option.option_id
    return None


class AcpDriver(SessionFork, DriverBase):
    """Speak ACP to one agent; translate to hostd driver events."""

    name = DRIVER_NAME
    version = __version__

    def __init__(self, nursery: trio.Nursery) -> None:
        self._nursery = nursery
        self._opts = AcpOptions()
        self._init: Init | None = None
        self._agent_name = ""
        self._agent_config: AgentConfig | None = None
        self._source = Path(CONFIG_FILE)
        self._cwd = ""
        self._files: FileAccess | None = None
        self._agent: AgentProcess | None = None
        self._info: InitializeResult | None = None
        #: The ACP session this driver continues (token, or the id session/new gave).
        self._session_id: str | None = None
        #: `_session_id` is open in the running agent process.
        self._session_live = False
        #: The session saw a cancel: it must not take another prompt as it is.
        self._tainted = False
        #: The agent did not answer a cancel in time: restart it before the next prompt.
        self._broken = False
        #: Updates of a `session/load` replay are dropped while this is set.
        self._loading = False
        self._active: _Prompt | None = None
        self._session_lock = trio.Lock()
        self._deferred: list[Notice | Log | ResumeToken] = []
        self._drops: dict[str, int] = {}
        #: The agent process's running cost at the end of the last turn (None: fresh agent).
        self._cost_base: float | None = None
        self._malformed_in_a_row = 0

    # --- lifecycle --------------------------------------------------------------------------

    async def init(self, init: Init) -> Capabilities:
        # The agent starts at `Prewarm` or the first turn, not here: the handshake stays
        # fast and works without the agent installed (as the Claude Code driver does); a
        # missing command, a mute agent or another ACP version fail that first turn.
        self._configure(init)
        forked = False
        if init.fork_from is not None and not init.resume_token:
            forked = await self._fork_session(init.fork_from)  # starts the agent (see module)
        return Capabilities(
            inject_steering=False,
            compaction=False,
            resume=True,
            approvals=True,
            warm=True,
            fork_session=forked,
        )

    def _configure(self, init: Init) -> None:
        """Options, the agents file, the command and the working dir (plain file work)."""
        opts, unknown = parse_options(init.options)
        self._opts = opts
        self._init = init
        if unknown:
            self._deferred.append(
                Log(level="warning", message=f"ignored unknown acp options: {', '.join(unknown)}")
            )
        source = config_dir() / CONFIG_FILE
        agents = load_agents(source)
        self._agent_name, agent = select_agent(agents, opts.agent, source)
        self._agent_config = agent
        self._source = source
        cwd = Path(init.working_dir or os.getcwd()).resolve()
        cwd.mkdir(parents=True, exist_ok=True)
        self._cwd = str(cwd)
        self._files = FileAccess(cwd, opts.fs_max_bytes)
        if init.resume_token:
            self._session_id = init.resume_token

    async def prewarm(self) -> None:
        await self._ensure_session()

    async def close(self) -> None:
        agent, self._agent = self._agent, None
        if agent is not None:
            await agent.aclose()

    # --- the agent process ------------------------------------------------------------------

    async def _start_agent(self) -> None:
        opts = self._opts
        config = self._agent_config
        assert config is not None
        command = resolve_command(config.command, os.environ.get("PATH"))
        if command is None:
            raise DriverUnavailable(
                f"ACP agent {self._agent_name!r}: command {config.command!r} not found "
                f"(install it or fix its entry in {self._source})",
                driver=DRIVER_NAME,
            )
        agent = AgentProcess(
            self._agent_name,
            [command, *config.args],
            env=agent_env(config, os.environ),
            cwd=self._cwd,
            on_notification=self._on_notification,
            on_request=self._on_request,
            on_drop=self._on_drop,
            max_line=opts.max_message_bytes,
            stderr_lines=opts.stderr_tail_lines,
        )
        try:
            await agent.start(self._nursery)
        except AgentGone as exc:
            raise DriverUnavailable(exc.message, driver=DRIVER_NAME) from None
        name = self._agent_name
        params = InitializeParams(
            protocol_version=ACP_PROTOCOL_VERSION,
            client_capabilities=ClientCapabilities(
                fs=FsCapabilities(read_text_file=opts.fs, write_text_file=opts.fs),
                terminal=False,
            ),
            client_info={"name": "hostd", "version": __version__},
        )
        try:
            info = await self._initialize(agent, params)
        except BaseException:
            # Whatever stopped it (a timeout, a bad answer, a stop of the turn that started
            # it): the half-started agent and its process group go.
            await agent.aclose()
            raise
        self._agent = agent
        self._info = info
        self._cost_base = None
        self._session_live = False
        self._malformed_in_a_row = 0
        who = info.agent_info
        label = f"{who.name} {who.version}".strip() if who is not None else "an unnamed agent"
        self._deferred.append(
            Log(
                level="info", message=f"ACP agent {name!r} is {label} (ACP v{ACP_PROTOCOL_VERSION})"
            )
        )
        # For `hostd drivers`: the version each agent reported, without starting it there.
        await trio.to_thread.run_sync(remember_seen, data_dir() / SEEN_FILE, name, label)

    async def _initialize(self, agent: AgentProcess, params: InitializeParams) -> InitializeResult:
        """Send `initialize`; map every way it can fail to a driver error."""
        opts = self._opts
        name = self._agent_name
        try:
            with trio.fail_after(opts.initialize_timeout):
                raw = await agent.request("initialize", params)
            info = msgspec.json.decode(raw, type=InitializeResult)
        except trio.TooSlowError:
            raise DriverTimeout(
                f"the ACP agent {name!r} did not answer initialize within "
                f"{opts.initialize_timeout:g} s",
                driver=DRIVER_NAME,
                stderr_tail=agent.stderr_tail(),
            ) from None
        except AgentGone as exc:
            raise DriverCrashed(
                f"the ACP agent {name!r} exited before answering initialize",
                driver=DRIVER_NAME,
                exit_code=exc.exit_code,
                stderr_tail=exc.stderr_tail,
            ) from None
        except AgentRpcError as exc:
            raise DriverError(
                f"the ACP agent {name!r} refused initialize: {exc.message}", driver=DRIVER_NAME
            ) from None
        except msgspec.ValidationError as exc:
            raise DriverProtocolError(
                f"the ACP agent {name!r} answered initialize with an invalid result: {exc}",
                driver=DRIVER_NAME,
            ) from None
        if info.protocol_version != ACP_PROTOCOL_VERSION:
            raise VersionMismatch(
                f"the ACP agent {name!r} speaks ACP protocol version {info.protocol_version}; "
                f"this driver speaks version {ACP_PROTOCOL_VERSION}: use an agent release "
                f"for ACP v{ACP_PROTOCOL_VERSION}"
            )
        return info

    async def _restart_agent(self) -> None:
        agent, self._agent = self._agent, None
        if agent is not None:
            await agent.aclose()
        self._session_live = False
        await self._start_agent()

    def _agent_or_fail(self) -> AgentProcess:
        agent = self._agent
        if agent is None:
            raise DriverCrashed(f"the ACP agent {self._agent_name!r} is not running")
        return agent

    # --- the session ------------------------------------------------------------------------

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
                    NewSessionParams(cwd=self._cwd, mcp_servers=[], _meta=self._session_meta()),
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
        params = LoadSessionParams(session_id=session_id, cwd=self._cwd, mcp_servers=[])
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

    # --- turns ------------------------------------------------------------------------------

    async def run_turn(self, turn: TurnContext) -> TurnStatus | None:
        session_id = await self._ensure_session()
        for event in self._take_deferred(turn.turn_id):
            await turn.emit(event)
        agent = self._agent_or_fail()
        prompt = _Prompt(session_id, turn)
        self._active = prompt

        def detach() -> None:
            # Updates read after the prompt's answer are late: never part of this turn.
            if self._active is prompt:
                self._active = None

        try:
            try:
                raw = await agent.request(
                    "session/prompt",
                    PromptParams(
                        session_id=session_id, prompt=[TextBlock(text=prompt_text(turn.send))]
                    ),
                    on_answer=detach,
                )
            except AgentGone as exc:
                self._session_live = False
                raise self._crashed(exc, "during the turn") from None
            except AgentRpcError as exc:
                raise TurnFailed(
                    f"the ACP agent {self._agent_name!r} failed the prompt: {exc.message}",
                    driver=DRIVER_NAME,
                    stderr_tail=agent.stderr_tail(),
                ) from None
            finally:
                with trio.CancelScope(shield=True):
                    for out in prompt.translator.finish():
                        await self._deliver(turn, out)
            try:
                result = msgspec.json.decode(raw, type=PromptResult)
            except msgspec.ValidationError as exc:
                raise DriverProtocolError(
                    f"the ACP agent {self._agent_name!r} answered session/prompt with an "
                    f"invalid result: {exc}",
                    driver=DRIVER_NAME,
                ) from None
        except BaseException:
            if turn.interrupted or turn.cancel_scope.cancel_called:
                self._tainted = True
            raise
        finally:
            detach()
            prompt.answered.set()
            if prompt.cost_total is not None:
                self._cost_base = prompt.cost_total
        if result.usage is not None:
            u = result.usage
            prompt.usage = msgspec.structs.replace(
                prompt.usage,
                input_tokens=u.input_tokens,
                output_tokens=u.output_tokens,
                cache_read_tokens=u.cached_read_tokens or 0,
                cache_write_tokens=u.cached_write_tokens or 0,
            )
            await turn.emit(UsageEvent(turn_id=turn.turn_id, usage=prompt.usage))
        return await self._stop_status(turn, result.stop_reason)

    async def _stop_status(self, turn: TurnContext, reason: str) -> TurnStatus | None:
        if reason == "cancelled":
            # The prompt was answered: the agent is free, but the session saw a cancel.
            self._tainted = True
            return "stopped"
        if reason == "end_turn":
            return None
        if reason in ("max_tokens", "max_turn_requests"):
            await turn.emit(
                Notice(
                    code=reason,
                    message=f"the agent ended the turn early ({reason.replace('_', ' ')})",
                    turn_id=turn.turn_id,
                )
            )
            return None
        if reason == "refusal":
            raise TurnFailed(
                f"the ACP agent {self._agent_name!r} refused to continue", driver=DRIVER_NAME
            )
        await turn.emit(Log(level="warning", message=f"unknown ACP stop reason {reason!r}"))
        return None

    async def interrupt(self, turn: TurnContext) -> None:
        prompt = self._active
        agent = self._agent
        if prompt is None or prompt.turn is not turn or agent is None or not agent.alive:
            turn.cancel_scope.cancel()
            return
        self._tainted = True
        try:
            await agent.notify("session/cancel", SessionIdParams(prompt.session_id))
        except AgentGone:
            turn.cancel_scope.cancel()
            return
        with trio.move_on_after(self._opts.interrupt_grace):
            await prompt.answered.wait()
            return
        # No answer to the cancelled prompt: cut the turn; the agent may still be running it,
        # so it is restarted before the next prompt (never two prompts in flight).
        self._broken = True
        turn.cancel_scope.cancel()

    def _take_deferred(self, turn_id: str) -> list[Notice | Log | ResumeToken]:
        out, self._deferred = self._deferred, []
        return [
            Notice(code=e.code, message=e.message, turn_id=turn_id) if isinstance(e, Notice) else e
            for e in out
        ]

    async def _deliver(self, turn: TurnContext, out: Output, prompt: _Prompt | None = None) -> None:
        if isinstance(out, (TextDelta, ThinkingDelta, ToolCall, ToolResult)):
            await turn.chunk(out)
        elif isinstance(out, UsageEvent):
            if prompt is None:
                return
            # ACP agents report the session's running cost; the turn's is the difference.
            total = out.usage.cost_usd
            if self._cost_base is None or total < self._cost_base:
                self._cost_base = 0.0
            cost = max(total - self._cost_base, 0.0)
            prompt.cost_total = total
            prompt.usage = msgspec.structs.replace(prompt.usage, cost_usd=cost)
            await turn.emit(UsageEvent(turn_id=turn.turn_id, usage=prompt.usage))
        elif isinstance(out, Notice):
            await turn.emit(Notice(code=out.code, message=out.message, turn_id=turn.turn_id))
        else:
            await turn.emit(out)

    # --- what the agent sends -------------------------------------------------------------

    async def _dropped(self, reason: str, detail: str) -> None:
        """Count a dropped message; log the first few of each reason, then every 100th."""
        n = self._drops.get(reason, 0) + 1
        self._drops[reason] = n
        if n <= DROP_LOG_FIRST or n % DROP_LOG_EVERY == 0:
            message = f"acp: dropped {reason} from agent {self._agent_name!r} (#{n}): {detail}"
            print(message, file=sys.stderr)
            prompt = self._active
            if prompt is not None:
                await prompt.turn.emit(Log(level="warning", message=message[:2000]))

    async def _on_drop(self, dropped: Dropped) -> None:
        await self._dropped(f"{dropped.reason} message", f"{dropped.size} bytes: {dropped.detail}")
        if dropped.reason == "malformed":
            self._malformed_in_a_row += 1
            if self._malformed_in_a_row >= MAX_MALFORMED_IN_A_ROW:
                # An agent that writes only garbage will never answer: restart it.
                self._broken = True
                agent = self._agent
                if agent is not None:
                    self._nursery.start_soon(agent.aclose)

    async def _on_notification(self, method: str, params: msgspec.Raw) -> None:
        self._malformed_in_a_row = 0
        if method != "session/update":
            await self._dropped("notification", f"unsupported method {method!r}")
            return
        try:
            note = _notification_decoder.decode(params)
        except msgspec.DecodeError as exc:
            await self._dropped("malformed update", str(exc))
            return
        if note.session_id != self._session_id:
            await self._dropped("update for an unknown session", repr(note.session_id[:80]))
            return
        if self._loading:
            return  # session/load replays the conversation hostd already has
        prompt = self._active
        if prompt is None or prompt.session_id != note.session_id:
            if not _is_session_level(note.update):
                await self._dropped("late update", "no prompt of this session is running")
            return
        for out in prompt.translator.feed(note.update):
            await self._deliver(prompt.turn, out, prompt)

    async def _on_request(self, method: str, params: msgspec.Raw) -> Any:
        self._malformed_in_a_row = 0
        if method == "session/request_permission":
            return await self._permission(params)
        if method in ("fs/read_text_file", "fs/write_text_file") and self._opts.fs:
            return await self._file_request(method, params)
        await self._dropped("request", f"unsupported method {method!r} (answered: not found)")
        raise RequestRefused(METHOD_NOT_FOUND, f"hostd's ACP client does not support {method}")

    async def _permission(self, params: msgspec.Raw) -> Any:
        try:
            req = _permission_decoder.decode(params)
        except msgspec.DecodeError as exc:
            raise RequestRefused(INVALID_PARAMS, f"invalid permission request: {exc}") from None
        prompt = self._active
        if prompt is None or prompt.session_id != req.session_id or prompt.turn.interrupted:
            return PERMISSION_CANCELLED
        turn = prompt.turn
        call = req.tool_call
        for out in prompt.translator.announce(call.tool_call_id, call):
            await self._deliver(turn, out)
        tool = prompt.translator.tool_name(call.tool_call_id) or call.title or "tool"
        tool_input = call.raw_input if isinstance(call.raw_input, dict) else {}
        options = [
            ApprovalOption(id=o.option_id, label=o.name or o.option_id, kind=o.kind)
            for o in req.options
        ]
        timeout = self._opts.approval_timeout
        with trio.move_on_after(timeout if timeout > 0 else float("inf")) as scope:
            answer = await turn.request_approval(
                tool, dict(tool_input), call.title or tool, options=options
            )
        if scope.cancelled_caught:
            option = choose_option(req.options, allow=False)
            return permission_selected(option) if option else PERMISSION_CANCELLED
        if turn.interrupted:
            return PERMISSION_CANCELLED
        chosen = {o.option_id for o in req.options}
        if answer.option_id in chosen:
            return permission_selected(answer.option_id)
        option = choose_option(req.options, allow=answer.allow)
        if option is None:
            return PERMISSION_CANCELLED
        return permission_selected(option)

    async def _file_request(self, method: str, params: msgspec.Raw) -> Any:
        files = self._files
        assert files is not None
        try:
            if method == "fs/read_text_file":
                read = _read_decoder.decode(params)
                self._check_session(read.session_id)
                text = await trio.to_thread.run_sync(files.read, read.path, read.line, read.limit)
                return {"content": text}
            write = _write_decoder.decode(params)
            self._check_session(write.session_id)
            await trio.to_thread.run_sync(files.write, write.path, write.content)
            return None
        except msgspec.DecodeError as exc:
            raise RequestRefused(INVALID_PARAMS, f"invalid {method} params: {exc}") from None
        except ClientMethodError as exc:
            raise RequestRefused(exc.code, exc.message) from None

    def _check_session(self, session_id: str) -> None:
        if session_id != self._session_id:
            raise RequestRefused(INVALID_PARAMS, f"unknown session {session_id!r}")


def main() -> None:
    """Entry point: `python -m hostd_acp`. Keeps a nursery for the agent's reader tasks."""
    from hostd_protocol.driver_harness import serve_driver

    logging.basicConfig(
        stream=sys.stderr,
        level=os.environ.get("HOSTD_ACP_LOG_LEVEL", "WARNING").upper(),
        format="%(name)s: %(levelname)s: %(message)s",
    )
    frames_fd = os.dup(1)
    os.dup2(2, 1)  # stray prints land in the stderr tail, never in the frame channel
    sys.stdout = sys.stderr

    async def serve() -> int:
        stdin = trio.lowlevel.FdStream(os.dup(0))
        stdout = trio.lowlevel.FdStream(frames_fd)
        async with stdin, stdout, trio.open_nursery() as nursery:
            driver = AcpDriver(nursery)
            try:
                return await serve_driver(driver, stdin, stdout)
            finally:
                with trio.CancelScope(shield=True):
                    await driver.close()
                nursery.cancel_scope.cancel()

    sys.exit(int(trio.run(serve)))
