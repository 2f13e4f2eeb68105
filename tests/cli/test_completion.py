"""`hostd completion bash`: the script completes commands and each command's options, in a
real bash (issue 15, item 5)."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_bash_completes_commands_and_options() -> None:
    script = subprocess.run(
        [sys.executable, "-m", "hostd", "completion", "bash"],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout

    def complete(*words: str) -> list[str]:
        probe = (
            f"{script}\nCOMP_WORDS=(hostd {' '.join(words)}); COMP_CWORD={len(words)}; "
            '_hostd; printf "%s\\n" "${COMPREPLY[@]}"'
        )
        out = subprocess.run(["bash", "-c", probe], capture_output=True, text=True,
                             timeout=60, check=True).stdout
        return out.split()

    assert complete("ex") == ["export"]
    assert set(complete("s")) >= {"send", "serve", "service", "status", "stop"}
    assert complete("send", "--fi") == ["--file"]
    assert complete("--home", "/x", "export", "--for") == ["--format"]
    assert complete("chat", "--con") == ["--continue"]
