"""`hostd web` as a command: bad arguments are one line and a non-zero exit."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def test_bad_port_is_one_line(home: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "hostd", "--home", str(home), "web", "--port", "70000"],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr == "hostd: --port must be between 0 and 65535, not 70000\n"
    assert proc.stdout == ""


def test_port_in_use_is_one_line(home: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run(
            [sys.executable, "-m", "hostd", "--home", str(home), "web", "--port", str(port)],
            capture_output=True, text=True, timeout=60, check=False,
        )
    assert proc.returncode == 1
    assert proc.stderr.splitlines()[-1] == f"hostd: cannot serve on 127.0.0.1:{port}: Address already in use"
