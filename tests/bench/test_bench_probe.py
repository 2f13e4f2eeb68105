"""`scripts/bench latency --probe`: the daemon's record (`hostd.shell.probe`) and the per-round
rows the bench makes of it (`hostd_dev.bench.probe`)."""

from __future__ import annotations

import gc
import json
from pathlib import Path

import trio

from hostd.shell import probe as daemon_probe
from hostd_dev.bench import probe

MS = 1_000_000


def test_round_rows_split_the_loop_by_store_batches() -> None:
    rec = probe.Record(
        gc=[(2, 10 * MS, 40 * MS), (1, 60 * MS, 3 * MS), (0, 500 * MS, 1 * MS)],
        batches=[(100 * MS, 110 * MS, 2 * MS)],
        stretches=[
            (102 * MS, 2 * MS, 1 * MS),  # inside the batch: half of it waiting
            (109 * MS, 2 * MS, 1 * MS),  # starts inside, ends after: counts as inside
            (200 * MS, 1 * MS, 1 * MS),  # outside: ran all the time
            (600 * MS, 5 * MS, 1 * MS),  # after the round: not counted
        ],
    )
    rows = probe.round_rows(rec, 0, 300 * MS)
    assert rows["GC pauses, longest (ms)"] == 40
    assert rows["GC pauses, total (ms)"] == 43
    assert rows["GC generation-2 passes"] == 1
    assert rows["GC generation-1 passes"] == 1
    assert rows["store batches"] == 1
    assert rows["store batch, longest (ms)"] == 10
    assert rows["loop not running while it had work, during store batches (ms)"] == 2
    assert rows["loop wall / CPU while it had work, during store batches"] == 2.0
    assert rows["loop not running while it had work, outside store batches (ms)"] == 0
    assert rows["loop wall / CPU while it had work, outside store batches"] == 1.0
    assert rows["loop's longest run stretch (ms)"] == 2
    assert rows["loop's longest run stretch, its CPU (ms)"] == 1


def test_a_daemon_without_the_probe_gives_no_record(tmp_path: Path) -> None:
    assert probe.load(tmp_path / "absent.json") is None


def test_the_probe_is_off_unless_asked() -> None:
    assert not daemon_probe.ENABLED  # the test process has no HOSTD_PROBE
    assert daemon_probe.instruments() == []


def test_the_daemon_side_records_gc_passes_batches_and_loop_stretches(tmp_path: Path) -> None:
    gc_before = len(daemon_probe.gc_passes)
    gc.callbacks.append(daemon_probe._on_gc)
    try:

        async def main() -> None:
            for _ in range(3):
                await trio.to_thread.run_sync(daemon_probe.timed_batch(lambda: None))
            gc.collect()

        trio.run(main, instruments=[daemon_probe._Stretches()])
    finally:
        gc.callbacks.remove(daemon_probe._on_gc)
    path = tmp_path / "probe.json"
    daemon_probe.dump(str(path))
    rec = probe.load(path)
    assert rec is not None
    assert len(rec.gc) > gc_before // 3 and rec.gc[-1][0] == 2  # the full pass, last
    assert len(rec.batches) >= 3
    assert rec.stretches and all(w >= 0 for _, w, _ in rec.stretches)
    assert json.loads(path.read_text())["pid"] > 0
