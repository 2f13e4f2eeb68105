"""The token a gateway on a fixed port keeps across restarts (`hostd.web.security.port_token`)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from hostd.web.security import port_token


def test_the_token_is_kept_owner_only_and_renewed_on_request(tmp_path: Path) -> None:
    path = tmp_path / "web" / "token-8765"
    first = port_token(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert port_token(path) == first
    renewed = port_token(path, renew=True)
    assert renewed != first and port_token(path) == renewed


def test_a_file_others_can_read_or_a_bad_token_is_replaced(tmp_path: Path) -> None:
    path = tmp_path / "token-1"
    kept = port_token(path)
    path.chmod(0o644)  # someone else may have read it: never trusted again
    fresh = port_token(path)
    assert fresh != kept and stat.S_IMODE(path.stat().st_mode) == 0o600
    path.write_text("short\n")
    assert port_token(path) not in ("short", fresh)


def test_a_symlink_is_not_followed(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_text("A" * 43)
    target.chmod(0o600)
    link = tmp_path / "token-2"
    os.symlink(target, link)
    token = port_token(link)
    assert token != "A" * 43
    assert target.read_text() == "A" * 43  # untouched
    assert not link.is_symlink() and link.read_text().strip() == token
