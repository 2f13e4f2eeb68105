"""Native notifications reach a real freedesktop notification service (Debian's dunst) on a
private session D-Bus, through the command `hostd app` sends them with."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator

import pytest

from hostd.app import notify
from tests.app.harness import XVFB, xvfb

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        not (XVFB and shutil.which("dunst") and shutil.which("dbus-daemon") and shutil.which("gdbus")),
        reason="needs Xvfb, dunst, dbus-daemon and gdbus (scripts/setup installs them)",
    ),
]


@pytest.fixture
def session_bus(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """A private session bus with dunst serving org.freedesktop.Notifications on it."""
    with xvfb() as display:
        read, write = os.pipe()
        bus = subprocess.Popen(["dbus-daemon", "--session", "--nofork", f"--print-address={write}"],
                               pass_fds=(write,), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(write)
        with os.fdopen(read) as f:
            address = f.readline().strip()
        env = {**os.environ, "DISPLAY": display, "DBUS_SESSION_BUS_ADDRESS": address}
        dunst = subprocess.Popen(["dunst"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            # Until dunst owns the name (gdbus waits on the bus; bounded).
            subprocess.run(["gdbus", "wait", "--session", "--timeout", "30", "org.freedesktop.Notifications"],
                           env=env, check=True, timeout=40)
            monkeypatch.setenv("DBUS_SESSION_BUS_ADDRESS", address)
            yield env
        finally:
            for proc in (dunst, bus):
                proc.terminate()
                proc.wait(timeout=10)


def test_a_notification_reaches_the_desktop_service(session_bus: dict[str, str]) -> None:
    title, body = "steer: approval needed", "Allow Bash? it's \"quoted\"\nand on two lines"
    assert notify.send(title, body)
    count = subprocess.run(["dunstctl", "count", "displayed"], env=session_bus, capture_output=True,
                           text=True, check=True, timeout=30)
    assert count.stdout.strip() == "1"
    subprocess.run(["dunstctl", "close-all"], env=session_bus, check=True, timeout=30)
    history = subprocess.run(["dunstctl", "history"], env=session_bus, capture_output=True, text=True,
                             check=True, timeout=30)
    shown = [(n["summary"]["data"], n["body"]["data"], n["appname"]["data"])
             for n in json.loads(history.stdout)["data"][0]]
    assert shown == [(title, body, "hostd")]


def test_without_a_service_it_reports_failure(monkeypatch: pytest.MonkeyPatch, tmp_path: object) -> None:
    monkeypatch.setenv("DBUS_SESSION_BUS_ADDRESS", "unix:path=/nonexistent/bus")
    assert notify.send("t", "b") is False
