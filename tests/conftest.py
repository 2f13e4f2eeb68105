"""Suite-wide settings.

Hypothesis runs derandomized under CI (CI=true), so a red CI run reproduces locally with
`CI=true scripts/test`; developers get fresh random examples every run.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", deadline=None)
settings.load_profile("ci" if os.environ.get("CI") == "true" else "dev")
