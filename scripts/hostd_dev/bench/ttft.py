"""Time to first token with the scripted driver, and the host's share of it.

- cold: a new topic, no driver process yet: send -> first chunk at a window (process spawn,
  handshake, turn);
- warm: a new topic whose driver was prewarmed (`prewarm`, then the warm pool hands the
  spare to the first send);
- hot: the next send on a topic whose driver session is open.

Host overhead: from the client writing `send` to the driver emitting its first chunk (the
chunk carries the driver's CLOCK_MONOTONIC stamp), minus the same span on a bare pipe (the
bench writes `Send` straight to a driver and reads its stamp). What is left is the socket,
the daemon's request handling and its write to the driver's stdin.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import trio

from hostd_dev.bench.control import with_client
from hostd_dev.bench.procs import BareDriver, DaemonProc
from hostd_dev.bench.report import Context, Result
from hostd_dev.bench.stats import percentile

GOAL = "host overhead (send -> driver has the command) p50 <= 1 ms; warm << cold"

SCRIPT = "/bench n=1 size=64"


async def _first_chunk(client: Any, topic_id: str) -> tuple[float, int, int]:
    """Send SCRIPT; (seconds to the first chunk at this window, send ns, the chunk's stamp)."""
    from hostd_protocol.client_messages import RowAppended, TurnEnded
    from hostd_protocol.common import TextDelta

    first = 0.0
    stamp = 0
    async with client.attach(topic_id, max_rows=1) as sub:
        async with trio.open_nursery() as nursery:
            t0 = time.perf_counter()
            sent_ns = time.monotonic_ns()
            nursery.start_soon(client.send, topic_id, SCRIPT, "start")
            async for ev in sub:
                if not first and isinstance(ev, RowAppended) and isinstance(ev.chunk, TextDelta):
                    first = time.perf_counter() - t0
                    stamp = int(ev.chunk.text.partition(":")[0])
                if isinstance(ev, TurnEnded):
                    if ev.status != "success":
                        raise RuntimeError(f"ttft turn ended {ev.status}: {ev.error}")
                    break
    return first, sent_ns, stamp


async def _wait_warm(client: Any, timeout: float = 20.0) -> None:
    with trio.fail_after(timeout):
        # The daemon has no "spare is warm" event for clients: poll its status.
        while (await client.status()).warm_drivers < 1:  # noqa: ASYNC110
            await trio.sleep(0.005)


def run(ctx: Context) -> Result:
    res = Result("ttft", GOAL)
    hot_sends = 5 if ctx.quick else 30
    res.notes.append(
        f"cold/warm: one new topic per run; hot and host overhead: {hot_sends} sends per run "
        "on an open session; overhead = (driver stamp - client send) minus the bare pipe's"
    )

    # Baseline: Send written straight to a driver's stdin -> its first chunk's stamp.
    bare_p50: list[float] = []
    with BareDriver() as bare:
        bare.turn(SCRIPT, mode="stamp")
        for _ in range(ctx.runs):
            spans = []
            for _ in range(hot_sends):
                t = bare.turn(SCRIPT, mode="stamp")
                spans.append((int(t.first_chunk_text.partition(":")[0]) - t.sent_ns) / 1e6)
            p50 = percentile(spans, 50)
            bare_p50.append(p50)
            res.add("bare pipe: Send -> driver emits, p50", "ms", p50, baseline=True)

    # --trace: (topic, kind, client send ns, driver stamp) of every send, in order per topic.
    sends: list[tuple[str, str, int, int]] = []
    trace_dir = tempfile.TemporaryDirectory(prefix="hostd-trace-") if ctx.trace else None
    trace_file = Path(trace_dir.name) / "daemon.jsonl" if trace_dir else None
    if trace_file is not None:
        os.environ["HOSTD_TRACE"] = str(trace_file)
    try:
        with DaemonProc() as daemon:
            _measure_daemon(ctx, res, daemon, hot_sends, bare_p50, sends)
    finally:
        os.environ.pop("HOSTD_TRACE", None)
    if trace_dir is not None and trace_file is not None:
        with trace_dir:
            add_send_trace(ctx, res, trace_file, sends)
    return res


def add_send_trace(
    ctx: Context, res: Result, trace_file: Path, sends: list[tuple[str, str, int, int]]
) -> None:
    """Split the hot sends' "send -> driver emits" into its stages, from the daemon's
    `send-in` / `send-out` records (the k-th of a topic belongs to its k-th send)."""
    got_in: dict[str, list[int]] = defaultdict(list)
    got_out: dict[str, list[int]] = defaultdict(list)
    if trace_file.exists():
        for line in trace_file.read_text().splitlines():
            rec = json.loads(line)
            if rec[0] == "send-in":
                got_in[rec[1]].append(rec[2])
            elif rec[0] == "send-out":
                got_out[rec[1]].append(rec[2])
    stages: dict[str, list[float]] = {
        "client write -> daemon decoded": [],
        "daemon decoded -> driver stdin written": [],
        "driver stdin written -> driver emits": [],
    }
    index: dict[str, int] = defaultdict(int)
    for topic, kind, sent_ns, stamp in sends:
        k = index[topic]
        index[topic] += 1
        if kind != "hot" or k >= len(got_in[topic]) or k >= len(got_out[topic]):
            continue
        t_in, t_out = got_in[topic][k], got_out[topic][k]
        stages["client write -> daemon decoded"].append((t_in - sent_ns) / 1e6)
        stages["daemon decoded -> driver stdin written"].append((t_out - t_in) / 1e6)
        stages["driver stdin written -> driver emits"].append((stamp - t_out) / 1e6)
    ctx.log("  hot send trace (ms):                          p50      p99        n")
    for name, v in stages.items():
        if not v:
            continue
        p50, p99 = percentile(v, 50), percentile(v, 99)
        res.add(f"trace: {name} p50", "ms", p50)
        res.add(f"trace: {name} p99", "ms", p99)
        ctx.log(f"    {name:<42} {p50:8.3f} {p99:8.3f} {len(v):8d}")


def _measure_daemon(
    ctx: Context,
    res: Result,
    daemon: DaemonProc,
    hot_sends: int,
    bare_p50: list[float],
    sends: list[tuple[str, str, int, int]],
) -> None:
    async def measure(client: Any) -> None:
        # Warm-up: the first topic pays for the daemon's lazy imports.
        t = await client.create_topic(title="ttft-warmup", driver="scripted")
        _, sent_ns, stamp = await _first_chunk(client, t.id)
        sends.append((t.id, "warm-up", sent_ns, stamp))
        for i in range(ctx.runs):
            t = await client.create_topic(title="ttft-cold", driver="scripted")
            cold, sent_ns, stamp = await _first_chunk(client, t.id)
            sends.append((t.id, "cold", sent_ns, stamp))
            res.add("cold: send -> first chunk", "ms", cold * 1000)

            t = await client.create_topic(title="ttft-warm", driver="scripted")
            await client.prewarm(t.id)
            await _wait_warm(client)
            warm, sent_ns, stamp = await _first_chunk(client, t.id)
            sends.append((t.id, "warm", sent_ns, stamp))
            res.add("warm (prewarmed): send -> first chunk", "ms", warm * 1000)

            hot: list[float] = []
            overhead: list[float] = []
            for _ in range(hot_sends):
                first, sent_ns, stamp = await _first_chunk(client, t.id)
                sends.append((t.id, "hot", sent_ns, stamp))
                hot.append(first * 1000)
                overhead.append((stamp - sent_ns) / 1e6)
            res.add("hot (open session): send -> first chunk, p50", "ms", percentile(hot, 50))
            res.add("host: send -> driver emits, p50", "ms", percentile(overhead, 50))
            res.add("host: send -> driver emits, p99", "ms", percentile(overhead, 99))
            res.add(
                "host overhead p50 (minus bare pipe)",
                "ms",
                percentile(overhead, 50) - bare_p50[min(i, len(bare_p50) - 1)],
                goal=("<=", 1.0),
            )
            res.add("cold / warm", "x", cold / warm if warm else 0.0)

    with_client(daemon, measure)
