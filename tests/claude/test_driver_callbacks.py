"""The driver's SDK callbacks (steering hooks, can_use_tool) against a real TurnContext, without
the CLI: what they return to the CLI and what they report to the host."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

pytest.importorskip("claude_agent_sdk")

from claude_agent_sdk import (
    PermissionResultAllow,
    PermissionResultDeny,
    ToolPermissionContext,
)

from hostd_claude_code.driver import CAPABILITIES, ClaudeCodeDriver
from hostd_claude_code.prompt import format_steers
from hostd_protocol.driver_harness import TurnContext
from hostd_protocol.driver_messages import (
    ApprovalRequest,
    ApprovalResponse,
    ApprovalWithdrawn,
    Redirect,
    Send,
    SteerInjected,
)


class FakeHarness:
    host_takes_withdrawals = True  # a host of protocol 1.7

    def __init__(self) -> None:
        self.events: list[Any] = []

    async def emit(self, event: Any) -> None:
        self.events.append(event)


def make_turn(driver: ClaudeCodeDriver) -> tuple[TurnContext, FakeHarness]:
    harness = FakeHarness()
    turn = TurnContext(harness, Send(turn_id="t1", text="hi"), CAPABILITIES)  # type: ignore[arg-type]
    driver._turn = turn
    return turn, harness


def steer(steer_id: str, text: str) -> Redirect:
    return Redirect(turn_id="t1", steer_id=steer_id, text=text)


async def test_hook_hands_pending_steers_to_the_model() -> None:
    driver = ClaudeCodeDriver()
    turn, harness = make_turn(driver)
    assert await driver._pre_tool_use({"tool_name": "Bash"}, "tu1", {"signal": None}) == {}
    turn._add_steer(steer("s1", "use python"))
    turn._add_steer(steer("s2", "and be brief"))
    out = await driver._post_tool_use({"tool_name": "Bash"}, "tu1", {"signal": None})
    assert out == {
        "hookSpecificOutput": {
            "hookEventName": "PostToolUse",
            "additionalContext": format_steers(
                [steer("s1", "use python"), steer("s2", "and be brief")]
            ),
        }
    }
    assert format_steers([steer("s1", "a"), steer("s2", "b")]).endswith("\n1. a\n2. b")
    assert harness.events == [
        SteerInjected(turn_id="t1", steer_id="s1"),
        SteerInjected(turn_id="t1", steer_id="s2"),
    ]
    assert not turn.has_pending_steers


async def test_sub_agent_hooks_and_stopped_turns_never_take_steers() -> None:
    driver = ClaudeCodeDriver()
    turn, harness = make_turn(driver)
    turn._add_steer(steer("s1", "x"))
    sub_agent = {"tool_name": "Bash", "agent_id": "a1", "agent_type": "general-purpose"}
    assert await driver._pre_tool_use(sub_agent, "tu1", {"signal": None}) == {}
    turn.interrupted = True
    assert await driver._pre_tool_use({"tool_name": "Bash"}, "tu2", {"signal": None}) == {}
    assert turn.has_pending_steers and harness.events == []
    driver._turn = None
    assert await driver._pre_tool_use({"tool_name": "Bash"}, "tu3", {"signal": None}) == {}


async def test_can_use_tool_asks_the_host_and_follows_its_answer() -> None:
    driver = ClaudeCodeDriver()
    turn, harness = make_turn(driver)
    ctx = ToolPermissionContext(tool_use_id="tu1", title="Claude wants to run touch x")
    results: list[Any] = []

    async def ask() -> None:
        results.append(await driver._can_use_tool("Bash", {"command": "touch x"}, ctx))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ask)
        await trio.testing.wait_all_tasks_blocked()
        (request,) = harness.events
        assert request == ApprovalRequest(
            turn_id="t1",
            approval_id="t1.a1",
            tool="Bash",
            input={"command": "touch x"},
            description="Claude wants to run touch x",
        )
        turn._answer(ApprovalResponse(approval_id="t1.a1", allow=True))
    assert results == [PermissionResultAllow()]

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ask)
        await trio.testing.wait_all_tasks_blocked()
        turn._answer(ApprovalResponse(approval_id="t1.a2", allow=False, reason="no"))
    assert results[1] == PermissionResultDeny(message="no", interrupt=False)


async def test_can_use_tool_denies_on_stop_and_on_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    driver = ClaudeCodeDriver()
    turn, harness = make_turn(driver)
    ctx = ToolPermissionContext(tool_use_id="tu1")
    driver._opts = type(driver._opts)(approval_timeout=30)
    with trio.fail_after(60):
        start = trio.current_time()
        denied = await driver._can_use_tool("Bash", {}, ctx)
    assert denied == PermissionResultDeny(
        message="No answer to the permission request within 30 s."
    )
    assert trio.current_time() - start == pytest.approx(30)
    # The host's approval closes for every window too (it stayed open until the turn ended).
    assert harness.events[-1] == ApprovalWithdrawn(
        turn_id="t1",
        approval_id="t1.a1",
        reason="no answer within 30 s (the claude-code approval_timeout)",
    )
    turn.interrupted = True
    assert await driver._can_use_tool("Bash", {}, ctx) == PermissionResultDeny(
        message="The turn was stopped.", interrupt=True
    )


async def test_a_permission_request_the_cli_takes_back_closes_the_hosts_approval() -> None:
    """The SDK cancels `can_use_tool` when the CLI withdraws its request (a control cancel)
    or ends: the approval must not stay open in every window."""
    driver = ClaudeCodeDriver()
    turn, harness = make_turn(driver)
    ctx = ToolPermissionContext(tool_use_id="tu1")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(driver._can_use_tool, "Bash", {}, ctx)
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()  # what the SDK does to the callback's task
    assert harness.events == [
        ApprovalRequest(turn_id="t1", approval_id="t1.a1", tool="Bash", input={}),
        ApprovalWithdrawn(
            turn_id="t1", approval_id="t1.a1", reason="Claude Code withdrew its permission request"
        ),
    ]
    assert not turn._approvals  # a late answer finds nothing
