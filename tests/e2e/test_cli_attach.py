"""`hostd attach TOPIC` against a real daemon (scripted driver), as a terminal user runs it:
before any turn it says that it is attached and what the topic is doing (state, recent rows,
the last turn's outcome, a hint), then it follows the live stream."""

from __future__ import annotations

import shutil
import signal
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.e2e.test_cli_acceptance import Running
from tests.e2e.test_cli_everyday import Hostd

pytestmark = pytest.mark.e2e

#: Only limits a hang: every wait below is for a line the command prints.
TIMEOUT = 60


@pytest.fixture
def hostd() -> Iterator[Hostd]:
    root = Path(tempfile.mkdtemp(prefix="hat", dir="/tmp"))  # short: AF_UNIX path limit
    h = Hostd(root)
    try:
        h.ok("serve", "--detach")
        yield h
    finally:
        h("stop")
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def attach(hostd: Hostd) -> Iterator[Callable[..., Attached]]:
    """Starts `hostd attach ...`; a process a failed test left running is killed."""
    started: list[Attached] = []

    def start(*args: str) -> Attached:
        started.append(Attached(hostd, *args))
        return started[-1]

    try:
        yield start
    finally:
        for a in started:
            if a.proc.poll() is None:
                a.proc.kill()
            a.proc.communicate()


class Attached(Running):
    """A running `hostd attach`, its stdout read as it comes (no sleeps: we wait for lines)."""

    def __init__(self, hostd: Hostd, *args: str) -> None:
        super().__init__(hostd, "attach", *args)

    def finish(self) -> tuple[int, str, str]:  # type: ignore[override]
        done = super().finish()
        return done.returncode, done.stdout, done.stderr


def test_attach_to_an_idle_topic_says_so_then_follows_the_next_turn(hostd: Hostd, attach: Callable[..., Attached]) -> None:
    tid = hostd.ok("new", "--driver", "scripted", "--title", "notes").strip()
    attached = attach(tid)
    shown = attached.until("Ctrl-C detaches")
    assert shown.splitlines() == [
        f"topic {tid} 'notes' (scripted): idle",
        "(no messages yet)",
        f"attached: idle, waiting for the next turn and follows it (send one from another "
        f'terminal: hostd send {tid} "..."); Ctrl-C detaches',
    ]
    hostd.ok("send", tid, "/text Hello there")
    code, out, err = attached.finish()
    assert code == 0, err
    assert "Hello there" in out.split("Ctrl-C detaches", 1)[1]


def test_attach_shows_recent_rows_and_the_last_outcome(hostd: Hostd, attach: Callable[..., Attached]) -> None:
    tid = hostd.ok("new", "--driver", "scripted").strip()
    hostd.ok("send", tid, "/text first answer", "--follow")
    failed = hostd("send", tid, "/error vendor is down", "--follow")
    assert failed.returncode == 1

    attached = attach(tid)
    shown = attached.until("Ctrl-C detaches")
    assert shown.startswith(f"topic {tid} (scripted): idle\n"), shown
    assert "first answer" in shown and "error: vendor is down" in shown
    assert "(last turn: error: vendor is down)" in shown
    attached.proc.send_signal(signal.SIGINT)
    code, _, err = attached.finish()
    assert code == 130 and "Traceback" not in err, err

    # --last 1: only the newest row, and where the older ones are.
    attached = attach(tid, "--last", "1")
    shown = attached.until("Ctrl-C detaches")
    assert f"(older messages not shown: hostd history {tid})" in shown
    assert "first answer" not in shown and "vendor is down" in shown
    attached.proc.send_signal(signal.SIGINT)
    assert attached.finish()[0] == 130


def test_attach_to_a_running_turn_follows_it_to_its_end(hostd: Hostd, attach: Callable[..., Attached]) -> None:
    tid = hostd.ok("new", "--driver", "scripted").strip()
    hostd.ok("send", tid, "/text partial\n/wait")
    attached = attach(tid)
    shown = attached.until("Ctrl-C detaches")
    assert shown.startswith(f"topic {tid} (scripted): answering\n"), shown
    assert "attached: following the running turn; exits when the turn ends" in shown
    hostd.ok("stop", tid)
    code, out, err = attached.finish()
    assert code == 0, err
    assert "(turn stopped)" in out


def test_attach_keep_follows_every_turn_until_ctrl_c(
    hostd: Hostd, attach: Callable[..., Attached]
) -> None:
    tid = hostd.ok("new", "--driver", "scripted").strip()
    attached = attach(tid, "--keep")
    shown = attached.until("Ctrl-C detaches")
    assert shown.splitlines()[-1] == (
        f"attached: idle, waiting for the next turn (send one from another terminal: "
        f'hostd send {tid} "..."); Ctrl-C detaches'
    )
    hostd.ok("send", tid, "/text alpha", "--follow")
    attached.until("\nalpha")
    hostd.ok("send", tid, "/text beta", "--follow")
    attached.until("\nbeta")  # still attached after the first turn ended
    attached.proc.send_signal(signal.SIGINT)
    code, _, err = attached.finish()
    assert code == 130 and "Traceback" not in err, err
