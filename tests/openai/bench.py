"""Benchmark of the OpenAI driver against its peers, side by side in one run.

The loops: hostd-openai through the real daemon and a real client (tests/openai/
bench_daemon.py), hostd-openai alone on its pipe (the driver's own share), a bare `openai` SDK
loop (tests/openai/bare_openai_loop.py), and, where hostd-dev's bench dependencies are
installed, openai-agents and pydantic-ai (hostd_dev/bench/openai_peers.py). Same fake
OpenAI-compatible server (tests/fakes/openai_api.py, Nagle off), same stdio MCP server
(tests/fakes/mcp_test_server.py), rounds interleaved (each round runs every loop once). Per
loop:

- cold: process start -> first text chunk (Python start, imports, MCP server connect, request;
  through the daemon: a new topic's send -> first chunk at the window);
- prewarmed: a set-up process (driver: `Prewarm` -> `Warmed`; daemon: `prewarm` and a warm
  spare; the other loops: their `ready`), a new conversation -> first text chunk;
- in-session: a next turn of the same conversation -> first text chunk (median of 7 turns);
- tool step: on the fake server's clock, the end of the response that asked for a tool ->
  the arrival of the request carrying its result (MCP call + loop overhead), median of 5 tool
  turns after an untimed first one (a fresh MCP server's first call pays its lazy set-up);
- RSS of the loop process after those turns (MCP server not included; through the daemon:
  the topic's driver process, the daemon's own RSS apart);
- driver only, hung MCP: a fresh driver process with a live MCP server and one that never
  answers (`initialize` unanswered), a send right after `Ready` -> first text chunk (the
  issue 32 bar: within 3 s; the turn waits for servers at most `mcp_startup_wait`, 2 s).

    .venv/bin/python -m tests.openai.bench [--runs N] [--json]

`measure()` is what `scripts/bench openai-loop` calls.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import IO, Any

import trio

from hostd_protocol.common import PROTOCOL_VERSION, HistoryMessage
from hostd_protocol.driver_messages import ChunkEvent, Init, Prewarm, Send, TurnEnd, Warmed
from tests.claude.driver_peer import DriverProcess, Peer
from tests.fakes.openai_api import (
    FakeOpenAI,
    Recorded,
    Rule,
    Text,
    ToolCalls,
    after_tools,
    user_says,
)
from tests.openai.peer import REPO, tools_server

HELLO = "bench hello"
TOOL = "bench tool"
#: The peers' MCP tools keep their own names (hostd-openai and the bare loop prefix `t__`).
TOOL_PLAIN = "bench tool plain"
ANSWER = "Hello from the fake server."
METRICS = ("cold", "prewarmed", "in_session", "tool_step", "rss", "hung_mcp")
#: Per round, the in-session and tool-step figures are medians of this many turns (a 2-core
#: machine shared with other work makes single turns bimodal).
IN_SESSION_TURNS = 7
TOOL_TURNS = 5
#: Seconds a loop process may live before the bench kills it (a hung loop, not a slow one).
LOOP_DEADLINE = 300.0


def rules() -> list[Rule]:
    return [
        Rule(user_says(HELLO), Text(ANSWER)),
        Rule(user_says(TOOL), ToolCalls([("t__echo", {"text": "x"})])),
        Rule(after_tools(TOOL), Text("Tool done.")),
        Rule(user_says(TOOL_PLAIN), ToolCalls([("echo", {"text": "x"})])),
        Rule(after_tools(TOOL_PLAIN), Text("Tool done.")),
    ]


#: The loops' names, in table order.
DAEMON = "hostd-openai"
PIPE = "hostd-openai, driver pipe only"
BARE = "bare openai SDK"
AGENTS = "openai-agents"
PYDANTIC = "pydantic-ai"
#: peer -> the module it needs (hostd-dev's bench dependencies).
PEER_MODULES = {AGENTS: "agents", PYDANTIC: "pydantic_ai"}


@dataclass
class LoopFigures:
    """Seconds (rss in MiB), one value per round."""

    cold: list[float] = field(default_factory=list)
    prewarmed: list[float] = field(default_factory=list)
    in_session: list[float] = field(default_factory=list)
    tool_step: list[float] = field(default_factory=list)
    rss: list[float] = field(default_factory=list)
    #: Driver only: send -> first chunk with a hung MCP server beside a live one.
    hung_mcp: list[float] = field(default_factory=list)

    def median(self, metric: str) -> float:
        values: list[float] = getattr(self, metric)
        return statistics.median(values) if values else float("nan")


@dataclass
class OpenAIBench:
    runs: int
    #: loop name -> its figures, in table order.
    loops: dict[str, LoopFigures]
    #: The daemon's RSS after each round (it serves every topic; not the loop's own).
    daemon_rss: list[float] = field(default_factory=list)
    #: Why a peer did not run (its package is not installed).
    missing: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "runs": self.runs,
            "loops": {name: asdict(f) for name, f in self.loops.items()},
            "daemon_rss": self.daemon_rss,
            "missing": self.missing,
        }

    def summary(self) -> str:
        def ms(x: float) -> str:
            return f"{x * 1000:.1f}"

        names = list(self.loops)
        parts = [f"median of {self.runs} rounds, {' / '.join(names)}:"]
        for metric, label in (
            ("cold", "cold"),
            ("prewarmed", "prewarmed"),
            ("in_session", "in-session"),
            ("tool_step", "tool step"),
        ):
            values = " / ".join(ms(f.median(metric)) for f in self.loops.values())
            parts.append(f"{label} {values} ms;")
        rss = " / ".join(f"{f.median('rss'):.0f}" for f in self.loops.values())
        parts.append(f"RSS {rss} MiB;")
        if PIPE in self.loops:
            hung = self.loops[PIPE].median("hung_mcp")
            parts.append(f"hung MCP server beside a live one, send -> first chunk {ms(hung)} ms")
        return " ".join(parts)


def _rss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def tool_step(requests: list[Recorded]) -> float:
    """Response end of the tool-call answer -> arrival of the request with the tool result."""
    for i, req in enumerate(requests[:-1]):
        nxt = requests[i + 1]
        if req.last_role == "user" and nxt.last_role == "tool" and req.ended_at is not None:
            return nxt.received_at - req.ended_at
    raise AssertionError("no tool step among the requests")


# --- the driver ---------------------------------------------------------------------------------


def _driver_env() -> dict[str, str]:
    import os

    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "LANG": "C.UTF-8",
        "HOME": tempfile.gettempdir(),
    }


#: An MCP server that never answers (reads its stdin to the end: it goes with the driver).
HUNG_SERVER = {"command": sys.executable, "args": ["-c", "import sys; sys.stdin.read()"]}


def _init(api: FakeOpenAI, state: Path, *, hung: bool = False) -> Init:
    servers: dict[str, Any] = {"t": tools_server(state)}
    if hung:
        servers["hung"] = HUNG_SERVER
    return Init(
        protocol_version=PROTOCOL_VERSION,
        model="fake-model",
        working_dir=str(state),
        options={
            "base_url": api.base_url,
            "api_key_env": "",
            "mcp_servers": servers,
            "allowed_tools": ["*"],
        },
    )


async def _first_chunk(peer: Peer, send: Send) -> float:
    t0 = time.perf_counter()
    await peer.send(send)
    first = 0.0
    while True:
        event = await peer.recv()
        if not first and isinstance(event, ChunkEvent):
            first = time.perf_counter() - t0
        if isinstance(event, TurnEnd):
            assert event.status == "success", event
            return first


async def _pipe_round(api: FakeOpenAI, root: Path, out: LoopFigures) -> None:
    t0 = time.perf_counter()
    cold = DriverProcess(_driver_env(), module="hostd_openai", cwd=str(REPO))
    try:
        async with cold.attach() as peer:
            await peer.send(_init(api, root / "cold"))
            await peer.recv()  # Ready
            await peer.send(Send(turn_id="c", text=HELLO))
            while True:
                event = await peer.recv()
                if isinstance(event, ChunkEvent):
                    out.cold.append(time.perf_counter() - t0)
                    break
            await peer.until(TurnEnd)
    finally:
        cold.close()
        cold.cleanup()
    hung = DriverProcess(_driver_env(), module="hostd_openai", cwd=str(REPO))
    try:
        async with hung.attach() as peer:
            await peer.send(_init(api, root / "hung", hung=True))
            await peer.recv()  # Ready
            out.hung_mcp.append(await _first_chunk(peer, Send(turn_id="h", text=HELLO)))
    finally:
        hung.close()
        hung.cleanup()
    warm = DriverProcess(_driver_env(), module="hostd_openai", cwd=str(REPO))
    try:
        async with warm.attach() as peer:
            await peer.send(_init(api, root / "warm"))
            await peer.recv()  # Ready
            await peer.send(Prewarm())
            assert isinstance(await peer.recv(), Warmed)
            out.prewarmed.append(await _first_chunk(peer, Send(turn_id="w1", text=HELLO)))
            history = [
                HistoryMessage(role="user", text=HELLO),
                HistoryMessage(role="assistant", text=ANSWER),
            ]
            out.in_session.append(
                statistics.median(
                    [
                        await _first_chunk(peer, Send(turn_id=f"s{k}", text=HELLO, history=history))
                        for k in range(IN_SESSION_TURNS)
                    ]
                )
            )
            # The first call of a fresh MCP server pays its lazy set-up (tens of ms, both
            # loops alike): it is not timed.
            await _first_chunk(peer, Send(turn_id="w3", text=TOOL, history=history))
            steps = []
            for k in range(TOOL_TURNS):
                n0 = len(api.requests)
                await _first_chunk(peer, Send(turn_id=f"x{k}", text=TOOL, history=history))
                steps.append(tool_step(api.requests[n0:]))
            out.tool_step.append(statistics.median(steps))
            out.rss.append(_rss_mib(warm.pid))
    finally:
        warm.close()
        warm.cleanup()


# --- the loops on the line protocol: the bare SDK loop and the peers -----------------------------


def loop_argv(name: str, api: FakeOpenAI, state: Path) -> list[str]:
    """The command line of a loop that speaks bare_openai_loop's line protocol."""
    if name == BARE:
        module = ["tests.openai.bare_openai_loop"]
    else:
        module = ["hostd_dev.bench.openai_peers", name]
    return [sys.executable, "-m", *module, api.base_url, "fake-model", str(state)]


class LoopProcess:
    def __init__(self, argv: list[str]) -> None:
        self.proc = subprocess.Popen(
            argv,
            cwd=str(REPO),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            bufsize=1,
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        # A loop that hangs is killed, so a read of its output ends (and the bench says so).
        self.watchdog = threading.Timer(LOOP_DEADLINE, self.proc.kill)
        self.watchdog.daemon = True
        self.watchdog.start()
        self.stdin: IO[str] = self.proc.stdin
        self.stdout: IO[str] = self.proc.stdout

    def command(self, line: str) -> None:
        self.stdin.write(line + "\n")
        self.stdin.flush()

    def expect(self, word: str) -> str:
        line = self.stdout.readline()
        if not line.startswith(word):
            raise AssertionError(f"bare loop said {line!r}, expected {word!r}")
        return line

    def turn(self, cmd: str) -> float:
        t0 = time.perf_counter()
        self.command(cmd)
        self.expect("first")
        first = time.perf_counter() - t0
        self.expect("done")
        return first

    def close(self) -> None:
        self.watchdog.cancel()
        self.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.stdout.close()


def _loop_round(name: str, api: FakeOpenAI, root: Path, out: LoopFigures) -> None:
    tool = TOOL if name == BARE else TOOL_PLAIN
    t0 = time.perf_counter()
    cold = LoopProcess(loop_argv(name, api, root / f"{name}-cold"))
    try:
        cold.command(f"new {HELLO}")
        cold.expect("ready")
        cold.expect("first")
        out.cold.append(time.perf_counter() - t0)
        cold.expect("done")
    finally:
        cold.close()
    warm = LoopProcess(loop_argv(name, api, root / f"{name}-warm"))
    try:
        warm.expect("ready")
        out.prewarmed.append(warm.turn(f"new {HELLO}"))
        out.in_session.append(
            statistics.median([warm.turn(f"next {HELLO}") for _ in range(IN_SESSION_TURNS)])
        )
        warm.turn(f"next {tool}")  # see _pipe_round: the first tool call is not timed
        steps = []
        for _ in range(TOOL_TURNS):
            n0 = len(api.requests)
            warm.turn(f"next {tool}")
            steps.append(tool_step(api.requests[n0:]))
        out.tool_step.append(statistics.median(steps))
        warm.command("rss")
        out.rss.append(float(warm.expect("rss").split()[1]))
    finally:
        warm.close()


# --- entry points -------------------------------------------------------------------------------


def missing_peers() -> dict[str, str]:
    """Peers whose package is not installed -> why (scripts/setup installs them)."""
    return {
        name: f"{module} is not installed (hostd-dev's bench dependencies: scripts/setup)"
        for name, module in PEER_MODULES.items()
        if importlib.util.find_spec(module) is None
    }


async def measure_async(runs: int = 3, *, warm_up: bool = True) -> OpenAIBench:
    """`runs` measured rounds (after an uncounted one that warms the OS caches, unless
    `warm_up` is false), each running every loop once in the same order."""
    from tests.openai.bench_daemon import daemon_round, running_daemon

    missing = missing_peers()
    names = [DAEMON, PIPE, BARE, *(p for p in PEER_MODULES if p not in missing)]
    out = OpenAIBench(runs, {name: LoopFigures() for name in names}, missing=missing)
    with FakeOpenAI(rules()) as api, tempfile.TemporaryDirectory(prefix="hostd-oai-bench-") as d:
        home = Path(tempfile.mkdtemp(prefix="hob", dir="/tmp"))  # short: AF_UNIX path limit
        try:
            async with running_daemon(home) as daemon:
                for i in range(runs + 1 if warm_up else runs):
                    root = Path(d) / f"r{i}"
                    counted = i or not warm_up
                    figs = out.loops if counted else {n: LoopFigures() for n in names}
                    await daemon_round(
                        daemon, api, root, figs[DAEMON], hello=HELLO, tool=TOOL,
                        in_session_turns=IN_SESSION_TURNS, tool_turns=TOOL_TURNS,
                    )
                    if counted:
                        out.daemon_rss.append(daemon.daemon_rss())
                    await _pipe_round(api, root, figs[PIPE])
                    for name in names[2:]:
                        await trio.to_thread.run_sync(_loop_round, name, api, root, figs[name])
        finally:
            shutil.rmtree(home, ignore_errors=True)
    return out


def measure(runs: int = 3, *, warm_up: bool = True) -> OpenAIBench:
    result: OpenAIBench = trio.run(partial(measure_async, runs, warm_up=warm_up))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    bench = measure(args.runs)
    print(json.dumps(bench.as_dict(), indent=2) if args.json else bench.summary())


if __name__ == "__main__":
    main()
