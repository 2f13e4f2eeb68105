"""The Claude Code driver: one `ClaudeSDKClient` (one claude CLI process) per driver process.

The harness (`hostd_protocol.driver_harness`) owns the frame loop, one-turn-at-a-time, the
steering and approval bookkeeping; this module connects the SDK to it:

- `prewarm` (or the first turn) imports the SDK and connects the client: the CLI is spawned
  and initialised, so a later `Send` only writes the prompt. Connecting is single-flight.
- A turn writes the prompt with `client.query()` and reads SDK messages until the turn's
  `ResultMessage`; `translate.Translator` turns them into chunks and events.
- PreToolUse / PostToolUse hooks of the top-level agent hand pending steers to the model as
  `additionalContext`; the next top-level `message_start` reports the steer boundary.
- `can_use_tool` asks the host for approval and waits; an interrupt denies.
- `interrupt` uses the CLI's own interrupt, so the partial answer ends as `stopped` and the
  session stays usable; if the CLI does not finish the turn within `interrupt_grace`, the
  turn is cut and the client replaced (resuming the same session) before the next send.
- The session id is the resume token. A stored token that no longer resumes (the transcript
  is gone) starts a fresh session once and says so with `Notice(code="resume_failed")`.
- A CLI that dies is reported with its exit code and the tail of its stderr; the next turn
  starts a new CLI that resumes the session.
- Vendor fork and rewind (`fork.py`): an `Init.fork_from` the CLI can find starts the
  session as the CLI's own copy of it (`fork_session`, at a checkpoint with
  `resume_session_at`); each turn ends with a `Checkpoint` (session id @ the uuid of its last
  top-level assistant message).
"""

from __future__ import annotations

import collections
import logging
import os
import shutil
import sys
import uuid
from typing import TYPE_CHECKING, Any, cast

import msgspec
import trio

from hostd_claude_code import __version__
from hostd_claude_code.config import (
    PERMISSION_MODES,
    ClaudeCodeOptions,
    CliPaths,
    cli_env,
    cli_paths,
    parse_options,
)
from hostd_claude_code.credentials import LOGIN_FIX, is_login_failure
from hostd_claude_code.fork import ForkPlan, checkpoint_token, prepare
from hostd_claude_code.prompt import query_of
from hostd_claude_code.sdk_callbacks import SdkCallbacks
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
from hostd_protocol.driver_messages import Checkpoint, Init, Log, Notice
from hostd_protocol.errors import AuthRequired, InvalidArgument

if TYPE_CHECKING:
    from claude_agent_sdk import (
        ClaudeSDKClient,
        HookCallback,
    )

    from hostd_claude_code.translate import Translator

log = logging.getLogger("hostd_claude_code")

DRIVER_NAME = "claude-code"

CAPABILITIES = Capabilities(
    inject_steering=True,
    compaction=True,
    resume=True,
    approvals=True,
    warm=True,
    fork_session=True,
    rewind_session=True,
)

#: Text the CLI prints when `--resume` names a session it has no transcript for.
RESUME_MISSING_MARKERS = ("No conversation found", "no conversation found")


class _ResumeMissing(Exception):
    """The CLI has no transcript for the session we asked it to resume."""


class ClaudeCodeDriver(SdkCallbacks, DriverBase):
    """Translate claude-agent-sdk into hostd driver events."""

    name = DRIVER_NAME
    version = __version__

    def __init__(self) -> None:
        self._opts = ClaudeCodeOptions()
        self._init: Init | None = None
        self._paths: CliPaths | None = None
        #: The session this driver continues (stored token, or the id it chose / was told).
        self._session_id: str | None = None
        #: Whether `_session_id` may have a transcript the CLI can resume (a prompt was sent).
        self._resumable = False
        #: Whether losing `_session_id` loses conversation the user has seen (it was stored by
        #: the host, or a turn of it completed): only then is a failed resume a `Notice`.
        self._has_history = False
        #: The session to start as a copy of (`Init.fork_from`), until the CLI reported the
        #: copy's own id.
        self._fork: ForkPlan | None = None
        #: The session id last reported to the host as a `ResumeToken`.
        self._announced: str | None = None
        #: The slash command names last reported to the host (`CommandsEvent`).
        self._commands: tuple[str, ...] | None = None
        self._client: ClaudeSDKClient | None = None
        self._messages: Any = None  # the client's receive_messages() generator
        self._client_ok = False
        #: What the running CLI was last told (per-send overrides switch it).
        self._cli_model: str | None = None
        self._cli_mode: str = "default"
        #: The CLI process's running cost total at the end of its last turn.
        self._cost_base = 0.0
        self._connect_lock = trio.Lock()
        self._turn: TurnContext | None = None
        self._query_sent = False
        self._turn_over = trio.Event()
        self._turn_over.set()
        self._stderr: collections.deque[str] = collections.deque(maxlen=40)
        self._deferred: list[Notice | Log] = []

    # --- lifecycle --------------------------------------------------------------------------

    async def init(self, init: Init) -> Capabilities:
        opts, unknown = parse_options(init.options)
        self._opts = opts
        self._init = init
        self._stderr = collections.deque(maxlen=max(1, opts.stderr_tail_lines))
        self._paths = cli_paths(init.working_dir, opts, init.state_dir)
        if init.resume_token:
            self._session_id = init.resume_token
            self._resumable = True
            self._has_history = True
        source = init.fork_from
        if source is not None and not init.resume_token:
            config = cli_env(self._paths, opts)["CLAUDE_CONFIG_DIR"]
            self._fork = await trio.to_thread.run_sync(prepare, source, self._paths, config, opts)
            self._has_history = self._fork is not None
        # Answering a source, `fork_session` says whether this session is its copy.
        caps = msgspec.structs.replace(
            CAPABILITIES, fork_session=source is None or self._fork is not None
        )
        if unknown:
            msg = f"ignored unknown claude-code options: {', '.join(unknown)}"
            print(f"{DRIVER_NAME}: {msg}", file=sys.stderr)
            self._deferred.append(Log(level="warning", message=msg))
        return msgspec.structs.replace(caps, approvals=False) if self._bypass else caps

    @property
    def _bypass(self) -> bool:
        return self._opts.permission_mode == "bypassPermissions"

    async def prewarm(self) -> None:
        await self._ensure_client()
        # What the first turn would import: a prewarmed send pays only for the turn.
        import hostd_claude_code.translate  # noqa: F401

    async def close(self) -> None:
        with trio.CancelScope(shield=True):
            await self._drop_client()
        if self._paths is not None and self._paths.private_tmpdir:
            shutil.rmtree(self._paths.tmpdir, ignore_errors=True)

    # --- connecting -------------------------------------------------------------------------

    async def _ensure_client(self) -> ClaudeSDKClient:
        """The connected client; connects (single-flight) when there is none or it broke."""
        async with self._connect_lock:
            if self._client is not None and self._client_ok and self._cli_alive():
                return self._client
            await self._drop_client()
            if self._fork is not None:
                return await self._connect_fork(self._fork)
            if self._session_id is not None and self._resumable:
                try:
                    return await self._connect(resume=self._session_id)
                except _ResumeMissing as exc:
                    lost = self._session_id
                    if self._has_history:
                        self._deferred.append(
                            Notice(
                                code="resume_failed",
                                message=(
                                    f"Could not resume the Claude Code session {lost}: {exc}. "
                                    "Started a new session; the model does not remember the "
                                    "earlier conversation."
                                ),
                            )
                        )
                    else:
                        # A first turn cut before the CLI wrote anything: nothing was lost.
                        self._deferred.append(
                            Log(level="info", message=f"session {lost} had no transcript yet")
                        )
                    self._session_id = None
                    self._resumable = False
                    self._has_history = False
            if self._session_id is None:
                self._session_id = str(uuid.uuid4())
            return await self._connect(session_id=self._session_id)

    async def _connect_fork(self, plan: ForkPlan) -> ClaudeSDKClient:
        """Start the session as the CLI's copy of `plan`'s session."""
        new_id = str(uuid.uuid4())
        self._session_id = None if plan.at else new_id
        try:
            return await self._connect(fork=plan.options(new_id))
        except _ResumeMissing as exc:
            self._fork = None
            self._deferred.append(
                Notice(
                    code="resume_failed",
                    message=f"Could not copy the Claude Code session {plan.session_id}: {exc}. "
                    "Started a new session; the model does not remember the earlier "
                    "conversation.",
                )
            )
            self._session_id = new_id
            return await self._connect(session_id=new_id)

    async def _connect(
        self,
        *,
        resume: str | None = None,
        session_id: str | None = None,
        fork: dict[str, Any] | None = None,
    ) -> ClaudeSDKClient:
        from claude_agent_sdk import ClaudeSDKClient, ProcessError

        options = self._options(resume=resume, session_id=session_id, fork=fork)
        client = ClaudeSDKClient(options)
        self._stderr.clear()
        try:
            await client.connect()
        except ProcessError as exc:
            text = f"{exc}\n" + "\n".join(self._stderr)
            if (resume or fork) and any(m in text for m in RESUME_MISSING_MARKERS):
                raise _ResumeMissing(self._first_line(exc)) from None
            detail = self._first_line(exc)
            suffix = "" if detail.startswith("Command failed with exit code") else f": {detail}"
            raise TurnFailed(
                f"the Claude CLI failed to start{suffix}",
                driver=DRIVER_NAME,
                exit_code=exc.exit_code,
                stderr_tail=self.stderr_tail(),
            ) from None
        except Exception as exc:
            raise TurnFailed(
                f"could not connect to the Claude CLI: {type(exc).__name__}: {exc}",
                driver=DRIVER_NAME,
                stderr_tail=self.stderr_tail(),
            ) from None
        self._client = client
        assert self._init is not None
        self._cli_model = self._init.model or None
        self._cli_mode = self._opts.permission_mode
        self._cost_base = 0.0
        self._messages = client.receive_messages()
        self._client_ok = True
        return client

    def _options(
        self, *, resume: str | None, session_id: str | None, fork: dict[str, Any] | None
    ) -> Any:
        from claude_agent_sdk import ClaudeAgentOptions, HookMatcher

        init = self._init
        paths = self._paths
        assert init is not None and paths is not None, "init must run first"
        opts = self._opts
        extra_args: dict[str, str | None] = {}
        if opts.debug:
            extra_args["debug-to-stderr"] = None
        # Always Claude Code's own system prompt (tools, environment, conventions): the SDK
        # turns `None` into `--system-prompt ""`, a bare agent that is not Claude Code.
        system_prompt: dict[str, str] = {"type": "preset", "preset": "claude_code"}
        if init.system_prompt:
            system_prompt["append"] = init.system_prompt
        kwargs: dict[str, Any] = {"resume": resume, "session_id": session_id, **(fork or {})}
        if opts.cli_path:
            kwargs["cli_path"] = opts.cli_path
        return ClaudeAgentOptions(
            cwd=str(paths.cwd),
            env=cli_env(paths, opts),
            model=init.model or None,
            system_prompt=system_prompt,
            permission_mode=opts.permission_mode,
            # bypassPermissions never asks; a callback would only draw an SDK warning.
            can_use_tool=None if self._bypass else self._can_use_tool,
            include_partial_messages=True,
            hooks={
                "PreToolUse": [
                    HookMatcher(matcher=None, hooks=[cast("HookCallback", self._pre_tool_use)])
                ],
                "PostToolUse": [
                    HookMatcher(matcher=None, hooks=[cast("HookCallback", self._post_tool_use)])
                ],
            },
            stderr=self._on_stderr,
            allowed_tools=list(opts.allowed_tools),
            disallowed_tools=list(opts.disallowed_tools),
            max_turns=opts.max_turns,
            setting_sources=list(opts.setting_sources)
            if opts.setting_sources is not None
            else None,
            add_dirs=list(opts.add_dirs),
            effort=opts.effort,
            extra_args=extra_args,
            **kwargs,
        )

    async def _drop_client(self) -> None:
        client, self._client = self._client, None
        messages, self._messages = self._messages, None
        self._client_ok = False
        if messages is not None:
            with trio.move_on_after(2):
                try:
                    await messages.aclose()
                except Exception:
                    log.debug("closing the message stream failed", exc_info=True)
        if client is not None:
            with trio.move_on_after(10):
                try:
                    await client.disconnect()
                except Exception:
                    log.debug("disconnect failed", exc_info=True)

    def _cli_process(self) -> Any:
        # Private SDK attributes, read defensively: only used for the CLI's pid/exit code.
        transport = getattr(self._client, "_transport", None)
        return getattr(transport, "_process", None)

    def _cli_alive(self) -> bool:
        process = self._cli_process()
        return process is None or getattr(process, "returncode", None) is None

    def cli_pid(self) -> int | None:
        """The pid of the running claude CLI, if any (for diagnostics and tests)."""
        process = self._cli_process()
        pid = getattr(process, "pid", None)
        return pid if isinstance(pid, int) else None

    def _exit_code(self) -> int | None:
        code = getattr(self._cli_process(), "returncode", None)
        return code if isinstance(code, int) else None

    # --- stderr -----------------------------------------------------------------------------

    def _on_stderr(self, line: str) -> None:
        line = line.rstrip("\n")
        if len(line) > 2000:
            line = line[:2000] + "..."
        self._stderr.append(line)
        print(f"claude: {line}", file=sys.stderr)

    def stderr_tail(self) -> str:
        return "\n".join(self._stderr)

    @classmethod
    def _exit_reason(cls, code: int | None, exc: BaseException) -> str:
        if code is not None and code < 0:
            return f"the Claude CLI was killed by signal {-code} during the turn"
        detail = cls._first_line(exc)
        # The SDK's generic text only repeats the exit code, which DriverError adds anyway.
        suffix = "" if detail.startswith("Command failed with exit code") else f": {detail}"
        if code is not None:
            return f"the Claude CLI exited during the turn{suffix}"
        return f"the Claude CLI failed during the turn{suffix}"

    @staticmethod
    def _first_line(exc: BaseException) -> str:
        text = str(exc).strip()
        return text.splitlines()[0] if text else type(exc).__name__

    # --- turns ------------------------------------------------------------------------------

    async def run_turn(self, turn: TurnContext) -> TurnStatus | None:
        from hostd_claude_code.translate import MESSAGE_START, Translator, result_error_message

        self._turn = turn
        translator: Translator | None = None
        self._query_sent = False
        self._turn_over = trio.Event()
        try:
            for event in self._take_deferred(turn.turn_id):
                await turn.emit(event)
            client = await self._ensure_client()
            for event in self._take_deferred(turn.turn_id):
                await turn.emit(event)
            if turn.interrupted:
                return "stopped"
            translator = Translator(
                turn.turn_id,
                manual_compaction=turn.send.text.lstrip().startswith("/compact"),
                session_id=self._announced,
                commands=self._commands,
                cost_base=self._cost_base,
                model_calls=turn.reports_model_calls,
            )
            client = await self._send_prompt(client, turn)
            try:
                await self._pump(turn, translator, MESSAGE_START)
            finally:
                with trio.CancelScope(shield=True):
                    if translator.session_id is not None and translator.last_uuid:
                        token = checkpoint_token(translator.session_id, translator.last_uuid)
                        await turn.emit(Checkpoint(turn_id=turn.turn_id, token=token))
                    for out in translator.finish():
                        await self._deliver(turn, out, MESSAGE_START)
                    self._commands = translator.commands
                    if translator.session_id is not None:
                        self._announced = translator.session_id
                        self._session_id = translator.session_id
                        self._fork = None  # the copy is made: from now on, resume it
            result = translator.result
            assert result is not None
            self._has_history = True
            if result.total_cost_usd is not None:
                self._cost_base = float(result.total_cost_usd)
            if not result.is_error:
                return None
            if turn.interrupted:
                return "stopped"
            message = result_error_message(result)
            if is_login_failure(message):
                raise AuthRequired(
                    f"Claude Code has no usable login ({message.splitlines()[0]}): {LOGIN_FIX}",
                    driver=DRIVER_NAME,
                    details={"fix": LOGIN_FIX},
                )
            raise TurnFailed(message, driver=DRIVER_NAME)
        except BaseException:
            if self._query_sent and (translator is None or translator.result is None):
                # Cancelled or failed mid-turn: the client may still hold this turn's
                # messages, so the next turn gets a fresh CLI (resuming the session).
                self._client_ok = False
            raise
        finally:
            self._turn = None
            self._turn_over.set()

    def _take_deferred(self, turn_id: str) -> list[Notice | Log]:
        out, self._deferred = self._deferred, []
        return [
            Notice(code=e.code, message=e.message, turn_id=turn_id) if isinstance(e, Notice) else e
            for e in out
        ]

    async def _send_prompt(self, client: ClaudeSDKClient, turn: TurnContext) -> ClaudeSDKClient:
        """Write the prompt; a CLI that died between turns is replaced once."""
        from claude_agent_sdk import CLIConnectionError

        await self._apply_turn_options(client, turn)
        self._query_sent = True
        # From here the CLI may write a transcript for the session id: a later connect must
        # resume it (a preset `session_id` that already exists is refused).
        self._resumable = True
        try:
            await client.query(query_of(turn.send))
        except CLIConnectionError:
            self._client_ok = False
            client = await self._ensure_client()
            for event in self._take_deferred(turn.turn_id):
                await turn.emit(event)
            await self._apply_turn_options(client, turn)
            await client.query(query_of(turn.send))
        return client

    async def _apply_turn_options(self, client: ClaudeSDKClient, turn: TurnContext) -> None:
        """Per-send overrides (`Send.options`): `model` and `permission_mode` for this turn.

        The CLI keeps what it is told, so a turn without an override switches back to the
        session's own setting.
        """
        assert self._init is not None
        options = turn.send.options
        model = options.get("model") or self._init.model or None
        if not isinstance(model, str | None):
            raise InvalidArgument(f"invalid claude-code send option: model={model!r}")
        mode = options.get("permission_mode") or self._opts.permission_mode
        if mode not in PERMISSION_MODES:
            raise InvalidArgument(f"invalid claude-code send option: permission_mode={mode!r}")
        if model != self._cli_model:
            await client.set_model(model)
            self._cli_model = model
        if mode != self._cli_mode:
            await client.set_permission_mode(mode)
            self._cli_mode = mode

    async def _pump(self, turn: TurnContext, translator: Translator, marker: object) -> None:
        """Read SDK messages until the turn's result."""
        from claude_agent_sdk import ProcessError

        messages = self._messages
        while translator.result is None:
            try:
                msg = await messages.__anext__()
            except StopAsyncIteration:
                self._client_ok = False
                raise TurnFailed(
                    "the Claude CLI ended the session without finishing the turn",
                    driver=DRIVER_NAME,
                    exit_code=self._exit_code(),
                    stderr_tail=self.stderr_tail(),
                ) from None
            except ProcessError as exc:
                self._client_ok = False
                code = exc.exit_code if exc.exit_code is not None else self._exit_code()
                raise TurnFailed(
                    self._exit_reason(code, exc),
                    driver=DRIVER_NAME,
                    exit_code=code,
                    stderr_tail=self.stderr_tail(),
                ) from None
            except Exception as exc:
                self._client_ok = False
                raise TurnFailed(
                    f"reading from the Claude CLI failed: {type(exc).__name__}: {exc}",
                    driver=DRIVER_NAME,
                    exit_code=self._exit_code(),
                    stderr_tail=self.stderr_tail(),
                ) from None
            for out in translator.feed(msg):
                await self._deliver(turn, out, marker)

    @staticmethod
    async def _deliver(turn: TurnContext, out: Any, marker: object) -> None:
        if out is marker:
            await turn.message_start()
        elif isinstance(out, (TextDelta, ThinkingDelta, ToolCall, ToolResult, PlanChunk)):
            await turn.chunk(out)
        else:
            await turn.emit(out)

    async def interrupt(self, turn: TurnContext) -> None:
        client = self._client
        if client is None or not self._query_sent or not self._client_ok:
            turn.cancel_scope.cancel()
            return
        try:
            with trio.fail_after(self._opts.interrupt_grace):
                await client.interrupt()
        except Exception as exc:
            log.warning("interrupt failed (%s); cutting the turn", exc)
            turn.cancel_scope.cancel()
            return
        with trio.move_on_after(self._opts.interrupt_grace):
            await self._turn_over.wait()
            return
        # The CLI did not end the turn: cut it; the next turn starts a fresh CLI (resumed).
        turn.cancel_scope.cancel()


def main() -> None:
    """Entry point: `python -m hostd_claude_code`."""
    from hostd_protocol.driver_harness import run_driver

    logging.basicConfig(
        stream=sys.stderr,
        level=os.environ.get("HOSTD_CLAUDE_LOG_LEVEL", "WARNING").upper(),
        format="%(name)s: %(levelname)s: %(message)s",
    )
    run_driver(ClaudeCodeDriver())
