"""`scripts/bench floor` (hostd_dev.bench.floor): each stand-in of the daemon's per-chunk
syscalls reads every chunk the writers sent and writes it to every window socket. Functional
only: what a chunk costs is the scenario's row, never asserted here."""

from __future__ import annotations

import pytest

from hostd_dev.bench.floor import VARIANTS, measure

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_chunk_is_read_and_written_to_every_window(variant: str) -> None:
    # 3 writers x 20 chunks at 200/s; the drain would hang, and the stand-in fail, if a
    # socket write were lost or a pipe's end not seen.
    got = measure(variant, topics=3, windows=2, rate=200, seconds=0.1)
    assert got["chunks"] == 3 * 20
    assert got["windows_frames"] == got["reads"] * 2
