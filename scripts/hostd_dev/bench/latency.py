"""Latency: many topics streaming at a steady rate, several windows each; how long a chunk
takes from the driver's emit to a window's receive.

The load driver (`--load-drivers`: `bench-load`, `hostd_dev.bench.load_driver`, a few us per
chunk, unless `scripted` is asked for) streams bench chunks that start with its
CLOCK_MONOTONIC nanoseconds when it emitted them; the windows process subtracts that from its own clock at receipt (the clock is
system-wide). Baseline: the same number of drivers at the same rate, their pipes read by one
bare `select` loop, so the driver's own scheduling delay on a busy machine is visible apart
from what the host adds.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hostd.testing.processes import child_pids
from hostd_dev.bench import load_driver, probe
from hostd_dev.bench.control import create_topics, send_all
from hostd_dev.bench.cpu_stats import (
    busy_cpu_seconds,
    exact_cpu_seconds,
    machine_cpu_fields,
    others_cpu_seconds,
    runqueue_seconds,
)
from hostd_dev.bench.procs import DaemonProc, WindowsProc, bare_fleet_turn, spawn_fleet
from hostd_dev.bench.report import Context, Result
from hostd_dev.bench.stats import percentile
from hostd_dev.bench.trace import Trace, analyse

GOAL = "100 topics x 4 windows at 50 chunks/s: driver emit -> window receive p99 <= 2 ms"

RATE = 50.0
STAMP_SIZE = 64


def bench_script(n: int, rate: float = RATE, size: int = STAMP_SIZE) -> str:
    return f"/bench n={n} size={size} rate={rate:g}"


def stream_rounds(
    daemon: DaemonProc,
    topics: list[str],
    windows_per_topic: int,
    script: str,
    rounds: int,
    on_round: Callable[[int, dict[str, Any]], None],
    *,
    warmup: str = "",
    during: Callable[[], None] | None = None,
    trace_path: str = "",
) -> None:
    """Attach the windows, play an optional warm-up turn on every topic (it starts the
    drivers; not reported), then `rounds` turns of `script` on every topic at once."""
    total = rounds + (1 if warmup else 0)
    wp = WindowsProc(
        daemon.socket,
        topics,
        windows_per_topic,
        total,
        mode="stamp",
        stamp_size=STAMP_SIZE,
        trace_path=trace_path,
    )
    try:
        wp.read(timeout=120)  # attached
        if warmup:
            send_all(daemon, topics, warmup)
            wp.read(timeout=300)
        drivers = sorted(child_pids(daemon.pid))
        for k in range(rounds):
            pids = [daemon.pid, wp.proc.pid, *drivers]
            cpu0 = [exact_cpu_seconds(p) for p in pids]
            queued0 = [runqueue_seconds(p) for p in pids]
            busy0 = busy_cpu_seconds()
            fields0 = machine_cpu_fields()
            ours = {*pids, os.getpid()}
            others0 = others_cpu_seconds(ours)
            t0, t0_ns = time.perf_counter(), time.monotonic_ns()
            send_all(daemon, topics, script)
            if during is not None:
                during()
            report = wp.read(timeout=300)
            wall = time.perf_counter() - t0
            used = [exact_cpu_seconds(p) - c for p, c in zip(pids, cpu0, strict=True)]
            queued = [runqueue_seconds(p) - q for p, q in zip(pids, queued0, strict=True)]
            busy = busy_cpu_seconds() - busy0
            fields = machine_cpu_fields()
            others = others_cpu_seconds(ours) - others0
            # CPU shares over the round, in cores: what the 2 (or N) cores were asked for.
            report["cpu_cores"] = {
                "daemon": used[0] / wall,
                "windows": used[1] / wall,
                "drivers": sum(used[2:]) / wall,
                # Everything else on the machine (the bench itself, other jobs): noise.
                "other processes": max(0.0, busy - sum(used)) / wall,
            }
            # Where the machine's busy time went, by /proc/stat field (cores), and what the
            # other live processes were charged: "other processes" above is busy minus ours,
            # so CPU nobody is charged with (interrupts, steal) would show up there too.
            report["machine_cores"] = {
                "user+nice": (fields["user"] - fields0["user"]
                              + fields["nice"] - fields0["nice"]) / wall,
                "system": (fields["system"] - fields0["system"]) / wall,
                "irq+softirq": (fields["irq"] - fields0["irq"]
                                + fields["softirq"] - fields0["softirq"]) / wall,
                "steal": (fields["steal"] - fields0["steal"]) / wall,
                "other processes, counted one by one": max(0.0, others) / wall,
            }
            # Waiting for a CPU while runnable, as a share of the round (drivers: summed, so
            # 1.0 = one driver waiting all the time on average): the run queue, measured.
            report["runqueue"] = {
                "daemon": queued[0] / wall,
                "windows": queued[1] / wall,
                "drivers": sum(queued[2:]) / wall,
            }
            report["wall_s"] = wall
            # The round on CLOCK_MONOTONIC, the daemon's clock too (its `--probe` record).
            report["span_ns"] = (t0_ns, time.monotonic_ns())
            on_round(k, report)
    finally:
        wp.close()


def add_cpu(res: Result, report: dict[str, Any]) -> None:
    """Rows for how many cores the daemon, the windows and the drivers used in a round."""
    for who, cores in report["cpu_cores"].items():
        res.add(f"CPU used by {who} (cores)", "", round(cores, 2))


def run(ctx: Context) -> Result:
    # The goal's scale, and a small one that shows the host's own share where the machine is
    # not saturated by the drivers themselves (100 Python drivers at 50 Hz load 2 cores).
    if ctx.scales:
        scales = [(t, w, 0.5 if ctx.quick else 5.0) for t, w in ctx.scales]
    else:
        scales = [(3, 2, 0.5)] if ctx.quick else [(10, 4, 5.0), (100, 4, 5.0)]
    res = Result("latency", GOAL)
    res.notes.append(
        f"{RATE:g} chunks/s of {STAMP_SIZE} chars per topic; latency = window receipt - driver "
        "emit (CLOCK_MONOTONIC); bare = the same drivers read by one select loop"
    )
    if "bench-load" in ctx.load_drivers and load_driver.build() is None:
        res.notes.append("bench-load: no C compiler, its chunk loop ran in Python")
    res.notes.append(
        "load driver CPU per chunk: the load generator's own price, next to the daemon's "
        f"(load drivers: {', '.join(ctx.load_drivers)})"
    )
    problems: list[str] = []
    for n_topics, n_windows, duration in scales:
        # Each load driver in turn at a scale (interleaved when several are asked for).
        for driver in ctx.load_drivers:
            _one_scale(
                ctx,
                res,
                problems,
                n_topics,
                n_windows,
                duration,
                goal=bool(ctx.scales) or (n_topics == 100 and n_windows == 4),
                driver=driver,
                label=driver if len(ctx.load_drivers) > 1 else "",
            )
    res.check("every chunk reached every window", not problems, "; ".join(problems[:3]))
    return res


def _one_scale(
    ctx: Context,
    res: Result,
    problems: list[str],
    n_topics: int,
    n_windows: int,
    duration: float,
    *,
    goal: bool,
    driver: str = "bench-load",
    label: str = "",
) -> None:
    n_chunks = int(RATE * duration)
    script = bench_script(n_chunks)
    scale = f"{n_topics}x{n_windows}" + (f" {label}" if label else "")
    module = "hostd_scripted" if driver == "scripted" else load_driver.__name__

    fleet = spawn_fleet(n_topics, module=module)
    try:
        bare_fleet_turn(fleet, bench_script(5), STAMP_SIZE)
        for _ in range(ctx.runs):
            cpu0 = [exact_cpu_seconds(d.proc.pid) for d in fleet]
            lat = bare_fleet_turn(fleet, script, STAMP_SIZE)
            used = sum(exact_cpu_seconds(d.proc.pid) for d in fleet) - sum(cpu0)
            res.add(f"{scale} bare pipes p50", "ms", percentile(lat, 50) / 1000, baseline=True)
            res.add(f"{scale} bare pipes p99", "ms", percentile(lat, 99) / 1000, baseline=True)
            # The load driver alone, its pipe read by a bare loop: no daemon beside it.
            res.add(
                f"{scale} bare: load driver CPU per chunk",
                "us",
                used / (n_topics * n_chunks) * 1e6,
                baseline=True,
            )
    finally:
        for d in fleet:
            d.close()

    def on_round(k: int, report: dict[str, Any]) -> None:
        lat = report["latency_us"]
        res.add(f"{scale} host p50", "ms", lat["p50"] / 1000)
        res.add(f"{scale} host p99", "ms", lat["p99"] / 1000, goal=("<=", 2.0) if goal else None)
        res.add(f"{scale} host max", "ms", (lat["max"] or 0) / 1000)
        for who, cores in report["cpu_cores"].items():
            res.add(f"{scale} CPU used by {who} (cores)", "", round(cores, 2))
        # CPU per event, which the load changes far less than latency: daemon per driver
        # chunk (fan-out to every window included), windows process per frame received.
        wall = report["wall_s"]
        chunks = n_topics * n_chunks
        res.add(
            f"{scale} daemon CPU per chunk",
            "us",
            report["cpu_cores"]["daemon"] * wall / chunks * 1e6,
        )
        # The load generator's own price, next to the daemon's: 100 scripted drivers at
        # 50 Hz were most of what a 2-core machine has (docs/benchmarks.md, finding 1).
        res.add(
            f"{scale} load driver CPU per chunk",
            "us",
            report["cpu_cores"]["drivers"] * wall / chunks * 1e6,
        )
        res.add(
            f"{scale} windows CPU per frame",
            "us",
            report["cpu_cores"]["windows"] * wall / (chunks * n_windows) * 1e6,
        )
        for field, cores in report["machine_cores"].items():
            res.add(f"{scale} machine CPU: {field} (cores)", "", round(cores, 2))
        for who, share in report["runqueue"].items():
            res.add(f"{scale} run-queue wait of {who} (share of the round)", "", round(share, 3))
        expected = n_topics * n_windows * n_chunks
        if lat["n"] != expected:
            problems.append(f"{scale} round {k + 1}: {lat['n']} of {expected} chunks measured")
        if report["gaps"] or report["resyncs"] or report["errors"]:
            problems.append(
                f"{scale} round {k + 1}: {report['gaps']} gaps, {report['resyncs']} resyncs, "
                f"{report['errors']}"
            )
        ctx.log(
            f"  {scale} round {k + 1}: p50 {lat['p50'] / 1000:.2f} ms, "
            f"p99 {lat['p99'] / 1000:.2f} ms"
        )

    if not ctx.trace:
        spans: list[tuple[int, int]] = []

        def on_round_spanned(k: int, report: dict[str, Any]) -> None:
            spans.append(report["span_ns"])
            on_round(k, report)

        with tempfile.TemporaryDirectory(prefix="hostd-probe-") as tmp:
            probe_file = Path(tmp) / "probe.json"
            env = {"HOSTD_PROBE": str(probe_file)} if ctx.probe else None
            with DaemonProc(env=env) as daemon:
                topics = create_topics(daemon, n_topics, driver=driver)
                stream_rounds(
                    daemon,
                    topics,
                    n_windows,
                    script,
                    ctx.runs,
                    on_round_spanned,
                    warmup=bench_script(5),
                )
            # The daemon writes its record when it exits (DaemonProc stops it gracefully).
            if ctx.probe:
                add_probe(ctx, res, scale, probe.load(probe_file), spans)
        return
    with tempfile.TemporaryDirectory(prefix="hostd-trace-") as tmp:
        daemon_file, windows_file = Path(tmp) / "daemon.jsonl", Path(tmp) / "windows.jsonl"
        os.environ["HOSTD_TRACE"] = str(daemon_file)
        try:
            with DaemonProc() as daemon:
                topics = create_topics(daemon, n_topics, driver=driver)
                stream_rounds(
                    daemon,
                    topics,
                    n_windows,
                    script,
                    ctx.runs,
                    on_round,
                    warmup=bench_script(5),
                    trace_path=str(windows_file),
                )
        finally:
            del os.environ["HOSTD_TRACE"]
        # The daemon writes its trace when it exits (DaemonProc stops it gracefully).
        add_trace(ctx, res, scale, analyse(daemon_file, windows_file))


def add_probe(
    ctx: Context,
    res: Result,
    scale: str,
    rec: probe.Record | None,
    spans: list[tuple[int, int]],
) -> None:
    """Per-round rows of `--probe`: GC pauses, store batches, the loop held up besides its
    own work (`hostd_dev.bench.probe`)."""
    if rec is None:
        res.notes.append(f"{scale} probe: the daemon wrote no record (a daemon without it?)")
        return
    for k, (start, end) in enumerate(spans):
        rows = probe.round_rows(rec, start, end)
        for name, value in rows.items():
            res.add(f"{scale} probe: {name}", "", round(value, 3))
        ctx.log(
            f"  {scale} round {k + 1} probe: GC longest "
            f"{rows['GC pauses, longest (ms)']:.1f} ms, full passes "
            f"{rows['GC generation-2 passes']:.0f}; loop wall/CPU during store batches "
            f"{rows['loop wall / CPU while it had work, during store batches']:.2f}, outside "
            f"{rows['loop wall / CPU while it had work, outside store batches']:.2f}"
        )


def add_trace(ctx: Context, res: Result, scale: str, tr: Trace) -> None:
    """Per-stage rows of a traced run (one set for all its rounds, warm-up included)."""
    ctx.log(f"  {scale} trace (ms):          p50      p99        n")
    for name, p50, p99, n in tr.rows():
        res.add(f"{scale} trace: {name} p50", "ms", p50)
        res.add(f"{scale} trace: {name} p99", "ms", p99)
        ctx.log(f"    {name:<40} {p50:8.3f} {p99:8.3f} {n:8d}")
    if tr.unmatched:
        res.notes.append(f"{scale} trace: {tr.unmatched} window frames without a daemon record")
