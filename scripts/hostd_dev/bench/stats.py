"""Small statistics for the benchmarks: percentiles and median/min/max over repeated runs.

Pure Python on purpose (no numpy): the samples are thousands, not millions.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


def percentile(samples: Sequence[float], q: float) -> float:
    """The `q`-th percentile (0..100) by linear interpolation; NaN for no samples."""
    if not samples:
        return math.nan
    data = sorted(samples)
    if len(data) == 1:
        return data[0]
    pos = (len(data) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(data) - 1)
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)


def median(samples: Sequence[float]) -> float:
    return percentile(samples, 50.0)


@dataclass(frozen=True)
class Spread:
    """Median, min and max of one metric over the measured repetitions."""

    median: float
    min: float
    max: float
    n: int

    @classmethod
    def of(cls, values: Iterable[float]) -> Spread:
        vals = [v for v in values if not math.isnan(v)]
        if not vals:
            return cls(math.nan, math.nan, math.nan, 0)
        return cls(median(vals), min(vals), max(vals), len(vals))

    def as_dict(self) -> dict[str, float | int | None]:
        def clean(x: float) -> float | None:
            return None if math.isnan(x) else x

        return {
            "median": clean(self.median),
            "min": clean(self.min),
            "max": clean(self.max),
            "n": self.n,
        }


def fmt(value: float, unit: str) -> str:
    """A human-readable number with its unit (the table's cells)."""
    if math.isnan(value):
        return "-"
    if unit == "x":
        return f"{value:.2f}x"
    if unit == "ms":
        return f"{value:.2f} ms" if value < 10 else f"{value:.0f} ms"
    if unit == "chars/s":
        if value >= 1e6:
            return f"{value / 1e6:.2f} M/s"
        return f"{value / 1e3:.0f} k/s"
    if unit == "MiB":
        return f"{value:.1f} MiB"
    if unit == "/s":
        return f"{value:.0f}/s"
    if unit == "%":
        return f"{value:.0f}%"
    if unit == "":
        return f"{value:g}"
    return f"{value:.3g} {unit}"
