"""What the ACP agent sends `AcpDriver` besides answers: `session/update` notifications
(chunks and notices of the prompt in flight; updates for another session, or when no prompt
of ours runs, are dropped and counted, never given to the next turn), permission requests
(a hostd approval; the host's answer picks the agent's option), file requests (`fs/*`, when
enabled), and malformed lines (an agent that writes only garbage is restarted).

A mixin of `AcpDriver` (`hostd_acp.driver`): one concept, kept apart.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import msgspec
import trio

from hostd_acp.agent_process import AgentProcess
from hostd_acp.client_methods import ClientMethodError, FileAccess
from hostd_acp.config import AcpOptions
from hostd_acp.jsonrpc import INVALID_PARAMS, METHOD_NOT_FOUND, Dropped
from hostd_acp.rpc_peer import RequestRefused, on_withdraw
from hostd_acp.schema import (
    PERMISSION_CANCELLED,
    PermissionOption,
    ReadTextFileParams,
    RequestPermissionParams,
    SessionNotification,
    UpdateKind,
    WriteTextFileParams,
    permission_selected,
)
from hostd_acp.translate import Output, UpdateTranslator, commands_event
from hostd_protocol.common import ApprovalOption, Usage
from hostd_protocol.driver_harness import TurnContext
from hostd_protocol.driver_messages import DriverEvent, Log

__all__ = ["AgentMessages", "choose_option"]

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


def _kind_of(update: msgspec.Raw) -> str:
    try:
        return _kind_decoder.decode(update).session_update
    except msgspec.DecodeError:
        return ""


def _is_session_level(update: msgspec.Raw) -> bool:
    return _kind_of(update) in _SESSION_LEVEL


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


class AgentMessages:
    """The agent's notifications and requests to us (see the module docstring)."""

    _nursery: trio.Nursery
    _agent_name: str
    _opts: AcpOptions
    _files: FileAccess | None
    _agent: AgentProcess | None
    _session_id: str | None
    _broken: bool
    _loading: bool
    _active: _Prompt | None
    _drops: dict[str, int]
    _malformed_in_a_row: int

    if TYPE_CHECKING:  # provided by AcpDriver (and its DriverBase)

        async def emit(self, event: DriverEvent) -> None: ...

        async def _deliver(
            self, turn: TurnContext, out: Output, prompt: _Prompt | None = None
        ) -> None: ...

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
        known = self._session_id
        if _kind_of(note.update) == "available_commands_update" and known in (
            None,
            note.session_id,
        ):
            # Any time, also between prompts. Agents send it right after answering
            # session/new, so it can be read before the answer's session id is stored.
            await self.emit(commands_event(note.update))
            return
        if note.session_id != known:
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
        # The agent may take its question back (`$/cancel_request`): the approval closes
        # for every window and the agent gets the method's own `cancelled` outcome.
        withdrawal = trio.CancelScope()
        on_withdraw(withdrawal.cancel)

        def why_withdrawn() -> str:  # the reason every window sees
            if withdrawal.cancel_called:
                return "the agent withdrew its permission request"
            if scope.cancel_called:
                return f"no answer within {timeout:g} s (the acp driver's approval_timeout)"
            return "the agent's request ended"

        with withdrawal, trio.move_on_after(timeout if timeout > 0 else float("inf")) as scope:
            answer = await turn.request_approval(
                tool,
                dict(tool_input),
                call.title or tool,
                options=options,
                why_withdrawn=why_withdrawn,
            )
        if withdrawal.cancelled_caught:
            return PERMISSION_CANCELLED
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
