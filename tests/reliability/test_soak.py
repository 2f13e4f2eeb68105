"""A bounded soak (20 s): 6 topics streaming with steers, stops, approvals and compaction,
2 steady and 4 churning windows; RSS and descriptors sampled each second must stay flat,
and every window's rebuilt transcript must equal the stored rows at the end.
`scripts/stress --soak MINUTES` runs the long one (`hostd_dev.stress.soak` has the details)."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from hostd_dev.stress.soak import run_soak

pytestmark = pytest.mark.e2e

SECONDS = 20


async def test_soak_memory_and_descriptors_stay_flat_transcripts_match(
    home: Path, seed: int
) -> None:
    with trio.fail_after(SECONDS + 100):
        report = await run_soak(home, seconds=SECONDS, seed=seed)
    assert report.violations == [], f"seed {seed}: {report.summary()}"
    assert report.turns_ended > 50
    assert report.rows_compared > 100
    assert report.topics_deleted > 0  # topics retired mid-run, many mid-turn
    assert report.replays > 0 and report.reconnects > 5
