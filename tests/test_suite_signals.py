"""The suite's children get a terminal's SIGINT, however the suite was started.

The Ctrl-C tests (tests/e2e/test_cli_attach.py, test_cli_everyday.py) send SIGINT to a real
`hostd` command. Started in the background by a shell without job control (`scripts/test &`,
`nohup`), the suite inherited SIGINT ignored and passed it on: the commands ignored Ctrl-C
and those tests failed on their 60 s deadline (a contended run of session 8). tests/conftest.py
restores the handler; this checks what a child actually gets.
"""

from __future__ import annotations

import signal
import subprocess
import sys


def test_a_child_of_the_suite_does_not_ignore_sigint() -> None:
    shown = subprocess.run(
        [sys.executable, "-c", "import signal; print(signal.getsignal(signal.SIGINT))"],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout.strip()
    assert shown == str(signal.default_int_handler)
