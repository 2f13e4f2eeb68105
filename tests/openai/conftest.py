"""Every test under tests/openai must leave no process behind (MCP servers included)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from hostd.testing.processes import no_new_children


@pytest.fixture(autouse=True)
def _no_leftover_processes() -> Iterator[None]:
    with no_new_children():
        yield
