"""Time to first token through the supervisor, cold vs warm, and driver -> host stream latency.

Plain async functions returning numbers, for `scripts/bench` (which owns the harness,
reporting and comparison) and for a quick look:

    python -m hostd_dev.bench_ttft --runs 5 --connect-delay 0.3

- cold: `open()` spawns the driver (interpreter start, imports, handshake), then `Send` ->
  first chunk. This is what a user waits for when a message arrives and no session is open.
- warm: a spare was prewarmed earlier (`Supervisor.prewarm`); `open()` takes it, then
  `Send` -> first chunk.

The scripted driver's `connect_delay` option models a vendor connect (the Claude SDK import
and CLI start cost ~2.4 s, docs in notes/claude-code-offline.md): a cold start pays it before
the first chunk, a warm spare paid it while prewarming.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import trio

from hostd.shell.drivers.registry import DriverRegistry
from hostd.shell.drivers.supervisor import DriverSession, SessionEnded, SessionOptions, Supervisor
from hostd_protocol.common import TextDelta
from hostd_protocol.driver_messages import ChunkEvent, Send, TurnEnd

__all__ = ["StreamReport", "TtftReport", "TtftSample", "measure_stream", "measure_ttft"]


@dataclass(frozen=True)
class TtftSample:
    mode: Literal["cold", "warm"]
    #: `open()` call -> session returned (cold: spawn + handshake; warm: take a spare).
    open_s: float
    #: `Send` written -> first chunk of the turn received.
    send_to_first_chunk_s: float
    #: `open()` call -> first chunk: the user-visible time to first token.
    total_s: float


@dataclass(frozen=True)
class TtftReport:
    driver: str
    cold: list[TtftSample] = field(default_factory=list)
    warm: list[TtftSample] = field(default_factory=list)

    def medians(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for mode, samples in (("cold", self.cold), ("warm", self.warm)):
            for name in ("open_s", "send_to_first_chunk_s", "total_s"):
                values = [getattr(s, name) for s in samples]
                out[f"{mode}_{name}"] = statistics.median(values) if values else math.nan
        return out


@dataclass(frozen=True)
class StreamReport:
    chunks: int
    batches: int
    #: Per-chunk driver -> host latency (CLOCK_MONOTONIC stamp in the chunk to receipt).
    latency_p50_s: float
    latency_p99_s: float
    latency_max_s: float
    #: First chunk -> last chunk received.
    duration_s: float
    chunks_per_s: float


async def _run_turn(session: DriverSession, turn_id: str) -> float:
    """Read the whole turn; return when its first chunk arrived (perf_counter)."""
    first: float | None = None
    async for item in session.events:
        if isinstance(item, SessionEnded):
            raise RuntimeError(f"driver session ended during the turn: {item.error}")
        now = time.perf_counter()
        for event in item:
            if first is None and isinstance(event, ChunkEvent) and event.turn_id == turn_id:
                first = now
            if isinstance(event, TurnEnd) and event.turn_id == turn_id:
                if first is None:
                    raise RuntimeError(f"turn ended without a chunk: {event}")
                return first
    raise RuntimeError("events closed before the turn ended")


async def _one(
    sup: Supervisor, mode: Literal["cold", "warm"], topic: str, opts: SessionOptions, text: str
) -> TtftSample:
    if mode == "warm":
        await sup.prewarm(opts, topic_id=topic)
    t0 = time.perf_counter()
    session = await sup.open(topic, opts)
    t1 = time.perf_counter()
    await session.send(Send(turn_id="bench", text=text))
    t2 = time.perf_counter()
    first = await _run_turn(session, "bench")
    await sup.close(topic)
    return TtftSample(mode, t1 - t0, first - t2, first - t0)


async def measure_ttft(
    *,
    runs: int = 5,
    driver: str = "scripted",
    options: Mapping[str, Any] | None = None,
    model: str = "",
    text: str = "hello",
    registry: DriverRegistry | None = None,
    base_env: Mapping[str, str] | None = None,
    secrets: Mapping[str, str] | None = None,
    workdir: str | None = None,
) -> TtftReport:
    """Cold and warm time to first chunk, `runs` of each, alternating (so drift hits both).

    `options` are the driver's `Init` options; for the scripted driver the default is an
    immediate answer (`chunk_rate=0`, `tool_pause=0`).
    """
    if options is None and driver == "scripted":
        options = {"chunk_rate": 0, "tool_pause": 0, "scenario": "echo"}
    report = TtftReport(driver)
    with tempfile.TemporaryDirectory(prefix="hostd-bench-") as tmp:
        sup = Supervisor(
            registry or DriverRegistry.discover(),
            base_env=base_env,
            workdir_root=workdir or tmp,
            idle_ttl=math.inf,
            max_warm=max(1, runs),
        )
        async with trio.open_nursery() as nursery:
            await nursery.start(sup.serve)
            try:
                for i in range(runs):
                    for mode in ("cold", "warm"):
                        # One working dir for all runs: the warm key must match the open's.
                        opts = SessionOptions(
                            driver=driver,
                            model=model,
                            working_dir=os.path.join(tmp, "wd"),
                            options=dict(options or {}),
                            secrets=dict(secrets or {}),
                        )
                        sample = await _one(sup, mode, f"bench-{mode}-{i}", opts, text)
                        (report.cold if mode == "cold" else report.warm).append(sample)
            finally:
                with trio.CancelScope(shield=True):
                    await sup.aclose()
    return report


async def measure_stream(
    *,
    chunks: int = 10_000,
    chunk_size: int = 64,
    rate: float = 0.0,
    registry: DriverRegistry | None = None,
    base_env: Mapping[str, str] | None = None,
) -> StreamReport:
    """Stream `chunks` bench chunks from the scripted driver through the supervisor.

    Each chunk carries the driver's CLOCK_MONOTONIC at emit time (`<ns>:` prefix), so the
    latency is driver emit -> host receipt including the harness writer, the pipe, the
    reader and the events channel.
    """
    latencies: list[float] = []
    batches = 0
    with tempfile.TemporaryDirectory(prefix="hostd-bench-") as tmp:
        sup = Supervisor(
            registry or DriverRegistry.discover(),
            base_env=base_env,
            workdir_root=tmp,
            idle_ttl=math.inf,
            max_warm=0,
        )
        async with trio.open_nursery() as nursery:
            await nursery.start(sup.serve)
            try:
                session = await sup.open("stream", SessionOptions(driver="scripted"))
                await session.send(
                    Send(turn_id="s", text=f"/bench {chunks} size={chunk_size} rate={rate}")
                )
                first = last = 0.0
                async for item in session.events:
                    if isinstance(item, SessionEnded):
                        raise RuntimeError(f"driver session ended: {item.error}")
                    now_ns = time.monotonic_ns()
                    batches += 1
                    done = False
                    for event in item:
                        if isinstance(event, ChunkEvent) and isinstance(event.chunk, TextDelta):
                            # Deltas of one pass leave the harness merged: one stamp per
                            # `chunk_size` characters.
                            text = event.chunk.text
                            for i in range(0, len(text), chunk_size):
                                stamp = int(text[i : i + chunk_size].split(":", 1)[0])
                                latencies.append((now_ns - stamp) / 1e9)
                            last = time.perf_counter()
                            first = first or last
                        elif isinstance(event, TurnEnd):
                            done = True
                    if done:
                        break
            finally:
                with trio.CancelScope(shield=True):
                    await sup.aclose()
    latencies.sort()
    n = len(latencies)
    duration = last - first
    return StreamReport(
        chunks=n,
        batches=batches,
        latency_p50_s=latencies[n // 2] if n else math.nan,
        latency_p99_s=latencies[min(n - 1, int(n * 0.99))] if n else math.nan,
        latency_max_s=latencies[-1] if n else math.nan,
        duration_s=duration,
        chunks_per_s=n / duration if duration > 0 else math.inf,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hostd_dev.bench_ttft", description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--connect-delay",
        type=float,
        default=0.0,
        help="scripted driver: simulated vendor connect (seconds)",
    )
    parser.add_argument("--stream-chunks", type=int, default=10_000)
    args = parser.parse_args(argv)

    async def run() -> dict[str, Any]:
        options = {
            "chunk_rate": 0,
            "tool_pause": 0,
            "scenario": "echo",
            "connect_delay": args.connect_delay,
        }
        ttft = await measure_ttft(runs=args.runs, options=options)
        stream = await measure_stream(chunks=args.stream_chunks)
        return {
            "ttft_medians": ttft.medians(),
            "ttft_samples": [asdict(s) for s in ttft.cold + ttft.warm],
            "stream": asdict(stream),
        }

    json.dump(trio.run(run), sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
