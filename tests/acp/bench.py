"""Benchmark: the ACP driver (real claude-agent-acp) beside the Claude Code driver, on the same
fake Messages API: time to first text chunk cold / prewarmed / in-session, and RSS.

- cold: the clock starts before the driver process is spawned (Python start, driver import,
  agent / CLI spawn and initialise, session, request);
- warm: a driver that answered `Prewarm` (what the warm pool does), the first prompt sent at
  once; `warm, idle`: the same after the driver sat idle for `IDLE_S` (a user who opened a
  topic and is typing: the CLI's own start-up work is over by then);
- in-session turn 2 / 3: the next prompts of the warm driver, each with its stage split: the
  prompt written -> the model request at the fake API (adapter + CLI), and that request ->
  the first chunk back at the host (CLI + adapter on the way back);
- RSS: the driver process and, separately, everything under it, after the in-session turns.

Drivers: `acp` (the current claude-agent-acp, @agentclientprotocol/claude-agent-acp, with the
Claude Code CLI its own npm SDK ships), `claude-code` (hostd's driver, the CLI bundled in the
claude-agent-sdk wheel) and `acp/same-cli` (the same claude-agent-acp started with
`CLAUDE_CODE_EXECUTABLE` = the wheel's CLI and hostd's quiet-mode environment, in-session
only): the adapters may differ in the CLI version they bundle, and the same-CLI row says
which part of a difference is the adapter. With `old_peer` also `acp/zed-0.23.1`: the same
project's last release under its old name, @zed-industries/claude-agent-acp 0.23.1 (CLI
2.1.83), the peer of sessions 4 and 5. Every claude-agent-acp runs with the user setting
`permissions.defaultMode = "default"`, hostd's Claude Code driver's mode (the current package
otherwise starts in Claude Code's `auto` mode; `tests.acp.support.claude_settings`).

    .venv/bin/python -m tests.acp.bench [--runs N] [--old-peer] [--json]

`measure()` is what `scripts/bench acp-ttft` calls. Needs scripts/setup (the drivers and
`.cache/npm-acp`).
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import json
import os
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from hostd_dev.bench.cpu_stats import rss_mib
from hostd_protocol.common import PROTOCOL_VERSION
from hostd_protocol.driver_messages import ChunkEvent, Init, Prewarm, Send, TurnEnd, Warmed
from tests.acp.support import (
    CLAUDE_AGENT_ACP,
    OLD_CLAUDE_AGENT_ACP,
    base_env,
    claude_settings,
    write_agents_file,
)
from tests.claude.driver_peer import DriverProcess, Peer, offline_env
from tests.fakes.anthropic_api import FakeAnthropicAPI, Rule, text, user_says
from tests.polling import eventually

PROMPT = "bench hello"
#: Bench name -> driver module.
DRIVERS = {
    "acp": "hostd_acp",
    "claude-code": "hostd_claude_code",
    "acp/same-cli": "hostd_acp",
    "acp/zed-0.23.1": "hostd_acp",
}
#: The old peer (only with `old_peer`).
OLD = "acp/zed-0.23.1"
#: Drivers measured cold and prewarmed (the same-CLI peer only in session).
FULL = ("acp", "claude-code", OLD)
#: Seconds a prewarmed driver sits idle before the `warm, idle` first prompt.
IDLE_S = 1.0
#: Hostd's quiet-mode switches for the CLI (`hostd_claude_code.config.QUIET_ENV`), given to
#: the same-CLI peer too so that only the adapter differs.
QUIET = (
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
    "DISABLE_AUTOUPDATER=1",
    "DISABLE_TELEMETRY=1",
    "DISABLE_ERROR_REPORTING=1",
    "DISABLE_BUG_COMMAND=1",
    "CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY=1",
)
SAMPLES = (
    "cold",
    "warm",
    "warm_idle",
    "turn2",
    "turn3",
    "turn2_to_api",
    "turn3_to_api",
    "turn2_from_api",
    "turn3_from_api",
    "prewarm",
    "driver_rss",
    "tree_rss",
)


@dataclass
class DriverBench:
    """Per-run samples (seconds, MiB) of one driver, by name (see `SAMPLES`)."""

    driver: str
    samples: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in SAMPLES})

    def medians(self) -> dict[str, float]:
        return {k: statistics.median(v) for k, v in self.samples.items() if v}

    def summary(self) -> str:
        m = self.medians()
        ms = {k: v * 1000 for k, v in m.items() if not k.endswith("rss")}
        parts = []
        if "cold" in ms:
            parts.append(f"cold {ms['cold']:.0f} ms")
        if "warm" in ms:
            idle = ms["warm_idle"]
            parts.append(f"warm {ms['warm']:.0f} ms (after {IDLE_S:g} s idle {idle:.0f})")
        parts.append(
            f"in-session turn 2 {ms['turn2']:.1f} ms (to the API {ms['turn2_to_api']:.1f}), "
            f"turn 3 {ms['turn3']:.1f} ms (to the API {ms['turn3_to_api']:.1f})"
        )
        rss = ""
        if "driver_rss" in m:
            rss = f"; RSS driver {m['driver_rss']:.0f} MiB + children {m['tree_rss']:.0f} MiB"
        return f"{self.driver}: first chunk " + ", ".join(parts) + rss


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


def bundled_cli() -> Path | None:
    """The Claude Code CLI inside the claude-agent-sdk wheel (without importing the SDK)."""
    spec = importlib.util.find_spec("claude_agent_sdk")
    if spec is None or spec.origin is None:
        return None
    cli = Path(spec.origin).parent / "_bundled" / "claude"
    return cli if cli.exists() else None


def _setup(driver: str, home: Path, base_url: str) -> tuple[dict[str, str], dict[str, Any]]:
    if driver.startswith("acp"):
        agent = OLD_CLAUDE_AGENT_ACP if driver == OLD else CLAUDE_AGENT_ACP
        command: tuple[str, list[str]] = (str(agent), [])
        cli = bundled_cli()
        if driver == "acp/same-cli" and cli is not None:
            # claude-agent-acp reads CLAUDE_CODE_EXECUTABLE; the agents file passes only the
            # variables it names, so the agent is started through env(1).
            command = ("/usr/bin/env", [f"CLAUDE_CODE_EXECUTABLE={cli}", *QUIET, command[0]])
        write_agents_file(home, {"claude": command})
        (home / "tmp").mkdir(parents=True, exist_ok=True)
        claude_settings(home / ".claude")
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


async def _first_chunk(
    peer: Peer, api: FakeAnthropicAPI, turn_id: str, t0: float | None = None
) -> tuple[float, float, float]:
    """Send PROMPT; (seconds to the first chunk, to the model request at the fake API, from
    that request to the first chunk). Clocks: `time.monotonic`, as the fake's stamps."""
    before = len(api.message_requests)
    t0 = time.monotonic() if t0 is None else t0
    await peer.send(Send(turn_id=turn_id, text=PROMPT))
    first = 0.0
    while True:
        event = await peer.recv()
        if not first and isinstance(event, ChunkEvent):
            first = time.monotonic()
        if isinstance(event, TurnEnd) and event.turn_id == turn_id:
            assert event.status == "success", (event, peer.proc.stderr_text()[-2000:])
            break
    # The turn's model request (the CLI may also send tool-less side requests, e.g. titles).
    asked = [r.received_at for r in api.message_requests[before:] if r.has_tools]
    at_api = asked[0] if asked else first
    return first - t0, at_api - t0, first - at_api


async def _prewarmed(peer: Peer, init: Init) -> float:
    await peer.handshake(init)
    t1 = time.monotonic()
    await peer.send(Prewarm())
    while not isinstance(await peer.recv(), Warmed):
        pass
    return time.monotonic() - t1


async def _one_run(driver: str, api: FakeAnthropicAPI, root: Path, out: DriverBench) -> None:
    home = root / f"{driver.replace('/', '-')}-{len(out.samples['turn2'])}"
    env, options = _setup(driver, home, api.base_url)
    module = DRIVERS[driver]
    s = out.samples

    def init(name: str) -> Init:
        return Init(
            protocol_version=PROTOCOL_VERSION, working_dir=str(home / name), options=options
        )

    if driver in FULL:
        t0 = time.monotonic()
        cold = DriverProcess(env, module=module)
        try:
            async with cold.attach() as peer:
                await peer.handshake(init("cold"))
                s["cold"].append((await _first_chunk(peer, api, "c", t0))[0])
        finally:
            cold.close()
            cold.cleanup()
        idle = DriverProcess(env, module=module)
        try:
            async with idle.attach() as peer:
                await _prewarmed(peer, init("idle"))
                await trio.sleep(IDLE_S)  # the scenario: a user who is still typing
                s["warm_idle"].append((await _first_chunk(peer, api, "i1"))[0])
        finally:
            idle.close()
            idle.cleanup()
    warm = DriverProcess(env, module=module)
    try:
        async with warm.attach() as peer:
            s["prewarm"].append(await _prewarmed(peer, init("warm")))
            first = await _first_chunk(peer, api, "w1")
            if driver in FULL:
                s["warm"].append(first[0])
            for k in (2, 3):
                total, to_api, from_api = await _first_chunk(peer, api, f"w{k}")
                s[f"turn{k}"].append(total)
                s[f"turn{k}_to_api"].append(to_api)
                s[f"turn{k}_from_api"].append(from_api)
            s["driver_rss"].append(rss_mib(warm.pid))
            s["tree_rss"].append(sum(rss_mib(p) for p in _descendants(warm.pid)))
    finally:
        warm.close()
        warm.cleanup()


def _adopt_orphans() -> bool:
    """Make this process the reaper of its orphaned descendants (Linux `PR_SET_CHILD_SUBREAPER`):
    an agent's CLI outlives its killed agent, and its CPU time should count as the bench's
    own (`os.times().children_*`), not as "other processes"."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(36, 1, 0, 0, 0) == 0)  # 36: PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        return False


async def _reap_orphans(grace: float = 2.0) -> None:
    """Reap adopted orphans once every driver of a run is closed (none of ours is alive);
    one still dying gets `grace` seconds."""

    def none_left() -> bool:
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return True  # no children left
            if pid == 0:
                return False

    await eventually(none_left, within=grace, every=0.01)


async def measure_async(runs: int = 3, old_peer: bool = False) -> dict[str, DriverBench]:
    """The drivers, runs interleaved, against one fake API."""
    names = [
        d
        for d in DRIVERS
        if (d != "acp/same-cli" or bundled_cli() is not None) and (d != OLD or old_peer)
    ]
    results = {name: DriverBench(name) for name in names}
    adopted = _adopt_orphans()
    with FakeAnthropicAPI([Rule(user_says(PROMPT), text("Hello from the fake."))]) as api:
        with tempfile.TemporaryDirectory(prefix="hab", dir="/tmp") as d:
            for _ in range(runs):
                for name, bench in results.items():
                    await _one_run(name, api, Path(d), bench)
                if adopted:
                    await _reap_orphans()
    return results


def measure(runs: int = 3, old_peer: bool = False) -> dict[str, DriverBench]:
    result: dict[str, DriverBench] = trio.run(measure_async, runs, old_peer)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--old-peer", action="store_true", help="also the 0.23.1 package")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = measure(args.runs, args.old_peer)
    if args.json:
        print(
            json.dumps(
                {k: {"samples": v.samples, "medians": v.medians()} for k, v in results.items()}
            )
        )
    else:
        for bench in results.values():
            print(bench.summary())


if __name__ == "__main__":
    main()
