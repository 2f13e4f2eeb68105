"""`--option KEY=VALUE` (hostd new, hostd chat: one function): JSON where it parses, else text; a table or
a list written the TOML way (as in an assistant file) is one line saying to write JSON,
before anything is sent."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hostd.cli.common import parse_options


def test_values_are_json_where_they_parse_else_text() -> None:
    assert parse_options(["a=1", "b=true", 'c={"scope": "turn"}', "d=plain words", "e="]) == {
        "a": 1, "b": True, "c": {"scope": "turn"}, "d": "plain words", "e": "",
    }


@pytest.mark.parametrize("value", ['{scope = "turn"}', "[8080, ]", " {mode=confined}"])
def test_a_table_or_list_that_is_not_json_is_refused_saying_so(value: str) -> None:
    with pytest.raises(ValueError, match=r"^--option sandbox: .* is not JSON; write tables and lists as JSON"):
        parse_options([f"sandbox={value}"])


def test_hostd_new_says_it_in_one_line_before_it_connects(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "hostd", "--home", str(tmp_path), "new", "--driver", "scripted",
         "--option", 'workspace={scope = "turn", seed = "/src"}'],
        capture_output=True, text=True, timeout=60, env={**os.environ, "HOSTD_HOME": str(tmp_path)},
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1, done.stderr
    assert "--option workspace:" in done.stderr and "is not JSON" in done.stderr, done.stderr
    assert """--option 'workspace={"scope": "turn"}'""" in done.stderr



def test_hostd_chat_says_it_before_it_connects(tmp_path: Path) -> None:
    """No daemon runs here: the option's fault is said, not that hostd is not running."""
    done = subprocess.run(
        [sys.executable, "-m", "hostd", "--home", str(tmp_path), "chat", "--driver", "scripted",
         "--option", "sandbox=[8080, ]"],
        capture_output=True, text=True, timeout=60, env={**os.environ, "HOSTD_HOME": str(tmp_path)},
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("hostd chat: --option sandbox:") and "is not JSON" in done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
