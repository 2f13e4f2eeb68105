"""`hostd web` as a command: bad arguments are one line and a non-zero exit."""

from __future__ import annotations

import os
import socket
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


def test_open_hands_the_url_to_the_browser(home: Path) -> None:
    # `webbrowser` runs $BROWSER (a "generic" browser: it waits for the command to finish), so
    # the URL is in the file before the gateway handles the SIGTERM queued behind it.
    opened = home / "opened.txt"
    browser = home / "fake-browser"
    browser.write_text(f'#!/bin/sh\nprintf %s "$1" > {opened}\n')
    browser.chmod(0o755)
    env = {**os.environ, "BROWSER": str(browser)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "hostd", "--home", str(home), "web", "--open"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        url = line.removeprefix("hostd web: ").rstrip("\n")
        assert url.startswith("http://127.0.0.1:") and "/?token=" in url
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0
        if proc.stdout is not None:
            proc.stdout.close()
    assert opened.read_text() == url
    assert not (home / "run" / "web-url").exists()  # removed on the way out
