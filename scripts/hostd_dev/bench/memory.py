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
from typing import Any

from hostd_dev.bench.control import create_topics, with_client
from hostd_dev.bench.cpu_stats import rss_mib
from hostd_dev.bench.latency import RATE, bench_script, stream_rounds
from hostd_dev.bench.procs import PYTHON, DaemonProc
from hostd_dev.bench.report import Context, Result

GOAL = "daemon RSS <= 60 MB with 1,000 idle topics"

_LIBS = "import trio, msgspec, apsw, platformdirs, sys; print(flush=True); sys.stdin.read()"


def _bare_rss() -> float:
    proc = subprocess.Popen([PYTHON, "-c", _LIBS], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdin is not None
    try:
        proc.stdout.readline()  # imported
        return rss_mib(proc.pid)
    finally:
        proc.stdin.close()
        proc.stdout.close()
        proc.wait()


def run(ctx: Context) -> Result:
    n_idle = 50 if ctx.quick else 1_000
    n_stream, duration = (3, 0.5) if ctx.quick else (100, 4.0)
    res = Result("memory", GOAL)
    res.notes.append(
        f"{n_idle} idle topics; then, in the restarted daemon, {n_stream} more topics streaming "
        f"at {RATE:g} chunks/s with 1 window each; RSS in MiB (the 60 MB goal is 57.2 MiB)"
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
        daemon.own_home = True
        with daemon:
            with_client(daemon, _ping)
            res.add(f"{n_idle} idle topics (after restart, stored)", "MiB", daemon.rss_mib())
            res.add(
                f"+ {n_stream} topics streaming (peak)",
                "MiB",
                _streaming_peak(daemon, n_stream, duration),
            )
    return res


def _streaming_peak(daemon: DaemonProc, n_stream: int, duration: float) -> float:
    """Peak daemon RSS while `n_stream` new topics stream (sampled every 100 ms)."""
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
