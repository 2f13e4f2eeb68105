"""The benchmark helpers in hostd_dev.bench_ttft produce sane numbers (tiny runs)."""

from __future__ import annotations

import os

import trio

from hostd.shell.drivers.registry import DriverRegistry
from hostd.testing.processes import no_new_children
from hostd_dev.bench_ttft import measure_stream, measure_ttft
from hostd_scripted.spec import SPEC

REGISTRY = DriverRegistry.from_specs(SPEC)
ENV = {"PATH": os.environ.get("PATH", os.defpath), "LANG": "C.UTF-8"}


async def test_ttft_cold_and_warm() -> None:
    with no_new_children(), trio.fail_after(30):
        report = await measure_ttft(runs=1, registry=REGISTRY, base_env=ENV)
    assert len(report.cold) == len(report.warm) == 1
    # Every figure measured; that a warm open (a parked process) beats a cold one (an
    # interpreter start) is what the bench shows, not a test assert (speeds vary by machine).
    for sample in (*report.cold, *report.warm):
        assert sample.open_s > 0 and sample.send_to_first_chunk_s > 0 and sample.total_s > 0
    medians = report.medians()
    assert set(medians) == {
        f"{mode}_{name}"
        for mode in ("cold", "warm")
        for name in ("open_s", "send_to_first_chunk_s", "total_s")
    }


async def test_stream_latency() -> None:
    with no_new_children(), trio.fail_after(30):
        report = await measure_stream(chunks=500, chunk_size=32, registry=REGISTRY, base_env=ENV)
    assert report.chunks == 500
    assert 0 < report.batches <= 500
    assert report.latency_p50_s >= 0 and report.latency_max_s >= 0
