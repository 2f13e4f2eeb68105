"""The kernel counters the throughput scenario records per turn (`hostd_dev.bench.procs`),
read from a real child process that does a known amount of each thing."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from hostd_dev.bench.cpu_stats import (
    COUNTERS,
    STAT_FIELDS,
    counters_delta,
    machine_cpu_fields,
    others_cpu_seconds,
    proc_counters,
)

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/io"), reason="Linux /proc only")

#: The child says it is ready, waits for a line on stdin, writes WRITES chunks of SIZE bytes
#: to its stdout (one write(2) each), then waits again (so it is alive when it is read).
WRITES, SIZE = 50, 1000
CHILD = f"""
import os, sys
os.write(1, b"r")
sys.stdin.readline()
for _ in range({WRITES}):
    os.write(1, b"x" * {SIZE})
sys.stdin.readline()
"""


def test_counters_see_what_a_child_did() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        assert os.read(proc.stdout.fileno(), 1) == b"r"  # started: its start-up is behind
        before = proc_counters(proc.pid)
        proc.stdin.write(b"go\n")
        proc.stdin.flush()
        got = b""
        while len(got) < WRITES * SIZE:
            got += os.read(proc.stdout.fileno(), 65536)
        delta = counters_delta(before, proc_counters(proc.pid))
        proc.stdin.write(b"end\n")
        proc.stdin.flush()
    finally:
        proc.stdin.close()
        proc.wait(10)
        proc.stdout.close()
    assert set(delta) == set(COUNTERS)
    assert delta["write calls"] == WRITES
    assert delta["bytes written"] == WRITES * SIZE
    assert all(value >= 0 for value in delta.values())


def test_a_gone_process_reads_as_zero() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(10)
    assert proc_counters(proc.pid) == dict.fromkeys(COUNTERS, 0.0)


def test_other_processes_are_counted_after_they_ended() -> None:
    # A child that uses a known amount of CPU (its own clock, not the wall) and is reaped
    # within the span: its time is in its parent's (ours) reaped-children counters, which
    # `others_cpu_seconds` adds, so "other processes" misses nothing that ended meanwhile.
    before = others_cpu_seconds(set())
    fields0 = machine_cpu_fields()
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time\nwhile time.process_time() < 0.3: pass"]
    )
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    used = usage.ru_utime + usage.ru_stime
    tick = 1 / os.sysconf("SC_CLK_TCK")
    assert proc.returncode == 0
    assert others_cpu_seconds(set()) - before >= used - 2 * tick
    fields = machine_cpu_fields()
    assert set(fields) == set(STAT_FIELDS)
    assert all(fields[name] >= fields0[name] for name in STAT_FIELDS)
    assert fields["user"] + fields["system"] > fields0["user"] + fields0["system"]
