"""The driver conformance suite against the ACP driver running the deterministic test agent.

Skipped: `garbage_on_stdout` (the harness moves fd 1 aside; garbage from the *agent* is
covered in test_acp_driver.py) and `slow_start` (the handshake does not wait for the agent,
which starts at prewarm or the first turn; a mute agent is covered in test_acp_driver.py). The crash check SIGKILLs the driver; the agent dies with it
(PDEATHSIG).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hostd.testing.conformance import ConformanceProfile
from hostd.testing.plugin import ConformanceCheck
from tests.acp.support import profile


@pytest.fixture
def hostd_conformance_profile(tmp_path: Path) -> ConformanceProfile:
    return profile(tmp_path / "home")


def test_acp_conformance(hostd_conformance: ConformanceCheck) -> None:
    hostd_conformance.run()
