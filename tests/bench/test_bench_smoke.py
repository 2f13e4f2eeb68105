"""`scripts/bench --quick` once, as a smoke test: every scenario runs end to end on the real
daemon, drivers and sockets, and writes its JSON. No timing is asserted (benchmarks are not
tests); only that nothing failed and every correctness check passed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hostd.testing.processes import child_pids
from hostd_dev.bench.runner import DEFAULT, OPTIONAL

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]


def test_bench_quick_runs_every_scenario(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    before = child_pids()
    proc = subprocess.run(
        [sys.executable, "-m", "hostd_dev.bench", "--quick", "--json", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    results = {r["scenario"]: r for r in doc["results"]}
    assert list(results) == DEFAULT
    for name, r in results.items():
        if name in OPTIONAL:
            continue
        assert not r["skipped"], (name, r["skipped"])
        assert r["rows"], name
        assert all(c["passed"] for c in r["checks"]), (name, r["checks"])
    assert "hostd bench" in proc.stdout
    assert child_pids() - before == set()
