"""Throughput: one topic, the scripted driver streaming small text chunks flat out, with 1, 8
and 32 windows attached (real sockets, all hosted by one separate windows process).

Measured per window: characters of streamed content per second, from the first chunk it
received to the last. Baseline: the same driver and script read and decoded by a bare
blocking reader on the pipe, one bare turn right before each host turn (the ratio of a run is
against that turn). Every window must receive exactly the text the driver sent, in
order (sha256 against the scripted driver's deterministic text), with no seq gap or resync.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

from hostd.testing.processes import child_pids
from hostd_dev.bench.control import create_topics, send_all
from hostd_dev.bench.cpu_stats import (
    COUNTERS,
    busy_cpu_seconds,
    counters_delta,
    cpu_seconds,
    exact_cpu_seconds,
    last_cpu,
    proc_counters,
    runqueue_seconds,
    steal_seconds,
)
from hostd_dev.bench.procs import BareDriver, DaemonProc, WindowsProc
from hostd_dev.bench.report import Context, Result
from hostd_dev.bench.stats import median

GOAL = "per-window chars/s >= 0.9 x bare pipe in every run, with 1, 8 and 32 windows"

CHUNK_SIZE = 8


def expected_sha(n: int, size: int) -> str:
    from hostd_scripted.driver import words_text

    return hashlib.sha256(words_text(n * size, 0).encode()).hexdigest()


def run(ctx: Context) -> Result:
    n = 1_000 if ctx.quick else 300_000
    window_counts = (1, 8) if ctx.quick else (1, 8, 32)
    script = f"/chunks n={n} size={CHUNK_SIZE} rate=0"
    want = expected_sha(n, CHUNK_SIZE)
    res = Result("throughput", GOAL)
    res.notes.append(
        f"{n} chunks of {CHUNK_SIZE} chars per turn; rate = chars / (last - first receipt)"
    )

    # Baseline: the driver's pipe, read bare, one turn right before each host turn, so the
    # ratio of each run compares two turns that met the same machine (a block of bare turns
    # first, as before, turned load drift between the blocks into "modes" of the ratio).
    with BareDriver() as bare, DaemonProc() as daemon:
        bare.turn(script)  # warm-up
        for windows in window_counts:
            (tid,) = create_topics(daemon, 1)
            wp = WindowsProc(daemon.socket, [tid], windows, ctx.runs + 1, mode="text")
            bad: list[str] = []
            try:
                wp.read()  # attached
                before = child_pids(daemon.pid)
                send_all(daemon, [tid], script)
                wp.read(timeout=300)  # warm-up: spawns the driver
                drivers = sorted(child_pids(daemon.pid) - before)
                for _ in range(ctx.runs):
                    base, bare_cpu = _bare_turn(res, bare, script, want)
                    pids = [daemon.pid, wp.proc.pid, *drivers[:1]]
                    # Per-thread schedstat run time: a turn's ~0.1 s is 10 of /proc's ticks.
                    cpu_before = [exact_cpu_seconds(p) for p in pids]
                    queued0 = [runqueue_seconds(p) for p in pids]
                    counted0 = proc_counters(drivers[0]) if drivers else None
                    steal0 = steal_seconds()
                    busy0, t0 = busy_cpu_seconds(), time.perf_counter()
                    send_all(daemon, [tid], script)
                    report = wp.read(timeout=300)
                    steal = steal_seconds() - steal0
                    cpu = [exact_cpu_seconds(p) - c for p, c in zip(pids, cpu_before, strict=True)]
                    queued = [runqueue_seconds(p) - q for p, q in zip(pids, queued0, strict=True)]
                    other = busy_cpu_seconds() - busy0 - sum(cpu)
                    wall = time.perf_counter() - t0
                    _round(res, report, windows, base, want, bad)
                    label = f"{windows} windows:"
                    driver_cpu = 0.0
                    res.add(f"{label} daemon CPU per turn", "s", cpu[0])
                    res.add(f"{label} windows process CPU per turn", "s", cpu[1])
                    # Per event: a driver chunk (the daemon), a frame received (the windows).
                    # A turn's 300,000 driver chunks reach the windows as ~135 events (the
                    # harness and the daemon merge a read's deltas): the daemon's work is per
                    # event (one publish, one write per window), so that is its unit too.
                    events = max(1, int(report["windows"][0]["frames"]))
                    frames = windows * events
                    res.add(f"{label} daemon CPU per chunk", "us", cpu[0] / n * 1e6)
                    res.add(f"{label} daemon CPU per event", "us", cpu[0] / events * 1e6)
                    res.add(f"{label} events per turn (frames per window)", "", events)
                    res.add(f"{label} windows CPU per frame", "us", cpu[1] / frames * 1e6)
                    if drivers and counted0 is not None:
                        res.add(f"{label} driver CPU per turn", "s", cpu[2])
                        counted = counters_delta(counted0, proc_counters(drivers[0]))
                        _add_counters(res, f"{label} driver", counted)
                        driver_cpu = counted["CPU, exact"]
                        res.add(f"{label} driver's last CPU", "", last_cpu(drivers[0]))
                    res.add(f"{label} CPU stolen by the hypervisor", "s", steal)
                    if base and driver_cpu and bare_cpu:
                        # Diagnostic, not the goal: the same driver code costs 10-40 % more
                        # CPU in some turns on this VM, bare turns included (docs/benchmarks.md,
                        # finding 2, session 6). With each driver's own CPU of the turn
                        # factored out, what is left is what the host took from the driver.
                        ratio = res.row(f"{label} ratio", "x").values[-1]
                        res.add(
                            f"{label} ratio x driver CPU (host turn / bare turn)",
                            "x",
                            ratio * driver_cpu / bare_cpu,
                        )
                    # Runnable but waiting for a CPU (schedstat): who the 2 cores were short for.
                    for who, wait in zip(
                        ("daemon", "windows process", "driver"), queued, strict=False
                    ):
                        res.add(f"{label} {who} waiting for a CPU per turn", "s", wait)
                    res.add(f"{label} other processes (cores, noise)", "", round(other / wall, 2))
            finally:
                wp.close()
            res.check(
                f"{windows} window(s): exact text, in order",
                not bad,
                "; ".join(bad[:3]) if bad else f"{windows}/{windows} windows, {ctx.runs} turns",
            )
            ratios = res.row(f"{windows} windows: ratio", "x").values
            ctx.log(f"  {windows} windows: {ratios}")
            if ratios:  # issue 22's goal is on every run, not on the median
                res.add(
                    f"{windows} windows: lowest ratio of the runs",
                    "x",
                    min(ratios),
                    goal=(">=", 0.9),
                )
    return res


def _bare_turn(res: Result, bare: BareDriver, script: str, want: str) -> tuple[float, float]:
    """One turn of the bare pipe; its rows; returns its chars/s (0.0: the whole turn came in
    one read, so it has no rate; `--quick`'s 8 KB can) and the driver's exact CPU seconds."""
    cpu0 = (time.process_time(), cpu_seconds(bare.proc.pid))
    queued0 = runqueue_seconds(bare.proc.pid)
    counted0 = proc_counters(bare.proc.pid)
    t = bare.turn(script)
    counted = counters_delta(counted0, proc_counters(bare.proc.pid))
    _add_counters(res, "bare: driver", counted)
    res.add("bare: driver's last CPU", "", last_cpu(bare.proc.pid), baseline=True)
    res.add(
        "bare: driver waiting for a CPU per turn",
        "s",
        runqueue_seconds(bare.proc.pid) - queued0,
        baseline=True,
    )
    rate = t.chars / ((t.last_ns - t.first_ns) / 1e9) if t.last_ns > t.first_ns else 0.0
    if rate:
        res.add("bare pipe chars/s", "chars/s", rate, baseline=True)
    res.add("bare pipe chunks per read", "", t.frames / max(1, t.reads), baseline=True)
    res.add("bare reader CPU per turn", "s", time.process_time() - cpu0[0], baseline=True)
    res.add("bare: driver CPU per turn", "s", cpu_seconds(bare.proc.pid) - cpu0[1], baseline=True)
    if t.sha256 != want:
        res.check("bare pipe text", False, "the bare reader got other text")
    return rate, counted["CPU, exact"]


def _add_counters(res: Result, who: str, counted: dict[str, float]) -> None:
    """The kernel's counters of a driver over one turn (what it did besides using CPU: how
    it wrote, blocked, was preempted, faulted, moved between CPUs)."""
    baseline = who.startswith("bare")
    for name, value in counted.items():
        res.add(f"{who} {name} per turn", COUNTERS[name], value, baseline=baseline)
    writes = counted["write calls"]
    if writes:
        res.add(
            f"{who} bytes per write call", "", counted["bytes written"] / writes, baseline=baseline
        )


def _round(
    res: Result, report: dict[str, Any], windows: int, base: float, want: str, bad: list[str]
) -> None:
    wins = report["windows"]
    rates = [w["chars"] / max(1e-9, (w["last_ns"] - w["first_ns"]) / 1e9) for w in wins]
    med = median(rates)
    res.add(f"{windows} windows: chars/s per window", "chars/s", med)
    # Against the bare turn just before this one (same machine, same moment).
    if base:
        res.add(f"{windows} windows: ratio", "x", med / base)
        res.add(f"{windows} windows: slowest window ratio", "x", min(rates) / base)
    res.add(
        f"{windows} windows: events per window per turn", "", median([w["frames"] for w in wins])
    )
    for w in wins:
        if w["sha256"] != want:
            bad.append(f"window {w['window']} got {w['chars']} chars of other text")
    if report["gaps"] or report["resyncs"]:
        bad.append(f"{report['gaps']} seq gaps, {report['resyncs']} resyncs")
    if report["errors"]:
        bad.extend(report["errors"])
