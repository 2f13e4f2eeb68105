"""Suite-wide settings.

Hypothesis runs derandomized under CI (CI=true), so a red CI run reproduces locally with
`CI=true scripts/test`; developers get fresh random examples every run.
"""

from __future__ import annotations

import os
import signal

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


def pytest_configure(config: object) -> None:
    """Give the suite a terminal's Ctrl-C. A shell without job control starts a background
    command (`scripts/test &`, also `nohup`) with SIGINT ignored, and every process the
    suite starts inherits that: `hostd attach` then rightly ignores the Ctrl-C the e2e tests
    send it (a background job must), and those tests hang until their deadline. A handled
    signal is reset to its default on exec, so restoring Python's handler here gives every
    child the disposition a terminal's foreground command has."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
