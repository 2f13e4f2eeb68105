"""`scripts/bench latency --trace`: where an event's time goes, stage by stage (issue 22).

The daemon records monotonic stamps per event when started with `HOSTD_TRACE=<file>` (see
`hostd.shell.trace`); the windows process records its receipts and the driver's emit stamp
(`WindowConfig.trace_path`). All stamps are CLOCK_MONOTONIC, system-wide, so they subtract.
This module joins the two files by (topic, seq) and reports per-stage percentiles:

| stage | from -> to |
|---|---|
| driver -> pipe read | driver emit stamp -> the session decoded the pipe read |
| pipe read -> pump | waiting in the session's channel for the topic's pump task |
| runtime | pump took the batch -> publish began (coalescing, runtime, effects; includes the
  earlier events of the same batch) |
| fan-out | publish (encode once per encoding, queue for every window) |
| fan-out -> socket write | waiting for the connection's writer task, and the write |
| socket write -> window read | kernel + the windows process's own scheduling |

A window's receipt is paired with one of that event's socket writes: per (topic, seq) the
k-th earliest write with the k-th earliest receipt (the windows process cannot tell which
connection is which window). Store commits: count, duration, and the host span (pipe read
-> last socket write) of events that overlapped a commit against those that did not, which
is the store writer's effect on the event loop (it commits on a worker thread that takes
the GIL).
"""

from __future__ import annotations

import json
from bisect import bisect_left
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hostd_dev.bench.stats import percentile

STAGES = (
    "driver -> pipe read",
    "pipe read -> pump",
    "runtime",
    "fan-out",
    "fan-out -> socket write",
    "socket write -> window read",
    "driver -> window read (total)",
)


@dataclass
class Trace:
    """Per-stage samples (ms) and the commit comparison of one traced run."""

    stages: dict[str, list[float]] = field(default_factory=lambda: {s: [] for s in STAGES})
    commit_ms: list[float] = field(default_factory=list)
    host_in_commit_ms: list[float] = field(default_factory=list)
    host_no_commit_ms: list[float] = field(default_factory=list)
    unmatched: int = 0

    def rows(self) -> list[tuple[str, float, float, int]]:
        """(name, p50, p99, n) for every non-empty series."""
        out = [
            (name, percentile(v, 50), percentile(v, 99), len(v))
            for name, v in self.stages.items()
            if v
        ]
        for name, v in (
            ("store commit duration", self.commit_ms),
            ("host span, event overlapped a commit", self.host_in_commit_ms),
            ("host span, no commit meanwhile", self.host_no_commit_ms),
        ):
            if v:
                out.append((name, percentile(v, 50), percentile(v, 99), len(v)))
        return out


def _lines(path: Path) -> list[list[Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def analyse(daemon_file: Path, windows_file: Path) -> Trace:
    """Join the daemon's and the windows' trace files (see the module docstring)."""
    events: dict[tuple[str, int], tuple[int, int, int, int]] = {}
    writes: dict[tuple[str, int], list[int]] = defaultdict(list)
    commits: list[tuple[int, int]] = []
    for rec in _lines(daemon_file):
        kind = rec[0]
        if kind == "event":
            _, topic, seq, read, pump, runtime, fanout = rec
            events[(topic, seq)] = (read, pump, runtime, fanout)
        elif kind == "write":
            _, topic, seq, _conn, at = rec
            writes[(topic, seq)].append(at)
        elif kind == "commit":
            commits.append((rec[1], rec[2]))
    reads: dict[tuple[str, int], list[tuple[int, int]]] = defaultdict(list)
    for rec in _lines(windows_file):
        _, topic, seq, recv, emit = rec
        reads[(topic, seq)].append((recv, emit))

    out = Trace()
    ms = 1e-6
    st = out.stages
    commits.sort()
    starts = [c[0] for c in commits]
    out.commit_ms = [(end - start) * ms for start, end in commits]
    for key, got in reads.items():
        ev = events.get(key)
        if ev is None or not ev[0]:
            out.unmatched += len(got)
            continue
        read, pump, runtime, fanout = ev
        emit = min(e for _, e in got)
        st["driver -> pipe read"].append((read - emit) * ms)
        st["pipe read -> pump"].append((pump - read) * ms)
        st["runtime"].append((runtime - pump) * ms)
        st["fan-out"].append((fanout - runtime) * ms)
        ws = sorted(writes.get(key, ()))
        for w in ws:
            st["fan-out -> socket write"].append((w - fanout) * ms)
        for w, (recv, _) in zip(ws, sorted(got), strict=False):
            st["socket write -> window read"].append((recv - w) * ms)
        for recv, e in got:
            st["driver -> window read (total)"].append((recv - e) * ms)
        if ws:
            span_end = ws[-1]
            host = (span_end - read) * ms
            # A commit that started before the last write and ended after the pipe read. The
            # writer commits one batch at a time, so ends are in order too: the last commit
            # to start before the write is the only one to check.
            i = bisect_left(starts, span_end)
            overlapped = i > 0 and commits[i - 1][1] > read
            (out.host_in_commit_ms if overlapped else out.host_no_commit_ms).append(host)
    return out
