"""The sandbox holds as root and over time (issue 31): a confined tool has no capability and
cannot mount or unmount (run by root, bwrap used to keep root's capabilities), and a confined
driver lives as long as its session (it was SIGKILLed ~10 s after its start, when trio
retired the worker thread that forked bwrap). Through the real daemon and scripted driver.

Run as root these are the real attacks; as an ordinary user CapEff is 0 anyway.
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest
import trio

from hostd.client import open_client
from hostd.shell.paths import Paths
from tests.e2e import daemon_proc
from tests.e2e.test_sandbox_e2e import answer, answer_on_own_daemon, needs_bwrap, user_home

pytestmark = [pytest.mark.e2e, needs_bwrap]
__all__ = ["user_home"]  # the fixture, shared


async def test_a_confined_tool_has_no_capability_and_cannot_mount(
    home: Path, user_home: Path
) -> None:
    project = home / "project"
    project.mkdir()
    script = "\n".join([
        "/sh grep -E '^(CapEff|CapPrm|NoNewPrivs)' /proc/self/status",
        "/text |",
        f"/sh umount {user_home}",  # undoing the hidden home
        "/text |",
        "/sh mount -o remount,rw,bind / /",  # writing host files
        "/text |",
        f"/sh touch {user_home.parent / 'escaped.txt'}",
        "/text |",
        f"/readfile {user_home / 'canary.txt'}",
    ])
    with trio.fail_after(60):
        text = await answer_on_own_daemon(home, project, "confined", script)
    caps, umount, mount, touch, canary = (p.strip() for p in text.split("|"))
    assert caps.startswith("exit 0:"), caps
    fields = dict(
        (k.strip(), v.strip())
        for k, _, v in (line.partition(":") for line in caps.removeprefix("exit 0:").splitlines())
    )
    assert fields == {"CapPrm": "0000000000000000", "CapEff": "0000000000000000",
                      "NoNewPrivs": "1"}, caps
    assert not umount.startswith("exit 0"), umount
    assert not mount.startswith("exit 0"), mount
    assert not touch.startswith("exit 0") and not (user_home.parent / "escaped.txt").exists()
    assert canary == "read-error ENOENT"
    # The daemon's own view is unchanged: the home is still there for it.
    assert (user_home / "canary.txt").read_text() == "canary-secret"


@pytest.mark.slow
async def test_a_long_confined_turn_and_an_idle_confined_session_survive(
    home: Path, user_home: Path
) -> None:
    """Real time on purpose: the defect was trio's 10 s worker idle timeout (the bounded
    variant with a tiny timeout is tests/shell/test_child_trees.py). Each wait is longer than
    that timeout with a few seconds to spare, no more: the driver was killed ~10 s after its
    start, in the middle of the first turn."""
    project = home / "project"
    project.mkdir()
    with trio.fail_after(180):
        d = await daemon_proc.start(home)
        try:
            async with open_client(Paths.under(home)) as c:
                t = await c.create_topic(
                    driver="scripted", working_dir=str(project),
                    options={"sandbox": "confined", "chunk_rate": 0},
                )
                first = await answer(c, t.id, "/text started |\n/sleep 16\n/whoami")
                assert first.startswith("started |"), first
                await trio.sleep(13)  # idle for longer than trio's 10 s worker timeout
                second = await answer(c, t.id, "/whoami")
                # The same driver process answered both (no cold restart in between).
                assert second == first.removeprefix("started |"), (first, second)
        finally:
            assert await d.terminate() == 0


PROBE = (
    "import socket, sys\n"
    "a, b = socket.socketpair()\n"  # pipes between a process and its children still work
    "s = socket.socket(socket.AF_UNIX)\n"
    "s.connect(sys.argv[1])\n"
    "print('connected')\n"
)


@pytest.mark.parametrize("network", ["none", "loopback", "shared"])
async def test_a_confined_tool_cannot_reach_a_unix_socket_outside(
    home: Path, user_home: Path, network: str
) -> None:
    """A read-only mount does not stop connect() to a Unix socket on it: another daemon's
    socket (here: a listener beside the hidden home, where a second hostd home could be) was a
    way out of the sandbox, whatever its network. The loopback forwarder, which relays through
    the daemon's Unix sockets, still works."""
    project = home / "project"
    project.mkdir()
    (project / "probe.py").write_text(PROBE)
    outside = user_home.parent / "other-daemon.sock"
    with socket.socket(socket.AF_UNIX) as unix, socket.socket() as tcp:
        unix.bind(str(outside))
        unix.listen(8)
        tcp.bind(("127.0.0.1", 0))
        tcp.listen(8)
        port = tcp.getsockname()[1]
        sandbox: object = {"mode": "confined", "network": network}
        if network == "loopback":
            sandbox = {**sandbox, "ports": [port]}  # type: ignore[dict-item]
        script = "\n".join([
            f"/sh {sys.executable} -I {project / 'probe.py'} {outside} 2>&1 | tail -1",
            "/text |",
            f"/connect 127.0.0.1 {port}",
        ])
        with trio.fail_after(60):
            text = await answer_on_own_daemon(home, project, sandbox, script)
    unix_probe, tcp_probe = (p.strip() for p in text.split("|"))
    assert "PermissionError" in unix_probe and "connected" not in unix_probe, unix_probe
    if network == "none":
        assert tcp_probe.startswith("connect-error"), tcp_probe
    else:
        assert tcp_probe == f"connected 127.0.0.1:{port}", tcp_probe
