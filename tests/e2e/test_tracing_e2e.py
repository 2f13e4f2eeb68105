"""OpenTelemetry tracing through the daemon (issue 37): a real scripted driver's turn with a
model call, a tool call and a steer becomes `invoke_agent` / `chat` / `execute_tool` spans
(an in-process daemon whose spans go to the SDK's in-memory exporter), the trace context
reaches the driver, and a daemon subprocess with no `OTEL_*` variable loads no
OpenTelemetry module at all. The same turn read back from a real trace backend is
`test_tracing_phoenix.py`."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio

from hostd.client import open_client
from hostd.shell.daemon import Daemon, DaemonConfig, serve_daemon
from hostd.shell.drivers.registry import DriverRegistry
from hostd.shell.paths import Paths
from hostd.shell.tracing import Tracing, TracingSettings
from hostd_protocol.client_messages import RowAppended, TurnEnded
from hostd_protocol.common import TextDelta, ToolCall
from hostd_scripted.spec import SPEC as SCRIPTED
from tests.e2e import daemon_proc

otel = pytest.importorskip("opentelemetry.sdk", reason="pip install 'hostd[otel]'")

from opentelemetry.sdk.trace import ReadableSpan  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)

from hostd.shell.otel_sdk import SdkSpans  # noqa: E402

pytestmark = pytest.mark.e2e

#: A turn that streams, calls a tool, waits there for a steer, answers it, reports usage.
STEER_TURN = "/text Working on it.\n/tool Read wait-steer=10\n/text Finished.\n/usage 1200 180"


async def run_steered_turn(paths: Paths, text: str = STEER_TURN) -> tuple[str, str, str]:
    """Create a scripted topic, send `text`, steer once its tool call shows, follow the turn
    to its end: (topic id, turn id, answer text)."""
    async with open_client(paths) as c:
        topic = await c.create_topic(title="traced", driver="scripted")
        async with c.attach(topic.id) as sub:
            sent = await c.send(topic.id, text)
            steered = False
            answer: list[str] = []
            async for item in sub:
                if isinstance(item, RowAppended):
                    if isinstance(item.chunk, ToolCall) and not steered:
                        await c.send(topic.id, "use the short form", intent="steer")
                        steered = True
                    elif isinstance(item.chunk, TextDelta):
                        answer.append(item.chunk.text)
                if isinstance(item, TurnEnded) and item.turn_id == sent.turn_id:
                    assert item.status == "success", item.error
                    break
    return topic.id, sent.turn_id, "".join(answer)


@pytest.fixture
async def traced(
    home: Path, nursery: trio.Nursery
) -> AsyncIterator[tuple[Daemon, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    tracing = Tracing(TracingSettings(), SdkSpans(exporter=exporter))
    done = trio.Event()

    async def run(task_status: trio.TaskStatus[Daemon] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            await serve_daemon(
                Paths.under(home),
                config=DaemonConfig(default_driver="scripted"),
                registry=DriverRegistry.from_specs(SCRIPTED),
                tracing=tracing,
                task_status=task_status,
            )
        finally:
            done.set()

    with trio.fail_after(20):
        d: Daemon = await nursery.start(run)
    yield d, exporter
    d.request_shutdown()
    with trio.fail_after(20):
        await done.wait()


def by_name(spans: tuple[ReadableSpan, ...] | list[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


async def test_a_steered_turn_with_a_tool_call_is_a_tree_of_genai_spans(
    traced: tuple[Daemon, InMemorySpanExporter],
) -> None:
    daemon, exporter = traced
    with trio.fail_after(30):
        topic_id, turn_id, answer = await run_steered_turn(daemon.paths)
        # The batch processor exports from its thread: flush it (the daemon's end does too).
        assert daemon.tracing is not None
        await trio.to_thread.run_sync(daemon.tracing.flush)
        spans = exporter.get_finished_spans()
    assert "You said: use the short form" in answer
    (turn,) = by_name(spans, "invoke_agent scripted")
    chats = sorted(by_name(spans, "chat"), key=lambda s: s.start_time or 0)
    (tool,) = by_name(spans, "execute_tool Read")
    assert len(chats) == 2
    assert turn.parent is None
    for child in (*chats, tool):
        assert child.parent is not None and child.parent.span_id == turn.context.span_id
        assert child.context.trace_id == turn.context.trace_id
    a = dict(turn.attributes or {})
    assert a["gen_ai.operation.name"] == "invoke_agent"
    assert a["gen_ai.conversation.id"] == topic_id
    assert a["gen_ai.provider.name"] == "scripted"
    assert a["hostd.turn.id"] == turn_id
    assert a["gen_ai.usage.input_tokens"] == 1200
    assert a["gen_ai.usage.output_tokens"] == 180
    assert a["gen_ai.response.finish_reasons"] == ("stop",)
    assert "gen_ai.input.messages" not in a and "gen_ai.output.messages" not in a
    t = dict(tool.attributes or {})
    assert t["gen_ai.tool.name"] == "Read"
    assert t["gen_ai.tool.call.id"].startswith("call-")
    assert t["hostd.tool.status"] == "success"
    assert t["hostd.tool.retries"] == 0
    assert "gen_ai.tool.call.arguments" not in t
    assert [dict(c.attributes or {})["gen_ai.response.finish_reasons"] for c in chats] == [
        ("tool_calls",),
        ("stop",),
    ]
    assert dict(chats[1].attributes or {})["gen_ai.usage.output_tokens"] == 180
    # The first model call asked for the tool, which ended before the second call began.
    assert (chats[0].start_time or 0) <= (tool.start_time or 0)
    assert (tool.end_time or 0) <= (chats[1].start_time or 0)
    names = [e.name for e in turn.events]
    assert names == ["hostd.steer", "hostd.steer.injected", "hostd.roll"]


async def test_the_driver_gets_the_turns_trace_context(
    traced: tuple[Daemon, InMemorySpanExporter],
) -> None:
    daemon, exporter = traced
    with trio.fail_after(30):
        _, _, answer = await run_steered_turn(daemon.paths, "/traceparent")
        assert daemon.tracing is not None
        await trio.to_thread.run_sync(daemon.tracing.flush)
    (turn,) = by_name(exporter.get_finished_spans(), "invoke_agent scripted")
    ctx = turn.context
    flags = int(ctx.trace_flags)
    assert flags & 1  # sampled
    assert answer.strip() == f"traceparent 00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{flags:02x}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _otel_imports(stderr_log: Path) -> list[str]:
    """Modules named `opentelemetry*` in a `PYTHONPROFILEIMPORTTIME` log (every import)."""
    found = []
    for line in stderr_log.read_text(errors="replace").splitlines():
        if line.startswith("import time:") and "|" in line:
            name = line.rsplit("|", 1)[1].strip()
            if name.split(".")[0] == "opentelemetry":
                found.append(name)
    return found


@pytest.mark.parametrize("traced_env", [False, True], ids=["off", "on"])
async def test_without_otel_variables_the_daemon_loads_no_opentelemetry(
    home: Path, traced_env: bool
) -> None:
    """A real `hostd serve` subprocess that ran a turn: Python's own import log lists every
    module it loaded. Off: none of OpenTelemetry. On (the control that shows the check
    sees it): the SDK is there."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["PYTHONPROFILEIMPORTTIME"] = "1"
    if traced_env:
        # Nothing listens there: spans are dropped (logged), the turn is unaffected.
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = f"http://127.0.0.1:{_free_port()}"
    with trio.fail_after(60):
        proc = await daemon_proc.start(home, "--default-driver", "scripted", env=env)
        try:
            paths = Paths.under(home)
            async with open_client(paths) as c:
                topic = await c.create_topic(title="t", driver="scripted")
                async with c.attach(topic.id) as sub:
                    sent = await c.send(topic.id, "/text hello")
                    async for item in sub:
                        if isinstance(item, TurnEnded) and item.turn_id == sent.turn_id:
                            assert item.status == "success"
                            break
        finally:
            assert await proc.terminate() == 0
    loaded = _otel_imports(home / "daemon-stderr.log")
    if traced_env:
        assert "opentelemetry.sdk.trace" in loaded
    else:
        assert loaded == [], json.dumps(loaded[:5])
