"""Failures, timed: the speed figures the tests no longer assert (session 9).

The tests check what a failure does (its own turn ends with its own error, the other topics
go on, a crash ends the session); how *fast* is a figure of the machine, so it lives here,
against the bounds the tests used to assert (docs/benchmarks.md, "Timing checks moved out of
the tests (session 9)"). Real daemon subprocess, real scripted driver processes, one window
(this process's client) per topic.

Per run:
- a good topic streams 100 chunks/s while four drivers fail at once beside it (garbage,
  an oversized frame, a crash and garbage at the handshake): the good topic's longest gap
  between two chunks (was `max(gaps) < 1.0` in tests/reliability/test_driver_failures.py),
  and each failing topic's send -> turn ended (was `FAIL_BOUND = 6 s`);
- a driver that crashes mid-turn (`/crash`, which writes its CLOCK_MONOTONIC to stderr just
  before `os._exit`): that stamp -> the window sees the turn end (was "crash reached the topic
  after < 1.0 s" in tests/shell/test_supervisor.py, and the conformance suite's `crash_bound`);
- a driver that ignores the interrupt (`/hang`): stop -> the window sees `stopped` (the 3 s
  interrupt grace, then the kill; was `FAIL_BOUND` in test_stray_late_and_hanging_drivers);
- an OpenAI topic's stdio MCP server that ignores SIGTERM and end of input, in a session of
  its own: delete-topic -> the server process is gone (was "gone by 3 s" in
  tests/openai/test_mcp_lifetime.py; issue 32's bar). Needs the openai driver and the repo's
  tests/ (the fake OpenAI server): else the row is left out with a note.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import trio

from hostd_dev.bench.control import with_client
from hostd_dev.bench.procs import DaemonProc
from hostd_dev.bench.report import Context, Result

GOAL = (
    "good topic's longest gap <= 1 s while 4 drivers fail; a failure ends its turn <= 6 s; "
    "crash -> window <= 1 s; stop of a hung driver <= 6 s; a stubborn MCP server gone <= 3 s "
    "after its topic is deleted"
)

#: The four failures of test_misbehaving_drivers_fail_their_topic_only: text, driver options.
BAD: dict[str, tuple[str, dict[str, Any]]] = {
    "garbage": ("/text before\n/garbage\nq", {}),
    "oversized frame": ("/text before\n/oversized\nq", {}),
    "crash at handshake": ("q", {"crash_at_handshake": True}),
    "garbage at handshake": ("q", {"garbage_at_handshake": True}),
}
GOOD = "/chunks 400 size=8 rate=100\ngood"
#: Each bound only ends a hang of the bench itself.
HANG = 120.0


async def _turn(client: Any, topic_id: str, text: str, on_chunk: Any = None) -> tuple[Any, float]:
    """Send `text`, follow the turn to its end: (TurnEnded, send -> end seconds)."""
    from hostd_protocol.client_messages import RowAppended, TurnEnded

    async with client.attach(topic_id, max_rows=1) as sub:
        t0 = time.perf_counter()
        sent = await client.send(topic_id, text)
        async for ev in sub:
            if isinstance(ev, RowAppended) and on_chunk is not None:
                await on_chunk(ev)
            if isinstance(ev, TurnEnded) and ev.turn_id == sent.turn_id:
                return ev, time.perf_counter() - t0
    raise RuntimeError("the subscription ended before the turn did")


async def _failures_beside_a_stream(client: Any, res: Result) -> None:
    good = await client.create_topic(driver="scripted", title="good")
    bad = {
        name: await client.create_topic(driver="scripted", title=name, options=opts)
        for name, (_, opts) in BAD.items()
    }
    arrivals: list[float] = []
    started = trio.Event()
    ended: dict[str, tuple[Any, float]] = {}

    async def chunk(_ev: Any) -> None:
        arrivals.append(time.perf_counter())
        started.set()

    async def one(name: str) -> None:
        ended[name] = await _turn(client, bad[name].id, BAD[name][0])

    async def failing() -> None:
        await started.wait()  # the good topic streams before the failures start
        async with trio.open_nursery() as n:
            for name in BAD:
                n.start_soon(one, name)

    async with trio.open_nursery() as n:
        n.start_soon(failing)
        good_end, _ = await _turn(client, good.id, GOOD, on_chunk=chunk)
    if good_end.status != "success":
        raise RuntimeError(f"the good topic's turn ended {good_end.status}: {good_end.error}")
    gaps = [b - a for a, b in itertools.pairwise(arrivals)]
    res.add("good topic: longest gap between chunks (4 drivers failing)", "ms",
            max(gaps) * 1000, goal=("<=", 1000))
    for name, (end, seconds) in ended.items():
        if end.status != "error":
            raise RuntimeError(f"{name}: the turn ended {end.status}, not error")
        res.add(f"{name}: send -> turn ended (error)", "ms", seconds * 1000, goal=("<=", 6000))


async def _crash_to_window(client: Any, res: Result) -> None:
    t = await client.create_topic(driver="scripted", title="crash")
    end, _ = await _turn(client, t.id, "/chunks 10 size=8 rate=100\n/crash 7")
    seen_ns = time.monotonic_ns()
    stamp = re.search(r"monotonic_ns=(\d+)", end.error or "")
    if end.error_code != "driver_crashed" or stamp is None:
        raise RuntimeError(f"the crash turn ended {end.status}: {end.error}")
    res.add("crash mid-turn -> the window sees the turn end", "ms",
            (seen_ns - int(stamp.group(1))) / 1e6, goal=("<=", 1000))


async def _stop_a_hung_driver(client: Any, res: Result) -> None:
    from hostd_protocol.client_messages import RowAppended, TurnEnded

    t = await client.create_topic(driver="scripted", title="hung")
    async with client.attach(t.id, max_rows=1) as sub:
        sent = await client.send(t.id, "/text about to hang\n/hang\nq")
        stopped_at = 0.0
        async for ev in sub:
            if isinstance(ev, RowAppended) and not stopped_at:
                stopped_at = time.perf_counter()
                await client.stop(t.id)
            if isinstance(ev, TurnEnded) and ev.turn_id == sent.turn_id:
                if ev.status != "stopped":
                    raise RuntimeError(f"the hung turn ended {ev.status}: {ev.error}")
                res.add("stop of a driver that ignores it -> stopped", "ms",
                        (time.perf_counter() - stopped_at) * 1000, goal=("<=", 6000))
                return


#: An MCP server that ignores SIGTERM and end of input (the marker word in its argv).
STUBBORN = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\ntime.sleep(600)\n"


def _alive(pid: int, marker: str) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return marker.encode() in fh.read().split(b"\0")  # a zombie's argv is empty
    except OSError:
        return False


async def _mcp_server_gone(client: Any, api_url: str, res: Result) -> None:
    from hostd.testing.processes import marked

    marker = f"hostd-bench-mcp-{uuid.uuid4().hex}"
    t = await client.create_topic(
        driver="openai", model="fake-model", title="mcp",
        options={"base_url": api_url, "api_key_env": "", "mcp_startup_wait": 0,
                 "mcp_servers": {"s": {"command": sys.executable,
                                       "args": ["-c", STUBBORN, marker]}}},
    )
    end, _ = await _turn(client, t.id, "hello")
    if end.status != "success":
        raise RuntimeError(f"the MCP topic's turn ended {end.status}: {end.error}")
    # A process's start and end are no events we can wait on: polled (a bench, not a test).
    while True:
        pids = marked(marker)
        if pids:
            break
        await trio.sleep(0.01)
    t0 = time.perf_counter()
    await client.delete_topic(t.id)
    while True:
        if not any(_alive(pid, marker) for pid in pids):
            break
        await trio.sleep(0.002)
    res.add("stubborn MCP server: delete-topic -> process gone", "ms",
            (time.perf_counter() - t0) * 1000, goal=("<=", 3000))
    for pid in marked(marker):  # never left behind by the bench
        os.kill(pid, 9)


def _fake_openai() -> Any:
    """The fake OpenAI server (a context manager) answering "hello", or a reason string."""
    import importlib.util

    if importlib.util.find_spec("hostd_openai") is None:
        return "the openai driver is not installed (scripts/setup)"
    try:
        from tests.fakes.openai_api import FakeOpenAI, Rule, Text, user_says
    except ImportError:
        return "tests/fakes is not importable (run from the repo root)"
    return FakeOpenAI([Rule(user_says("hello"), Text("Hi."))])


def run(ctx: Context) -> Result:
    res = Result("failures", GOAL)
    res.notes.append(
        "the bounds are the ones tests/reliability/test_driver_failures.py, "
        "tests/shell/test_supervisor.py and the conformance suite asserted until session 9"
    )

    fake = _fake_openai()
    if isinstance(fake, str):
        res.notes.append(f"MCP server row left out: {fake}")

    async def measure(client: Any) -> None:
        with trio.fail_after(HANG):
            await _failures_beside_a_stream(client, res)
            await _crash_to_window(client, res)
            await _stop_a_hung_driver(client, res)
            if not isinstance(fake, str):
                await _mcp_server_gone(client, fake.base_url, res)

    with fake if not isinstance(fake, str) else _nothing():
        for _ in range(ctx.runs):
            with DaemonProc() as daemon:
                with_client(daemon, measure)
    return res


@contextlib.contextmanager
def _nothing() -> Iterator[None]:
    yield


__all__ = ["GOAL", "run"]
