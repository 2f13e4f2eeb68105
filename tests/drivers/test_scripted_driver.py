"""The scripted driver's scenarios, end to end through the supervisor (real processes)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio

from hostd.shell.drivers.registry import DriverRegistry
from hostd.shell.drivers.supervisor import DriverSession, SessionOptions, Supervisor
from hostd.testing.conformance import TurnResult, collect_turn
from hostd_protocol.common import CompactionAnchor, TextDelta, ThinkingDelta, ToolCall, ToolResult
from hostd_protocol.driver_messages import (
    ApprovalRequest,
    ApprovalResponse,
    ChunkEvent,
    CompactionComplete,
    CompactionError,
    CompactionStart,
    Notice,
    Redirect,
    ResumeToken,
    Send,
    SteerBoundary,
    SteerInjected,
    SteerUndelivered,
    TurnEnd,
    UsageEvent,
)
from hostd_scripted.spec import SPEC

REGISTRY = DriverRegistry.from_specs(SPEC)


@asynccontextmanager
async def scripted(tmp_path: Path, **options: Any) -> AsyncIterator[DriverSession]:
    sup = Supervisor(
        REGISTRY,
        base_env={"PATH": os.environ.get("PATH", os.defpath), "LANG": "C.UTF-8"},
        workdir_root=str(tmp_path),
        max_warm=0,
    )
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            await nursery.start(sup.serve)
            try:
                yield await sup.open(
                    "t", SessionOptions(driver="scripted", options={"chunk_rate": 0, **options})
                )
            finally:
                with trio.CancelScope(shield=True):
                    await sup.aclose()


async def run(session: DriverSession, turn_id: str, text: str, **options: Any) -> TurnResult:
    await session.send(Send(turn_id=turn_id, text=text, options=options))
    result = await collect_turn(session, turn_id)
    assert result.end is not None, result.ended
    return result


def kinds(result: TurnResult) -> list[str]:
    out = []
    for e in result.events:
        if isinstance(e, ChunkEvent):
            out.append(type(e.chunk).__name__)
        else:
            out.append(type(e).__name__)
    # Collapse runs ("TextDelta, TextDelta" -> "TextDelta") so the shape reads plainly.
    return [k for i, k in enumerate(out) if i == 0 or out[i - 1] != k]


async def test_default_scenario_shape(tmp_path: Path) -> None:
    async with scripted(tmp_path, tool_pause=0) as session:
        result = await run(session, "a", "what is this?")
        assert kinds(result) == [
            "ResumeToken",
            "ThinkingDelta",
            "TextDelta",
            "ToolCall",
            "ToolResult",
            "TextDelta",
            "UsageEvent",
            "TurnEnd",
        ]
        assert result.end is not None and result.end.status == "success"
        call = next(
            e.chunk
            for e in result.events
            if isinstance(e, ChunkEvent) and isinstance(e.chunk, ToolCall)
        )
        assert call.name == "Read"
        assert "daemon" in result.text
        # The resume token is reported once, at the first turn only.
        again = await run(session, "b", "/echo\nsame session")
        assert not any(isinstance(e, ResumeToken) for e in again.events)
        assert again.text == "same session"


async def test_chunk_sizes_and_thinking(tmp_path: Path) -> None:
    async with scripted(tmp_path) as session:
        # Paced (1 ms apart): each chunk leaves in a pass of its own, so the harness does not
        # merge them (`driver_output`) and their sizes can be seen.
        result = await run(session, "a", "/think pondering deeply\n/chunks 5 size=3 rate=1000")
        texts = [
            e.chunk.text
            for e in result.events
            if isinstance(e, ChunkEvent) and isinstance(e.chunk, TextDelta)
        ]
        assert [len(t) for t in texts] == [3, 3, 3, 3, 3]
        thinking = "".join(
            e.chunk.text
            for e in result.events
            if isinstance(e, ChunkEvent) and isinstance(e.chunk, ThinkingDelta)
        )
        assert thinking == "pondering deeply"


async def test_steer_injected_then_boundary_and_the_answer_quotes_it(tmp_path: Path) -> None:
    async with scripted(tmp_path) as session:
        await session.send(Send(turn_id="a", text="/scenario steer"))

        async def steer() -> None:
            await session.send(Redirect(turn_id="a", steer_id="s1", text="be brief"))
            await session.send(Redirect(turn_id="a", steer_id="s2", text="use lists"))

        result = await collect_turn(session, "a", on_first_chunk=steer)
        events = [e for e in result.events if isinstance(e, (SteerInjected, SteerBoundary))]
        assert events == [
            SteerInjected(turn_id="a", steer_id="s1"),
            SteerInjected(turn_id="a", steer_id="s2"),
            SteerBoundary(turn_id="a", steer_ids=["s1", "s2"]),
        ]
        # Every chunk after the boundary belongs to the new message and mentions the steers.
        after = result.text.split("Working on it.")[1]
        assert after.startswith("You said: be brief; use lists.")


async def test_steers_without_injection_come_back_undelivered(tmp_path: Path) -> None:
    async with scripted(tmp_path, inject_steering=False) as session:
        assert session.capabilities.inject_steering is False
        await session.send(Send(turn_id="a", text="/chunks 1\n/sleep 0.2\n/text end"))

        async def steer() -> None:
            await session.send(Redirect(turn_id="a", steer_id="s1", text="later"))

        result = await collect_turn(session, "a", on_first_chunk=steer)
        assert SteerUndelivered(turn_id="a", steer_ids=["s1"]) in result.events
        assert not any(isinstance(e, SteerBoundary) for e in result.events)


async def test_a_steer_still_pending_at_turn_end_is_undelivered(tmp_path: Path) -> None:
    async with scripted(tmp_path) as session:
        await session.send(Send(turn_id="a", text="/chunks 1\n/sleep 0.2\n/text no tool here"))

        async def steer() -> None:
            await session.send(Redirect(turn_id="a", steer_id="s1", text="too late"))

        result = await collect_turn(session, "a", on_first_chunk=steer)
        undelivered = [e for e in result.events if isinstance(e, SteerUndelivered)]
        assert undelivered == [SteerUndelivered(turn_id="a", steer_ids=["s1"])]
        assert result.events.index(undelivered[0]) == len(result.events) - 2  # before TurnEnd


async def test_approvals_allow_and_deny(tmp_path: Path) -> None:
    async with scripted(tmp_path) as session:
        for turn_id, allow in (("yes", True), ("no", False)):
            await session.send(Send(turn_id=turn_id, text="/approve Bash"))

            async def answer(turn_id: str = turn_id, allow: bool = allow) -> None:
                async for batch in session.events:
                    assert isinstance(batch, list)
                    for event in batch:
                        if isinstance(event, ApprovalRequest):
                            assert event.tool == "Bash" and event.turn_id == turn_id
                            await session.send(
                                ApprovalResponse(
                                    approval_id=event.approval_id, allow=allow, reason="nope"
                                )
                            )
                            return

            await answer()
            result = await collect_turn(session, turn_id)
            results = [
                e.chunk
                for e in result.events
                if isinstance(e, ChunkEvent) and isinstance(e.chunk, ToolResult)
            ]
            assert results[0].is_error is (not allow)
            expected = "approved: ran Bash." if allow else "denied: did not run Bash (nope)."
            assert result.text == expected


async def test_compaction_variants(tmp_path: Path) -> None:
    async with scripted(tmp_path) as session:
        plain = await run(session, "a", "/compact")
        assert [type(e) for e in plain.events if "Compaction" in type(e).__name__] == [
            CompactionStart,
            CompactionComplete,
        ]
        assert next(e for e in plain.events if isinstance(e, CompactionComplete)).anchor is None
        anchored = await run(session, "b", "/compact anchor")
        anchor = next(e for e in anchored.events if isinstance(e, CompactionComplete)).anchor
        assert isinstance(anchor, CompactionAnchor)
        assert (anchor.tokens_before, anchor.tokens_after) == (120_000, 8_000)
        failed = await run(session, "c", "/compact error")
        assert any(isinstance(e, CompactionError) for e in failed.events)
        assert failed.end is not None and failed.end.status == "success"


async def test_error_usage_notice(tmp_path: Path) -> None:
    async with scripted(tmp_path) as session:
        result = await run(session, "a", "/usage 10 20\n/notice heads_up mind the gap\n/error boom")
        assert result.end == TurnEnd(
            turn_id="a", status="error", error="boom", error_code="driver_turn_error"
        )
        usage = next(e for e in result.events if isinstance(e, UsageEvent))
        assert (usage.usage.input_tokens, usage.usage.output_tokens) == (10, 20)
        assert Notice(code="heads_up", message="mind the gap", turn_id="a") in result.events


async def test_a_bad_script_fails_the_turn_not_the_driver(tmp_path: Path) -> None:
    async with scripted(tmp_path) as session:
        result = await run(session, "a", "/nonsense")
        assert result.end is not None and result.end.status == "error"
        assert result.end.error.startswith("bad script: unknown directive /nonsense")
        assert (await run(session, "b", "/echo\nfine")).text == "fine"


async def test_send_options_pick_the_scenario(tmp_path: Path) -> None:
    async with scripted(tmp_path, scenario="think") as session:
        by_init = await run(session, "a", "hi")
        assert "ThinkingDelta" in kinds(by_init)
        by_send = await run(session, "b", "hi there", scenario="echo")
        assert by_send.text == "hi there"


async def test_capabilities_follow_init_options(tmp_path: Path) -> None:
    async with scripted(tmp_path, approvals=False, compaction=False, resume=False) as session:
        caps = session.capabilities
        assert (caps.approvals, caps.compaction, caps.resume, caps.inject_steering) == (
            False,
            False,
            False,
            True,
        )
        result = await run(session, "a", "/echo\nx")
        assert not any(isinstance(e, ResumeToken) for e in result.events)
