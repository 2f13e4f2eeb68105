"""Memory: the daemon's RSS idle, with 1,000 idle topics, and with 100 topics streaming.

Idle topics are measured twice: created in this daemon (so each has a live `TopicHost`: its
runtime, replay buffer and tasks), and after a restart (stored, not loaded until used).
Streaming: 100 topics with a driver each at 50 chunks/s and one window each; RSS sampled
while they stream (the drivers are separate processes and not counted).
Baseline: a bare `python -c "import trio, msgspec, apsw"` (what any daemon built on the same
libraries holds before doing anything).
"""

from __future__ import annotations

import subprocess
import threading
import time
from typing import Any

from hostd.bench.control import create_topics, with_client
from hostd.bench.latency import RATE, bench_script, stream_rounds
from hostd.bench.procs import PYTHON, DaemonProc, rss_mib
from hostd.bench.report import Context, Result

GOAL = "daemon RSS <= 60 MB with 1,000 idle topics"

_LIBS = "import trio, msgspec, apsw, platformdirs; import time; time.sleep(30)"


def _bare_rss() -> float:
    proc = subprocess.Popen([PYTHON, "-c", _LIBS])
    try:
        time.sleep(1.5)
        return rss_mib(proc.pid)
    finally:
        proc.kill()
        proc.wait()


def run(ctx: Context) -> Result:
    n_idle = 100 if ctx.quick else 1_000
    n_stream, duration = (5, 1.0) if ctx.quick else (100, 4.0)
    res = Result("memory", GOAL)
    res.notes.append(
        f"{n_idle} idle topics; {n_stream} streaming topics at {RATE:g} chunks/s, 1 window "
        "each; RSS in MiB (1 MiB = 1.05 MB)"
    )
    for _ in range(ctx.runs):
        res.add("bare python + trio, msgspec, apsw", "MiB", _bare_rss(), baseline=True)
        daemon = DaemonProc().start()
        home = daemon.home
        try:
            with_client(daemon, _ping)
            res.add("daemon idle, no topics", "MiB", daemon.rss_mib())
            create_topics(daemon, n_idle)
            with_client(daemon, _ping)
            res.add(
                f"{n_idle} idle topics (created, loaded)",
                "MiB",
                daemon.rss_mib(),
                goal=("<=", 60e6 / 2**20) if n_idle == 1_000 else None,
            )
        finally:
            daemon.own_home = False
            daemon.stop()
        daemon = DaemonProc(home=home).start()
        try:
            with_client(daemon, _ping)
            res.add(f"{n_idle} idle topics (after restart, stored)", "MiB", daemon.rss_mib())
        finally:
            daemon.own_home = True
            daemon.stop()

        res.add(f"{n_stream} topics streaming (peak)", "MiB", _streaming_peak(n_stream, duration))
    return res


def _streaming_peak(n_stream: int, duration: float) -> float:
    """Peak daemon RSS while `n_stream` topics stream (sampled every 100 ms)."""
    with DaemonProc() as daemon:
        topics = create_topics(daemon, n_stream)
        peak: list[float] = []
        stop = threading.Event()

        def sample() -> None:
            while not stop.wait(0.1):
                peak.append(daemon.rss_mib())

        sampler = threading.Thread(target=sample, daemon=True)

        def during() -> None:
            if not sampler.is_alive():
                sampler.start()

        def on_round(k: int, report: dict[str, Any]) -> None:
            pass

        try:
            stream_rounds(
                daemon,
                topics,
                1,
                bench_script(int(RATE * duration)),
                1,
                on_round,
                warmup=bench_script(5),
                during=during,
            )
        finally:
            stop.set()
            if sampler.is_alive():
                sampler.join()
        return max(peak, default=0.0)


async def _ping(client: Any) -> None:
    await client.ping()
