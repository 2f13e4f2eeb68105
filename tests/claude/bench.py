"""Benchmark of the Claude Code driver on the fake Messages API: time to first token cold
(a new driver process: Python start, SDK import, CLI spawn and initialise, request) vs warm
(a prewarmed driver: only the request), the memory of driver + CLI, and how long an
interrupt takes (Interrupt sent mid-answer -> the driver's `TurnEnd(stopped)`; the answer
hangs after its first delta, so only the interrupt ends it).

    .venv/bin/python -m tests.claude.bench [--runs N] [--json]

`measure()` is the function `scripts/bench` calls; it returns a `ClaudeBench` whose
`as_dict()` is JSON-ready. Needs the `hostd-claude-code` driver installed (scripts/setup).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import trio

from hostd_dev.bench.cpu_stats import rss_mib
from hostd_protocol.driver_messages import (
    ChunkEvent,
    Interrupt,
    Prewarm,
    Send,
    TurnEnd,
    Warmed,
)
from tests.claude.driver_peer import DriverProcess, Peer, init_for, offline_env
from tests.fakes.anthropic_api import FakeAnthropicAPI, Rule, hang, text, user_says

PROMPT = "bench hello"
#: The fake answers this with one delta, then hangs until the interrupt.
HANG_PROMPT = "bench interrupt"


@dataclass
class ClaudeBench:
    """Medians over `runs` (seconds and MiB); the per-run lists are kept for spread."""

    runs: int
    cold_ttft_s: float
    warm_ttft_s: float
    prewarm_s: float
    driver_rss_mib: float
    cli_rss_mib: float
    interrupt_s: float = 0.0
    cold_samples: list[float] = field(default_factory=list)
    warm_samples: list[float] = field(default_factory=list)
    interrupt_samples: list[float] = field(default_factory=list)

    @property
    def speedup(self) -> float:
        return self.cold_ttft_s / self.warm_ttft_s if self.warm_ttft_s else 0.0

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["speedup"] = round(self.speedup, 1)
        return d

    def summary(self) -> str:
        return (
            f"claude-code driver, median of {self.runs}: time to first token cold "
            f"{self.cold_ttft_s * 1000:.0f} ms, warm {self.warm_ttft_s * 1000:.0f} ms "
            f"({self.speedup:.0f}x; prewarm took {self.prewarm_s * 1000:.0f} ms); RSS driver "
            f"{self.driver_rss_mib:.0f} MiB + CLI {self.cli_rss_mib:.0f} MiB; interrupt -> "
            f"stopped {self.interrupt_s * 1000:.0f} ms"
        )


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for tid in Path(f"/proc/{pid}/task").iterdir():
            out += [int(x) for x in (tid / "children").read_text().split()]
    except OSError:
        pass
    return out


async def _first_token(peer: Peer, turn_id: str) -> float:
    """Send the prompt; seconds until the first text chunk (then drain to the turn end)."""
    t0 = time.perf_counter()
    await peer.send(Send(turn_id=turn_id, text=PROMPT))
    first = 0.0
    while True:
        event = await peer.recv()
        if not first and isinstance(event, ChunkEvent):
            first = time.perf_counter() - t0
        if isinstance(event, TurnEnd):
            assert event.status == "success", event
            return first


async def _interrupt(peer: Peer, turn_id: str) -> float:
    """Seconds from an Interrupt sent at the first chunk of a hanging answer to its end."""
    await peer.send(Send(turn_id=turn_id, text=HANG_PROMPT))
    t0 = 0.0
    while True:
        event = await peer.recv()
        if not t0 and isinstance(event, ChunkEvent):
            t0 = time.perf_counter()
            await peer.send(Interrupt(turn_id=turn_id))
        if isinstance(event, TurnEnd):
            assert event.status == "stopped", event
            return time.perf_counter() - t0


async def _one_run(
    base_url: str, root: Path, i: int
) -> tuple[float, float, float, float, float, float]:
    env = offline_env(base_url)
    # Cold: the clock starts before the process is spawned.
    t0 = time.perf_counter()
    cold = DriverProcess(env)
    try:
        async with cold.attach() as peer:
            await peer.handshake(init_for(root / f"cold-{i}"))
            await peer.send(Send(turn_id="c", text=PROMPT))
            cold_ttft = 0.0
            while True:
                event = await peer.recv()
                if not cold_ttft and isinstance(event, ChunkEvent):
                    cold_ttft = time.perf_counter() - t0
                if isinstance(event, TurnEnd):
                    assert event.status == "success", (event, cold.stderr_text()[-2000:])
                    break
    finally:
        cold.close()
        cold.cleanup()
    # Warm: prewarm first (what the supervisor's warm pool does), then time the send.
    warm = DriverProcess(env)
    try:
        async with warm.attach() as peer:
            await peer.handshake(init_for(root / f"warm-{i}"))
            t1 = time.perf_counter()
            await peer.send(Prewarm())
            assert isinstance(await peer.recv(), Warmed)
            prewarm_s = time.perf_counter() - t1
            warm_ttft = await _first_token(peer, "w")
            driver_rss = rss_mib(warm.pid)
            cli_rss = sum(rss_mib(c) for c in _children(warm.pid))
            interrupt_s = await _interrupt(peer, "i")
    finally:
        warm.close()
        warm.cleanup()
    return cold_ttft, warm_ttft, prewarm_s, driver_rss, cli_rss, interrupt_s


async def measure_async(runs: int = 3, base_url: str | None = None) -> ClaudeBench:
    """Run the benchmark (inside trio). Starts its own fake API unless `base_url` is given."""
    api = None
    if base_url is None:
        api = FakeAnthropicAPI([
            Rule(user_says(PROMPT), text("Hello from the fake.")),
            Rule(user_says(HANG_PROMPT), hang("Partial answer")),
        ]).start()
        base_url = api.base_url
    try:
        with tempfile.TemporaryDirectory(prefix="hostd-cc-bench-") as d:
            samples = [await _one_run(base_url, Path(d), i) for i in range(runs)]
    finally:
        if api is not None:
            api.stop()
    cold, warm, prewarm, drss, crss, stops = (list(x) for x in zip(*samples, strict=True))
    return ClaudeBench(
        runs=runs,
        cold_ttft_s=statistics.median(cold),
        warm_ttft_s=statistics.median(warm),
        prewarm_s=statistics.median(prewarm),
        driver_rss_mib=statistics.median(drss),
        cli_rss_mib=statistics.median(crss),
        interrupt_s=statistics.median(stops),
        cold_samples=cold,
        warm_samples=warm,
        interrupt_samples=stops,
    )


def measure(runs: int = 3, base_url: str | None = None) -> ClaudeBench:
    """Synchronous entry point (starts its own trio run)."""
    result: ClaudeBench = trio.run(measure_async, runs, base_url)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="print JSON instead of a sentence")
    args = parser.parse_args()
    bench = measure(args.runs)
    print(json.dumps(bench.as_dict(), indent=2) if args.json else bench.summary())


if __name__ == "__main__":
    main()
