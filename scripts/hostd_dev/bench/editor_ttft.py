"""An editor's prompt to its first `agent_message_chunk` through `hostd acp`, against the
same driver reached directly over the daemon's socket.

- direct: a client `send`s on an open scripted session and times the first `row-appended`
  it receives (the hot path of the ttft scenario);
- acp: a minimal editor (raw JSON-RPC lines, so no SDK's own cost is counted) writes
  `session/prompt` to `hostd acp`'s stdin and times the first `agent_message_chunk` line on
  its stdout. `hostd acp` is one more window of the same daemon: the difference is what the
  ACP process adds (two pipe hops, JSON-RPC decode/encode, its client connection).

The two paths alternate prompt by prompt on two topics of the same daemon, so drift and
load hit both alike.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

from hostd_dev.bench.procs import DaemonProc
from hostd_dev.bench.report import Context, Result
from hostd_dev.bench.stats import percentile

GOAL = "added by hostd acp (editor prompt -> first agent_message_chunk) p50 <= 1 ms"

SCRIPT = "/bench n=1 size=64"
HOSTD = str(Path(sys.executable).parent / "hostd")


class RawEditor:
    """`hostd acp` over its pipes, driven by hand-written JSON-RPC lines."""

    def __init__(self, proc: trio.Process) -> None:
        self.proc = proc
        self.buf = b""
        self.ids = 0

    async def line(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        while b"\n" not in self.buf:
            data = await self.proc.stdout.receive_some(65536)
            if not data:
                raise RuntimeError("hostd acp closed its output")
            self.buf += data
        raw, _, self.buf = self.buf.partition(b"\n")
        message: dict[str, Any] = json.loads(raw)
        return message

    async def write(self, method: str, params: dict[str, Any]) -> int:
        assert self.proc.stdin is not None
        self.ids += 1
        msg = {"jsonrpc": "2.0", "id": self.ids, "method": method, "params": params}
        await self.proc.stdin.send_all(json.dumps(msg).encode() + b"\n")
        return self.ids

    async def call(self, method: str, params: dict[str, Any]) -> Any:
        rid = await self.write(method, params)
        while True:
            msg = await self.line()
            if msg.get("id") == rid:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg["result"]

    async def prompt(self, sid: str) -> tuple[float, float, float]:
        """(ms from writing the prompt to its first answer chunk, ms of that to the driver's
        emit stamp, ms from the stamp to the chunk here); waits for the prompt's end."""
        t0 = time.monotonic_ns()
        rid = await self.write(
            "session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": SCRIPT}]}
        )
        first: tuple[float, float, float] | None = None
        while True:
            msg = await self.line()
            if (
                first is None
                and msg.get("method") == "session/update"
                and msg["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
            ):
                first = _split(t0, time.monotonic_ns(), msg["params"]["update"]["content"]["text"])
            if msg.get("id") == rid:
                if msg.get("result", {}).get("stopReason") != "end_turn" or first is None:
                    raise RuntimeError(f"prompt ended {msg}")
                return first


def _split(sent_ns: int, got_ns: int, text: str) -> tuple[float, float, float]:
    """A `/bench` chunk starts with the driver's CLOCK_MONOTONIC stamp at its emit."""
    stamp = int(text.partition(":")[0])
    return (got_ns - sent_ns) / 1e6, (stamp - sent_ns) / 1e6, (got_ns - stamp) / 1e6


async def _direct(client: Any, topic_id: str, sub: Any) -> tuple[float, float, float]:
    from hostd_protocol.client_messages import RowAppended, TurnEnded
    from hostd_protocol.common import TextDelta

    first: tuple[float, float, float] | None = None
    async with trio.open_nursery() as nursery:
        t0 = time.monotonic_ns()
        nursery.start_soon(client.send, topic_id, SCRIPT, "start")
        async for ev in sub:
            if first is None and isinstance(ev, RowAppended) and isinstance(ev.chunk, TextDelta):
                first = _split(t0, time.monotonic_ns(), ev.chunk.text)
            if isinstance(ev, TurnEnded):
                break
    assert first is not None
    return first


def run(ctx: Context) -> Result:
    res = Result("editor-ttft", GOAL)
    prompts = 10 if ctx.quick else 100
    res.notes.append(
        f"{prompts} prompts per run on each path, alternating; scripted driver, open "
        "sessions; the editor is raw JSON-RPC lines (no SDK) timed at its pipe"
    )
    with DaemonProc() as daemon, tempfile.TemporaryDirectory(prefix="hostd-ed-") as cwd:
        trio.run(_measure, ctx, res, daemon, prompts, cwd)
    return res


async def _measure(
    ctx: Context, res: Result, daemon: DaemonProc, prompts: int, cwd: str
) -> None:
    from hostd.client import open_client

    argv = [HOSTD, "--home", str(daemon.home), "acp", "--driver", "scripted"]
    proc = await trio.lowlevel.open_process(argv, stdin=-1, stdout=-1)
    try:
        editor = RawEditor(proc)
        await editor.call("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        sid = (await editor.call("session/new", {"cwd": cwd, "mcpServers": []}))["sessionId"]
        async with open_client(daemon.paths, client_name="bench-direct") as client:
            t = await client.create_topic(title="direct", driver="scripted")
            async with client.attach(t.id, max_rows=1) as sub:
                await sub.__anext__()  # the snapshot
                for _ in range(3):  # warm-up: driver processes started, imports done
                    await editor.prompt(sid)
                    await _direct(client, t.id, sub)
                for _run in range(ctx.runs):
                    acp: list[tuple[float, float, float]] = []
                    direct: list[tuple[float, float, float]] = []
                    for _ in range(prompts):
                        acp.append(await editor.prompt(sid))
                        direct.append(await _direct(client, t.id, sub))
                    a50, d50 = (percentile([x[0] for x in v], 50) for v in (acp, direct))
                    res.add("direct (socket): send -> first chunk, p50", "ms", d50, baseline=True)
                    res.add("hostd acp: prompt -> first agent_message_chunk, p50", "ms", a50)
                    res.add("direct: p90", "ms", percentile([x[0] for x in direct], 90),
                            baseline=True)
                    res.add("hostd acp: p90", "ms", percentile([x[0] for x in acp], 90))
                    for i, leg in ((1, "in (-> driver emits)"), (2, "out (driver emits ->)")):
                        da = percentile([x[i] for x in direct], 50)
                        aa = percentile([x[i] for x in acp], 50)
                        res.add(f"direct: {leg} p50", "ms", da, baseline=True)
                        res.add(f"hostd acp: {leg} p50", "ms", aa)
                    res.add("added by hostd acp, p50", "ms", a50 - d50, goal=("<=", 1.0))
                    ctx.log(f"  run: acp p50 {a50:.3f} ms, direct p50 {d50:.3f} ms")
    finally:
        if proc.stdin is not None:
            await proc.stdin.aclose()
        with trio.move_on_after(5):
            await proc.wait()
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
