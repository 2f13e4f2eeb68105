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

The ACP session (open, resume, model) is `hostd_acp.session.AcpSession`; what the agent sends
(updates, permission and file requests, drops) is `hostd_acp.agent_messages.AgentMessages`;
both are mixed in, like `hostd_acp.session_fork.SessionFork`.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import msgspec
import trio

from hostd_acp import DRIVER_NAME, __version__
from hostd_acp.agent_messages import AgentMessages, _Prompt
from hostd_acp.agent_process import AgentGone, AgentProcess, AgentRpcError
from hostd_acp.client_methods import FileAccess
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
from hostd_acp.schema import (
    ACP_PROTOCOL_VERSION,
    ClientCapabilities,
    FsCapabilities,
    ImageBlock,
    InitializeParams,
    InitializeResult,
    PromptParams,
    PromptResult,
    SessionIdParams,
    TextBlock,
)
from hostd_acp.session import AcpSession
from hostd_acp.session_fork import SessionFork, prompt_text
from hostd_acp.translate import Output
from hostd_protocol.common import (
    Capabilities,
    PlanChunk,
    TextDelta,
    ThinkingDelta,
    ToolCall,
    ToolResult,
    TurnStatus,
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


class AcpDriver(AcpSession, AgentMessages, SessionFork, DriverBase):
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

    # --- turns ------------------------------------------------------------------------------

    def _prompt_blocks(self, turn: TurnContext) -> list[TextBlock | ImageBlock]:
        """The prompt: the message's images as ACP image blocks, then its text. An agent
        whose `promptCapabilities.image` is false fails the turn, saying so (never a turn
        that silently leaves the images out)."""
        images = turn.send.attachments
        if images and not (self._info and self._info.agent_capabilities.prompt_capabilities.image):
            raise TurnFailed(
                f"the ACP agent {self._agent_name!r} takes no images (its promptCapabilities "
                "say so); send the message without them",
                driver=DRIVER_NAME,
            )
        blocks: list[TextBlock | ImageBlock] = [
            ImageBlock(mime_type=a.media_type, data=a.data) for a in images
        ]
        return [*blocks, TextBlock(text=prompt_text(turn.send))]

    async def run_turn(self, turn: TurnContext) -> TurnStatus | None:
        session_id = await self._ensure_session()
        for event in self._take_deferred(turn.turn_id):
            await turn.emit(event)
        agent = self._agent_or_fail()
        blocks = self._prompt_blocks(turn)
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
                    PromptParams(session_id=session_id, prompt=blocks),
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
        if isinstance(out, (TextDelta, ThinkingDelta, ToolCall, ToolResult, PlanChunk)):
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

def main() -> None:
    """Entry point: `python -m hostd_acp`. The agent's reader tasks live in the process's
    nursery (`run_driver`)."""
    from hostd_protocol.driver_harness import run_driver

    logging.basicConfig(
        stream=sys.stderr,
        level=os.environ.get("HOSTD_ACP_LOG_LEVEL", "WARNING").upper(),
        format="%(name)s: %(levelname)s: %(message)s",
    )
    run_driver(lambda process: AcpDriver(process.nursery))
