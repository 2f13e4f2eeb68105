"""The driver conformance suite against the ACP driver running the deterministic test agent.

Skipped: `garbage_on_stdout` (the harness moves fd 1 aside; garbage from the *agent* is
covered in test_acp_driver.py) and `slow_start` (the handshake does not wait for the agent,
which starts at prewarm or the first turn; a mute agent is covered in test_acp_driver.py). The crash check SIGKILLs the driver; the agent dies with it
(PDEATHSIG).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hostd.testing.conformance import CHECKS, Check
from tests.acp.support import profile


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
async def test_acp_conformance(check: Check, tmp_path: Path) -> None:
    await check(profile(tmp_path / "home"), tmp_path)
