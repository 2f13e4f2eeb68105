"""`hostd web` as a command: bad arguments are one line and a non-zero exit."""

from __future__ import annotations

import os
import select
import socket
import stat
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


def test_an_unwritable_token_file_is_named(home: Path, tmp_path: Path) -> None:
    # Found from outside: "cannot serve on 127.0.0.1:0: No such file or directory" blamed the
    # port for the --token-file that could not be written.
    (tmp_path / "file").write_text("")
    where = tmp_path / "file" / "web-url"
    proc = subprocess.run(
        [sys.executable, "-m", "hostd", "--home", str(home), "web", "--token-file", str(where)],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert proc.returncode == 1
    assert proc.stderr.splitlines()[-1].startswith(f"hostd: cannot write the URL file {where}: ")


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


def run_web_app(home: Path, env: dict[str, str]) -> tuple[str, str, str]:
    """`hostd web --app` with a stand-in browser that writes its argument to a FIFO; returns
    the printed URL, the browser's argument and the redirect page it was given (read while
    the gateway runs: it is removed on exit)."""
    fifo = home / "browser-args"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    proc = subprocess.Popen(
        [sys.executable, "-m", "hostd", "--home", str(home), "web", "--app"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().removeprefix("hostd web: ").rstrip("\n")
        ready, _, _ = select.select([reader], [], [], 60)
        assert ready, "the browser was not started"
        arg = os.read(reader, 4096).decode()
        page = home / "run" / "web-open.html"
        assert stat.S_IMODE(page.stat().st_mode) == 0o600
        return url, arg, page.read_text()
    finally:
        os.close(reader)
        proc.terminate()
        assert proc.wait(timeout=30) == 0
        if proc.stdout is not None:
            proc.stdout.close()
        assert not (home / "run" / "web-open.html").exists()  # removed on the way out


def test_app_opens_a_chromium_app_window_without_the_token_on_its_command_line(home: Path) -> None:
    bin_dir = home / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "chromium"  # found before the machine's own (PATH order)
    fake.write_text(f'#!/bin/sh\nprintf %s "$*" > {home / "browser-args"}\n')
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:/bin", "HOSTD_WEB_BROWSER": "", "DISPLAY": ":0"}
    url, arg, page = run_web_app(home, env)
    token = url.split("token=", 1)[1]
    assert arg == f"--app={(home / 'run' / 'web-open.html').resolve().as_uri()}"
    assert token not in arg
    assert f'content="0;url={url}"' in page


def test_find_chromium_takes_the_family_in_order_or_the_named_one(tmp_path: Path) -> None:
    from hostd.web.app_window import find_chromium

    assert find_chromium({"PATH": str(tmp_path)}) is None
    for name in ("vivaldi", "microsoft-edge"):
        (tmp_path / name).write_text("#!/bin/sh\n")
        (tmp_path / name).chmod(0o755)
    assert find_chromium({"PATH": str(tmp_path)}) == str(tmp_path / "microsoft-edge")
    named = {"PATH": str(tmp_path), "HOSTD_WEB_BROWSER": str(tmp_path / "vivaldi")}
    assert find_chromium(named) == str(tmp_path / "vivaldi")


def test_app_with_no_display_says_so_instead_of_opening_nothing(home: Path) -> None:
    # Found from outside: with no DISPLAY, `hostd web --app` started chromium, which died
    # unseen, and said nothing; the page is still served.
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "hostd", "--home", str(home), "web", "--app"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )
    assert proc.stdout is not None
    url = proc.stdout.readline()  # printed in the same callback, just before the rest
    proc.terminate()
    _, said = proc.communicate(timeout=30)
    assert proc.returncode == 0
    assert url.startswith("hostd web: http://127.0.0.1:"), url
    assert ("hostd web: cannot open a window: no graphical display (DISPLAY / WAYLAND_DISPLAY "
            "unset); open the URL above in a browser\n") in said, said
