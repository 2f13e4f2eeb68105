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

    async def prompt(self, sid: str) -> float:
        """Seconds from writing the prompt to its first answer chunk; waits for the end."""
        t0 = time.perf_counter()
        rid = await self.write(
            "session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": SCRIPT}]}
        )
        first = 0.0
        while True:
            msg = await self.line()
            if (
                not first
                and msg.get("method") == "session/update"
                and msg["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
            ):
                first = time.perf_counter() - t0
            if msg.get("id") == rid:
                if msg.get("result", {}).get("stopReason") != "end_turn":
                    raise RuntimeError(f"prompt ended {msg}")
                return first


async def _direct(client: Any, topic_id: str, sub: Any) -> float:
    from hostd_protocol.client_messages import RowAppended, TurnEnded

    first = 0.0
    async with trio.open_nursery() as nursery:
        t0 = time.perf_counter()
        nursery.start_soon(client.send, topic_id, SCRIPT, "start")
        async for ev in sub:
            if not first and isinstance(ev, RowAppended):
                first = time.perf_counter() - t0
            if isinstance(ev, TurnEnded):
                break
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
                    acp: list[float] = []
                    direct: list[float] = []
                    for _ in range(prompts):
                        acp.append(await editor.prompt(sid) * 1000)
                        direct.append(await _direct(client, t.id, sub) * 1000)
                    a50, d50 = percentile(acp, 50), percentile(direct, 50)
                    res.add("direct (socket): send -> first chunk, p50", "ms", d50, baseline=True)
                    res.add("hostd acp: prompt -> first agent_message_chunk, p50", "ms", a50)
                    res.add("hostd acp: p90", "ms", percentile(acp, 90))
                    res.add("direct: p90", "ms", percentile(direct, 90), baseline=True)
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
