"""The bench's command line: latency scales, and a typed one-line error for bad ones."""

from __future__ import annotations

import pytest

from hostd_dev.bench.runner import parse_args


def test_scales_are_topics_by_windows() -> None:
    assert parse_args(["latency", "--scales", "10x4,50X4,100x4"]).scales == (
        (10, 4),
        (50, 4),
        (100, 4),
    )
    assert parse_args(["latency"]).scales == ()


@pytest.mark.parametrize("bad", ["3x", "x4", "10x4,", "0x4", "ax4"])
def test_a_bad_scale_is_a_usage_error(bad: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        parse_args(["latency", "--scales", bad])
    assert exc.value.code == 2
    assert "argument --scales:" in capsys.readouterr().err
