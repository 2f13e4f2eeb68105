"""Which topics load the working folder's own settings (claude-code `setting_sources`
"project"/"local"): a confined topic with its own network by default and from a window; any
other topic only as an assistant file says (hostd/shell/drivers/window_options.py)."""

from __future__ import annotations

from typing import Any

import pytest

from hostd.shell.drivers.window_options import check_window_options, folder_default
from hostd_claude_code.spec import SPEC
from hostd_protocol.errors import PermissionDenied

CONFINED = {"sandbox": "confined"}
SHARED = {"sandbox": {"mode": "confined", "network": "shared"}}


def _none(option: str) -> list[Any]:
    return []


def test_only_a_confined_topic_gets_the_folder_s_settings_by_default() -> None:
    assert folder_default(SPEC, CONFINED)["setting_sources"] == ["project", "local"]
    assert "setting_sources" not in folder_default(SPEC, {})
    assert "setting_sources" not in folder_default(SPEC, SHARED)
    # A topic's own choice stands.
    assert folder_default(SPEC, {**CONFINED, "setting_sources": []})["setting_sources"] == []


@pytest.mark.parametrize("sources", [["project"], ["local"], None])
def test_a_window_asks_for_the_folder_s_settings_only_on_a_confined_topic(
    sources: list[str] | None,
) -> None:
    check_window_options(SPEC, {**CONFINED, "setting_sources": sources}, _none)
    for options in ({}, SHARED):
        with pytest.raises(PermissionDenied, match="assistants/"):
            check_window_options(SPEC, {**options, "setting_sources": sources}, _none)
    # The same value from an assistant file passes.
    check_window_options(SPEC, {"setting_sources": sources}, lambda option: [sources])
    check_window_options(SPEC, {"setting_sources": ["user"]}, _none)
