"""Benchmark: the ACP driver (real claude-agent-acp) beside the Claude Code driver, on the same
fake Messages API: time to first text chunk cold / warm / in-session, and RSS.

- cold: the clock starts before the driver process is spawned (Python start, driver import,
  agent / CLI spawn and initialise, session, request);
- warm: a driver that answered `Prewarm` (what the warm pool does): only the request;
- in-session: the second turn of the warm driver;
- RSS: the driver process and, separately, everything under it (agent, Claude CLI), after
  the in-session turn.

    .venv/bin/python -m tests.acp.bench [--runs N] [--json]

`measure()` is what `scripts/bench acp-ttft` calls. Needs scripts/setup (the drivers and
`.cache/npm-acp`).
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

from hostd_protocol.common import PROTOCOL_VERSION
from hostd_protocol.driver_messages import ChunkEvent, Init, Prewarm, Send, TurnEnd, Warmed
from tests.acp.support import CLAUDE_AGENT_ACP, base_env, write_agents_file
from tests.claude.driver_peer import DriverProcess, Peer, offline_env
from tests.fakes.anthropic_api import FakeAnthropicAPI, Rule, text, user_says

PROMPT = "bench hello"
DRIVERS = {"acp": "hostd_acp", "claude-code": "hostd_claude_code"}


@dataclass
class DriverBench:
    """Medians over the runs (seconds, MiB) for one driver; samples kept for spread."""

    driver: str
    cold: list[float] = field(default_factory=list)
    warm: list[float] = field(default_factory=list)
    in_session: list[float] = field(default_factory=list)
    prewarm: list[float] = field(default_factory=list)
    driver_rss: list[float] = field(default_factory=list)
    tree_rss: list[float] = field(default_factory=list)

    def medians(self) -> dict[str, float]:
        return {
            k: statistics.median(v) for k, v in asdict(self).items() if isinstance(v, list) and v
        }

    def summary(self) -> str:
        m = self.medians()
        return (
            f"{self.driver}: first chunk cold {m['cold'] * 1000:.0f} ms, warm "
            f"{m['warm'] * 1000:.0f} ms, in-session {m['in_session'] * 1000:.0f} ms "
            f"(prewarm {m['prewarm'] * 1000:.0f} ms); RSS driver {m['driver_rss']:.0f} MiB "
            f"+ children {m['tree_rss']:.0f} MiB"
        )


def _rss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _descendants(pid: int) -> list[int]:
    out: list[int] = []
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            for task in Path(f"/proc/{p}/task").iterdir():
                kids = [int(x) for x in (task / "children").read_text().split()]
                out += kids
                todo += kids
        except OSError:
            pass
    return out


def _setup(driver: str, home: Path, base_url: str) -> tuple[dict[str, str], dict[str, Any]]:
    if driver == "acp":
        write_agents_file(home, {"claude": (str(CLAUDE_AGENT_ACP), [])})
        (home / "tmp").mkdir(parents=True, exist_ok=True)
        env = base_env(
            home,
            ANTHROPIC_BASE_URL=base_url,
            ANTHROPIC_API_KEY="test-key",
            CLAUDE_CODE_MAX_RETRIES="2",
            CLAUDE_CONFIG_DIR=str(home / ".claude"),
            TMPDIR=str(home / "tmp"),
        )
        return env, {"agent": "claude"}
    return offline_env(base_url), {}


async def _first_chunk(peer: Peer, turn_id: str, t0: float | None = None) -> float:
    t0 = time.perf_counter() if t0 is None else t0
    await peer.send(Send(turn_id=turn_id, text=PROMPT))
    first = 0.0
    while True:
        event = await peer.recv()
        if not first and isinstance(event, ChunkEvent):
            first = time.perf_counter() - t0
        if isinstance(event, TurnEnd) and event.turn_id == turn_id:
            assert event.status == "success", (event, peer.proc.stderr_text()[-2000:])
            return first


async def _one_run(driver: str, base_url: str, root: Path, out: DriverBench) -> None:
    home = root / f"{driver}-{len(out.cold)}"
    env, options = _setup(driver, home, base_url)
    module = DRIVERS[driver]

    def init(name: str) -> Init:
        return Init(
            protocol_version=PROTOCOL_VERSION, working_dir=str(home / name), options=options
        )

    t0 = time.perf_counter()
    cold = DriverProcess(env, module=module)
    try:
        async with cold.attach() as peer:
            await peer.handshake(init("cold"))
            out.cold.append(await _first_chunk(peer, "c", t0))
    finally:
        cold.close()
        cold.cleanup()
    warm = DriverProcess(env, module=module)
    try:
        async with warm.attach() as peer:
            await peer.handshake(init("warm"))
            t1 = time.perf_counter()
            await peer.send(Prewarm())
            while not isinstance(await peer.recv(), Warmed):
                pass
            out.prewarm.append(time.perf_counter() - t1)
            out.warm.append(await _first_chunk(peer, "w1"))
            out.in_session.append(await _first_chunk(peer, "w2"))
            out.driver_rss.append(_rss_mib(warm.pid))
            out.tree_rss.append(sum(_rss_mib(p) for p in _descendants(warm.pid)))
    finally:
        warm.close()
        warm.cleanup()


async def measure_async(runs: int = 3) -> dict[str, DriverBench]:
    """Both drivers, runs interleaved, against one fake API."""
    results = {name: DriverBench(name) for name in DRIVERS}
    with FakeAnthropicAPI([Rule(user_says(PROMPT), text("Hello from the fake."))]) as api:
        with tempfile.TemporaryDirectory(prefix="hab", dir="/tmp") as d:
            for _ in range(runs):
                for name, bench in results.items():
                    await _one_run(name, api.base_url, Path(d), bench)
    return results


def measure(runs: int = 3) -> dict[str, DriverBench]:
    result: dict[str, DriverBench] = trio.run(measure_async, runs)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = measure(args.runs)
    if args.json:
        print(json.dumps({k: asdict(v) | {"medians": v.medians()} for k, v in results.items()}))
    else:
        for bench in results.values():
            print(bench.summary())


if __name__ == "__main__":
    main()
