"""The Claude Code driver's SDK callbacks: steering hooks and tool permission.

They run in the SDK's tasks while a turn runs: PreToolUse / PostToolUse hooks of the
top-level agent hand pending steers to the model as `additionalContext` (a sub-agent's tool
gets none: its context would not reach the top-level model), and `can_use_tool` asks the
host for approval and waits (an interrupt denies; `approval_timeout` bounds the wait; a
wait that ends without an answer, also when the SDK cancels the callback because the CLI
took the question back or died, closes the host's approval for every window).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import trio

from hostd_claude_code.config import ClaudeCodeOptions
from hostd_claude_code.prompt import format_steers
from hostd_protocol.driver_harness import TurnContext

if TYPE_CHECKING:
    from claude_agent_sdk import PermissionResult, ToolPermissionContext

__all__ = ["SdkCallbacks"]


class SdkCallbacks:
    """The callbacks of `ClaudeCodeDriver` (a mixin: one concept, kept apart)."""

    _turn: TurnContext | None
    _opts: ClaudeCodeOptions

    async def _pre_tool_use(
        self, input_data: Any, tool_use_id: str | None, context: Any
    ) -> dict[str, Any]:
        return await self._steer_hook("PreToolUse", input_data)

    async def _post_tool_use(
        self, input_data: Any, tool_use_id: str | None, context: Any
    ) -> dict[str, Any]:
        return await self._steer_hook("PostToolUse", input_data)

    async def _steer_hook(self, event: str, input_data: Any) -> dict[str, Any]:
        turn = self._turn
        if turn is None or turn.interrupted or not turn.has_pending_steers:
            return {}
        if isinstance(input_data, dict) and input_data.get("agent_id"):
            return {}  # a sub-agent's tool: its context would not reach the top-level model
        steers = await turn.take_steers()
        if not steers:
            return {}
        return {
            "hookSpecificOutput": {
                "hookEventName": event,
                "additionalContext": format_steers(steers),
            }
        }

    async def _can_use_tool(
        self, tool_name: str, tool_input: dict[str, Any], ctx: ToolPermissionContext
    ) -> PermissionResult:
        from claude_agent_sdk import PermissionResultAllow, PermissionResultDeny

        turn = self._turn
        if turn is None or turn.interrupted:
            return PermissionResultDeny(message="The turn was stopped.", interrupt=True)
        description = ctx.title or ctx.description or ctx.decision_reason or ""
        timeout = self._opts.approval_timeout

        def why_withdrawn() -> str:  # the reason every window sees for the closed approval
            if scope.cancel_called:
                return f"no answer within {timeout:g} s (the claude-code approval_timeout)"
            # The SDK cancels the callback: the CLI took the question back, or it ended.
            return "Claude Code withdrew its permission request"

        with trio.move_on_after(timeout if timeout > 0 else float("inf")) as scope:
            answer = await turn.request_approval(
                tool_name, dict(tool_input), description, why_withdrawn=why_withdrawn
            )
        if scope.cancelled_caught:
            return PermissionResultDeny(
                message=f"No answer to the permission request within {timeout:g} s."
            )
        if answer.allow:
            return PermissionResultAllow()
        return PermissionResultDeny(
            message=answer.reason or "The user denied this tool call.",
            interrupt=turn.interrupted,
        )
