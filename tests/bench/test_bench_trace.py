"""The per-stage trace: the daemon's hooks are off by default, and the bench's join of the
daemon's and the windows' files attributes each stage to the right span."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from hostd_dev.bench.trace import analyse


def _write(path: Path, records: list[list[object]]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def test_tracing_is_off_unless_the_environment_asks() -> None:
    code = "from hostd.shell import trace; print(trace.ENABLED, trace.PATH)"
    env = {k: v for k, v in os.environ.items() if k != "HOSTD_TRACE"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["False"]


def test_trace_dumps_at_exit_only_what_was_recorded(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    code = (
        "from hostd.shell import trace\n"
        "trace.batch_read(b := [1])\n"
        "trace.batch_taken(b, first=True)\n"
        "trace.published('t1', 7, 0)\n"
        "trace.batch_done()\n"
        "trace.published('t1', 8, 0)\n"  # not a driver event: not recorded
        "trace.written([('t1', 7)], 99)\n"
        "trace.send_in('t2')\n"
        "trace.send_out('t2')\n"
    )
    env = dict(os.environ, HOSTD_TRACE=str(path))
    subprocess.run([sys.executable, "-c", code], env=env, check=True)
    kinds = [r[:2] for r in map(json.loads, path.read_text().splitlines())]
    assert kinds == [["event", "t1"], ["write", "t1"], ["send-in", "t2"], ["send-out", "t2"]]


def test_analyse_splits_the_path_into_stages(tmp_path: Path) -> None:
    ms = 1_000_000
    daemon, windows = tmp_path / "d.jsonl", tmp_path / "w.jsonl"
    # One event: emitted at 0, read at 1 ms, pumped at 2, runtime done 4, fanned out 5,
    # written to two windows at 7 and 8, read by them at 10 and 12. A commit from 3 to 6.
    _write(
        daemon,
        [
            ["event", "t", 1, 1 * ms, 2 * ms, 4 * ms, 5 * ms],
            ["write", "t", 1, 11, 8 * ms],
            ["write", "t", 1, 10, 7 * ms],
            ["commit", 3 * ms, 6 * ms],
            # a second event with no commit overlapping it
            ["event", "t", 2, 20 * ms, 20 * ms, 20 * ms, 20 * ms],
            ["write", "t", 2, 10, 21 * ms],
        ],
    )
    _write(
        windows,
        [
            ["read", "t", 1, 12 * ms, 0],
            ["read", "t", 1, 10 * ms, 0],
            ["read", "t", 2, 22 * ms, 19 * ms],
            ["read", "t", 3, 30 * ms, 29 * ms],  # never traced by the daemon
        ],
    )
    tr = analyse(daemon, windows)
    st = tr.stages
    assert st["driver -> pipe read"] == [1.0, 1.0]
    assert st["pipe read -> pump"] == [1.0, 0.0]
    assert st["runtime"] == [2.0, 0.0]
    assert st["fan-out"] == [1.0, 0.0]
    assert sorted(st["fan-out -> socket write"]) == [1.0, 2.0, 3.0]
    # k-th earliest write paired with the k-th earliest receipt: 7->10, 8->12, 21->22
    assert sorted(st["socket write -> window read"]) == [1.0, 3.0, 4.0]
    assert sorted(st["driver -> window read (total)"]) == [3.0, 10.0, 12.0]
    assert tr.commit_ms == [3.0]
    assert tr.host_in_commit_ms == [7.0] and tr.host_no_commit_ms == [1.0]
    assert tr.unmatched == 1


def test_analyse_without_files_is_empty(tmp_path: Path) -> None:
    tr = analyse(tmp_path / "none", tmp_path / "none2")
    assert tr.rows() == [] and tr.unmatched == 0
