"""Store: many topics streaming at once; how far persistence lags behind the stream, how often
the writer commits, and whether the stream waits for the store.

A sampler thread in the bench process watches the daemon's database (its own read-only
SQLite connection, WAL lets it read beside the writer): it polls `PRAGMA data_version` every
millisecond, and at each commit it reads the tail of every streaming row. Bench chunks carry
the driver's CLOCK_MONOTONIC stamp, so the newest persisted stamp of a row says how old the
stored copy is. Lag of a commit = its time - the emit time of the oldest chunk it persisted
(the chunk after the previously persisted one): how long that chunk was only in memory.
Commits per second count `data_version` changes (a lower bound if two commits fall in one
millisecond). One window per topic measures delivery latency meanwhile: if the stream waited
for the store it would show there.
"""

from __future__ import annotations

import re
import sqlite3
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hostd_dev.bench.control import create_topics
from hostd_dev.bench.latency import STAMP_SIZE, add_cpu, bench_script, stream_rounds
from hostd_dev.bench.procs import DaemonProc
from hostd_dev.bench.report import Context, Result
from hostd_dev.bench.stats import percentile

GOAL = "persistence never more than one flush interval behind; the stream never waits on it"

FLUSH_INTERVAL = 0.1
RATE = 25.0
#: The issue asks for 1,000; each scripted driver is a ~27 MiB Python process.
FULL_TOPICS = 200


@dataclass
class Sampler:
    db: Path
    period_ns: int
    commits: list[int] = field(default_factory=list)
    lags_ms: list[float] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        conn = sqlite3.connect(self.db, check_same_thread=False, isolation_level=None)
        try:
            conn.execute("PRAGMA query_only = 1")
            last_version = conn.execute("PRAGMA data_version").fetchone()[0]
            newest: dict[str, int] = {}
            while not self._stop.wait(0.001):
                version = conn.execute("PRAGMA data_version").fetchone()[0]
                if version == last_version:
                    continue
                now = time.monotonic_ns()
                last_version = version
                self.commits.append(now)
                rows = conn.execute(
                    "SELECT id, substr(parts, -?) FROM rows "
                    "WHERE status = 'pending' AND role = 'assistant'",
                    (STAMP_SIZE + 8,),
                ).fetchall()
                for row_id, tail in rows:
                    stamp = _stamp(tail)
                    if stamp is None:
                        continue
                    prev = newest.get(row_id)
                    if prev is not None and stamp > prev:
                        oldest_unsaved = prev + self.period_ns
                        self.lags_ms.append(max(0.0, (now - oldest_unsaved) / 1e6))
                    newest[row_id] = stamp
        finally:
            conn.close()


#: The end of a row's parts (JSON text) when its last part is bench text: the last chunk's
#: stamp, its padding, and the closing of the text part and of the list.
_LAST_STAMP = re.compile(r'(\d+):x*"\}\]$')


def _stamp(tail: str | None) -> int | None:
    """The driver stamp of the last bench chunk at the end of a row's parts."""
    found = _LAST_STAMP.search(tail) if tail else None
    return int(found.group(1)) if found else None


def run(ctx: Context) -> Result:
    n_topics, duration = (3, 0.5) if ctx.quick else (FULL_TOPICS, 5.0)
    n_chunks = int(RATE * duration)
    res = Result("store", GOAL)
    res.notes.append(
        f"{n_topics} topics (scaled down from 1,000: a scripted driver is a ~27 MiB process, "
        f"1,000 of them do not fit this machine), {RATE:g} chunks/s each for {duration:g} s, "
        f"1 window per topic; flush interval {FLUSH_INTERVAL * 1000:.0f} ms"
    )
    problems: list[str] = []
    with DaemonProc(flush_interval=FLUSH_INTERVAL) as daemon:
        topics = create_topics(daemon, n_topics)
        sampler: Sampler | None = None

        def during() -> None:
            nonlocal sampler
            sampler = Sampler(daemon.paths.db_path, int(1e9 / RATE))
            sampler.start()

        def on_round(k: int, report: dict[str, Any]) -> None:
            nonlocal sampler
            assert sampler is not None
            sampler.stop()
            s, sampler = sampler, None
            commits = s.commits
            span = (commits[-1] - commits[0]) / 1e9 if len(commits) > 1 else 0.0
            flush_ms = FLUSH_INTERVAL * 1000
            lag_max = max(s.lags_ms, default=float("nan"))
            res.add("persistence lag p99", "ms", percentile(s.lags_ms, 99))
            res.add("persistence lag max", "ms", lag_max)
            res.add("max lag / flush interval", "x", lag_max / flush_ms, goal=("<=", 1.0))
            res.add("commits per second", "/s", (len(commits) - 1) / span if span else 0.0)
            lat = report["latency_us"]
            res.add("stream: emit -> window p50", "ms", lat["p50"] / 1000)
            res.add("stream: emit -> window p99", "ms", lat["p99"] / 1000)
            add_cpu(res, report)
            expected = n_topics * n_chunks
            if lat["n"] != expected:
                problems.append(f"round {k + 1}: {lat['n']} of {expected} chunks measured")
            if report["gaps"] or report["resyncs"] or report["errors"]:
                problems.append(
                    f"round {k + 1}: {report['gaps']} gaps, {report['resyncs']} "
                    f"resyncs, {report['errors']}"
                )
            ctx.log(
                f"  round {k + 1}: lag max {lag_max:.0f} ms over {len(s.lags_ms)} samples, "
                f"{len(commits)} commits"
            )

        stream_rounds(
            daemon,
            topics,
            1,
            bench_script(n_chunks, RATE),
            ctx.runs,
            on_round,
            warmup=bench_script(5, RATE),
            during=during,
        )
    res.check("every chunk reached every window", not problems, "; ".join(problems[:3]))
    return res
