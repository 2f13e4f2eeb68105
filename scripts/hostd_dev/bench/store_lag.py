"""Store: many topics streaming at once; how far persistence lags behind the stream, how often
the writer commits, and whether the stream waits for the store.

A sampler thread in the bench process watches the daemon's database (its own read-only
SQLite connection, WAL lets it read beside the writer): it polls `PRAGMA data_version` every
millisecond, and at each commit it reads the newest stored chunk of every streaming row (the
tail of its last streamed piece, or of its whole parts). Bench chunks carry the driver's
CLOCK_MONOTONIC stamp. When the round is over the sampler reads every row whole, so it knows
each chunk's stamp in order: the lag of a commit for a row = the commit's time - the emit time
of the oldest chunk that commit persisted (the chunk after the newest one stored before), how
long that chunk was only in memory. Exact, also when a late driver bunches its chunks (the
first sighting of a row has no "before": the sampler starts after the turns were sent).
Commits per second count `data_version` changes (a lower bound if two commits fall in one
millisecond). One window per topic measures delivery latency meanwhile: if the
stream waited for the store it would show there. Works on both store layouts (whole rows
only, before schema 8; whole parts + `row_parts` pieces after), so a before tree run through
`HOSTD_BENCH_DAEMON` is measured the same way.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hostd_dev.bench import load_driver
from hostd_dev.bench.control import create_topics
from hostd_dev.bench.latency import STAMP_SIZE, add_cpu, bench_script, stream_rounds
from hostd_dev.bench.procs import DaemonProc
from hostd_dev.bench.report import Context, Result
from hostd_dev.bench.stats import percentile
from hostd_dev.bench.trace import analyse

GOAL = "persistence never more than one flush interval behind; the stream never waits on it"

FLUSH_INTERVAL = 0.1
RATE = 25.0
#: The issue asks for 1,000; each scripted driver is a ~27 MiB Python process.
FULL_TOPICS = 200

_TAIL = STAMP_SIZE + 8
#: The newest stored text of every streaming row: its last piece, else its whole parts.
_NEWEST_PIECES = (
    "SELECT r.id, coalesce((SELECT substr(p.chunks, -?) FROM row_parts p WHERE p.row_id = r.id "
    "ORDER BY p.id DESC LIMIT 1), substr(r.parts, -?)) FROM rows r "
    "WHERE r.status = 'pending' AND r.role = 'assistant'"
)
_NEWEST_WHOLE = (
    "SELECT id, substr(parts, -?) FROM rows WHERE status = 'pending' AND role = 'assistant'"
)


@dataclass
class Sampler:
    db: Path
    commits: list[int] = field(default_factory=list)
    #: (commit time, row id, newest stored stamp) per streaming row per commit.
    seen: list[tuple[int, str, int]] = field(default_factory=list)
    lags_ms: list[float] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop sampling, then read the rows whole and compute the lags."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.lags_ms = self._lags()

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.db, check_same_thread=False, isolation_level=None)
        conn.execute("PRAGMA query_only = 1")
        return conn

    def _run(self) -> None:
        conn = self._connect()
        try:
            pieces = _has_pieces(conn)
            sql, args = (_NEWEST_PIECES, (_TAIL, _TAIL)) if pieces else (_NEWEST_WHOLE, (_TAIL,))
            last_version = conn.execute("PRAGMA data_version").fetchone()[0]
            newest: dict[str, int] = {}
            while not self._stop.wait(0.001):
                version = conn.execute("PRAGMA data_version").fetchone()[0]
                if version == last_version:
                    continue
                now = time.monotonic_ns()
                last_version = version
                self.commits.append(now)
                for row_id, tail in conn.execute(sql, args).fetchall():
                    stamp = _stamp(tail)
                    if stamp is not None and stamp != newest.get(row_id):
                        newest[row_id] = stamp
                        self.seen.append((now, row_id, stamp))
        finally:
            conn.close()

    def _lags(self) -> list[float]:
        """Lag of each (commit, row) that stored new chunks, from the rows' stamps in order."""
        conn = self._connect()
        try:
            stamps = {rid: _stamps(conn, rid) for rid in {rid for _, rid, _ in self.seen}}
        finally:
            conn.close()
        index = {rid: {s: i for i, s in enumerate(ss)} for rid, ss in stamps.items()}
        stored: dict[str, int] = {}
        lags = []
        for now, rid, stamp in self.seen:
            i = index[rid].get(stamp)
            if i is None:
                continue
            # A row's first sighting has no lag: the sampler starts once every topic was
            # sent its turn, so earlier commits of the row may have gone unseen.
            if rid in stored and i > stored[rid]:
                lags.append(max(0.0, (now - stamps[rid][stored[rid] + 1]) / 1e6))
            stored[rid] = i
        return lags


def _has_pieces(conn: sqlite3.Connection) -> bool:
    found = conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'row_parts'").fetchone()
    return found is not None


def _stamps(conn: sqlite3.Connection, row_id: str) -> list[int]:
    """Every bench chunk's stamp in a row, in order (its whole parts, then its pieces)."""
    texts = [conn.execute("SELECT parts FROM rows WHERE id = ?", (row_id,)).fetchone()[0]]
    if _has_pieces(conn):
        texts += [
            c
            for (c,) in conn.execute(
                "SELECT chunks FROM row_parts WHERE row_id = ? ORDER BY id", (row_id,)
            )
        ]
    text = "".join(p.get("text", "") for t in texts for p in json.loads(t))
    return [int(m) for m in _CHUNK_STAMP.findall(text)]


#: The end of a row's parts or piece (JSON text) when its last part is bench text: the last
#: chunk's stamp, its padding, and the closing of the text part and of the list.
_LAST_STAMP = re.compile(r'(\d+):x*"\}\]$')
#: A bench chunk in a row's text: its stamp, then padding.
_CHUNK_STAMP = re.compile(r"(\d+):x*")


def _stamp(tail: str | None) -> int | None:
    """The driver stamp of the last bench chunk at the end of a row's parts."""
    found = _LAST_STAMP.search(tail) if tail else None
    return int(found.group(1)) if found else None


def run(ctx: Context) -> Result:
    """`--scales 50x1,100x1,...`: other topic counts (the windows figure is ignored: one window
    per topic); their rows are named by the count. `--load-drivers`: the drivers streaming
    (bench-load unless said: 200 scripted drivers at 25 chunks/s took ~1 core of this 2-core
    machine themselves, so the store's lag measured the load generator)."""
    duration = 0.5 if ctx.quick else 5.0
    counts = [t for t, _ in ctx.scales] or [3 if ctx.quick else FULL_TOPICS]
    n_chunks = int(RATE * duration)
    res = Result("store", GOAL)
    res.notes.append(
        f"{'/'.join(map(str, counts))} topics (scaled down from 1,000: a scripted driver is a "
        f"~27 MiB process, 1,000 of them do not fit this machine), {RATE:g} chunks/s each for "
        f"{duration:g} s, 1 window per topic; flush interval {FLUSH_INTERVAL * 1000:.0f} ms; "
        f"load drivers: {', '.join(ctx.load_drivers)}"
    )
    if "bench-load" in ctx.load_drivers:
        load_driver.build()  # once, before 200 drivers would each build it
    problems: list[str] = []
    for n_topics in counts:
        for driver in ctx.load_drivers:
            label = f"{n_topics} topics: " if ctx.scales else ""
            label += f"{driver}: " if len(ctx.load_drivers) > 1 else ""
            if not ctx.trace:
                _rounds(ctx, res, problems, n_topics, n_chunks, label, driver)
                continue
            # `--trace`: the daemon records its store commits (start, end): the batch times.
            with tempfile.TemporaryDirectory(prefix="hostd-trace-") as tmp:
                daemon_file = Path(tmp) / "daemon.jsonl"
                os.environ["HOSTD_TRACE"] = str(daemon_file)
                try:
                    _rounds(ctx, res, problems, n_topics, n_chunks, label, driver)
                finally:
                    del os.environ["HOSTD_TRACE"]
                commit_ms = analyse(daemon_file, Path(tmp) / "none.jsonl").commit_ms
                res.add(f"{label}store batch (commit) time p50", "ms", percentile(commit_ms, 50))
                res.add(f"{label}store batch (commit) time p99", "ms", percentile(commit_ms, 99))
                res.add(
                    f"{label}store batch (commit) time max",
                    "ms",
                    max(commit_ms, default=float("nan")),
                )
    res.check("every chunk reached every window", not problems, "; ".join(problems[:3]))
    return res


def _rounds(
    ctx: Context,
    res: Result,
    problems: list[str],
    n_topics: int,
    n_chunks: int,
    label: str,
    driver: str,
) -> None:
    with DaemonProc(flush_interval=FLUSH_INTERVAL) as daemon:
        topics = create_topics(daemon, n_topics, driver=driver)
        sampler: Sampler | None = None

        def during() -> None:
            nonlocal sampler
            sampler = Sampler(daemon.paths.db_path)
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
            res.add(f"{label}persistence lag p99", "ms", percentile(s.lags_ms, 99))
            res.add(f"{label}persistence lag max", "ms", lag_max)
            res.add(f"{label}max lag / flush interval", "x", lag_max / flush_ms, goal=("<=", 1.0))
            res.add(f"{label}max lag - flush interval", "ms", lag_max - flush_ms, goal=("<=", 10.0))
            res.add(f"{label}commits per second", "/s", (len(commits) - 1) / span if span else 0.0)
            lat = report["latency_us"]
            res.add(f"{label}stream: emit -> window p50", "ms", lat["p50"] / 1000)
            res.add(f"{label}stream: emit -> window p99", "ms", lat["p99"] / 1000)
            add_cpu(res, report)
            res.add(
                f"{label}daemon run-queue wait (share of round)",
                "",
                round(report["runqueue"]["daemon"], 2),
            )
            # Each process's CPU per event and its run-queue wait, where the goal misses.
            wall, chunks = report["wall_s"], n_topics * n_chunks
            for who, per in (("daemon", "chunk"), ("drivers", "chunk"), ("windows", "frame")):
                cpu = report["cpu_cores"][who] * wall / chunks * 1e6
                res.add(f"{label}{who} CPU per {per}", "us", cpu)
            for who in ("windows", "drivers"):
                wait = round(report["runqueue"][who], 3)
                res.add(
                    f"{label}run-queue wait of {who} (share of round; drivers summed)", "", wait
                )
            expected = n_topics * n_chunks
            if lat["n"] != expected:
                problems.append(f"round {k + 1}: {lat['n']} of {expected} chunks measured")
            if report["gaps"] or report["resyncs"] or report["errors"]:
                problems.append(
                    f"round {k + 1}: {report['gaps']} gaps, {report['resyncs']} "
                    f"resyncs, {report['errors']}"
                )
            ctx.log(
                f"  {label}round {k + 1}: lag max {lag_max:.0f} ms over {len(s.lags_ms)} samples, "
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
