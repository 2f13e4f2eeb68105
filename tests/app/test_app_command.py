"""The real `hostd app` command: one line when it cannot run, a single instance, and no
network listener while it runs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from hostd.client.sync_wire import WireClient
from hostd_protocol.client_messages import Status
from tests.app.harness import WHY_NOT, Daemon
from tests.polling import holds_within

HOSTD = [sys.executable, "-m", "hostd"]


def run_app(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*HOSTD, "app", *args], capture_output=True, text=True, env=env, timeout=60, check=False)


def test_without_a_display_it_says_so_in_one_line(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    done = run_app({**env, "HOSTD_HOME": str(tmp_path)})
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1, done.stderr
    assert "no graphical display" in done.stderr and "xvfb-run" in done.stderr


def test_a_display_with_no_x_server_is_one_line_not_a_qt_abort(tmp_path: Path) -> None:
    # A stale DISPLAY (an ssh or tmux session whose X server is gone): Qt aborted the process
    # with SIGABRT and six lines about platform plugins.
    env = {k: v for k, v in os.environ.items() if k != "WAYLAND_DISPLAY"}
    done = run_app({**env, "HOSTD_HOME": str(tmp_path), "DISPLAY": ":987"})
    assert done.returncode == 1, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert "cannot reach the X display ':987'" in done.stderr and "xvfb-run" in done.stderr


def test_without_the_backend_it_names_the_extra(tmp_path: Path) -> None:
    # A `webview` module that cannot be imported, first on the path: as if hostd[app] were
    # not installed.
    stub = tmp_path / "stub" / "webview"
    stub.mkdir(parents=True)
    (stub / "__init__.py").write_text("raise ImportError(\"No module named 'webview'\")\n")
    env = {**os.environ, "HOSTD_HOME": str(tmp_path / "h"), "DISPLAY": ":99", "PYTHONPATH": str(stub.parent)}
    done = run_app(env)
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1, done.stderr
    assert "pip install 'hostd[app]'" in done.stderr


class Counter:
    """The daemon's count of client connections, other than this one, asked on one
    connection held for the whole test: a fresh connection per question would be counted
    until the daemon saw the previous one close, one too many now and then."""

    def __init__(self, d: Daemon) -> None:
        self.client = WireClient.open(d.paths)

    def __call__(self) -> int:
        return int(self.client.request(Status(id=0)).connections) - 1

    def wait(self, n: int, app: subprocess.Popen[str] | None = None) -> None:
        """Until exactly `n` other connections are open; `app` must run meanwhile."""
        def reached() -> bool:
            assert app is None or app.poll() is None, "the app exited"
            return self() == n

        assert holds_within(reached, 60, every=0.05), f"{self()} connections, not {n}"


def tree(pid: int) -> set[int]:
    """`pid` and all its descendants (Qt WebEngine's renderer and GPU processes)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found = {pid}
    while True:
        more = {p for p, pp in parents.items() if pp in found} - found
        if not more:
            return found
        found |= more


@pytest.mark.e2e
@pytest.mark.skipif(WHY_NOT is not None, reason=str(WHY_NOT))
def test_one_app_many_windows_and_no_network_listener(stack: Daemon) -> None:
    topic = stack.create_topic("instance")
    count = Counter(stack)
    count.wait(0)  # create_topic's connection is closed
    sock = stack.paths.runtime_dir / "app.sock"
    app = subprocess.Popen([*HOSTD, "app", topic], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           text=True, env=stack.env)
    try:
        count.wait(1, app)  # the window's page connected
        # A second `hostd app` hands over to the running one and exits at once.
        second = run_app(stack.env, topic)
        assert second.returncode == 0, second.stderr
        assert "opened a new window in the running app" in second.stderr
        count.wait(2, app)  # the new window has its own connection
        pids = tree(app.pid)
        assert len(pids) > 1  # Qt WebEngine's own processes are checked too
        for flags in ("-ltnp", "-lunp"):  # TCP and UDP listeners, with their processes
            shown = subprocess.run(["ss", flags], capture_output=True, text=True, check=True).stdout
            mine = [line for line in shown.splitlines() if any(f"pid={p}," in line for p in pids)]
            assert mine == [], f"the app listens on the network: {mine}"
        assert sock.is_socket() and (sock.stat().st_mode & 0o777) == 0o600
        # SIGTERM (as Ctrl-C) closes the windows: a clean exit, the single-instance socket gone.
        app.send_signal(signal.SIGTERM)
        assert app.wait(timeout=30) == 0
        assert not sock.exists()
        count.wait(0)  # the daemon saw both windows' connections close
    finally:
        count.client.close()
        if app.poll() is None:
            app.kill()
            app.wait(timeout=30)
        if app.stderr is not None:
            app.stderr.close()
