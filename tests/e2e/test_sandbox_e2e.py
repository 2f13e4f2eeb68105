"""Sandboxed turns through the real daemon and the real scripted driver (issue 23).

Each reach outside the workspace (read a file in the user's home, write outside the
workspace, open a TCP connection, leave a child running) is allowed under the `none` policy
and refused or contained under `confined`. The user's home is a folder outside /tmp (the
sandbox's /tmp is private anyway, which would hide a canary there for the wrong reason).
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from hostd.client import open_client
from hostd.shell.drivers.sandbox import probe
from hostd.shell.paths import Paths
from hostd.testing.processes import marked
from hostd_protocol.client_messages import TurnEnded
from hostd_protocol.common import TextDelta
from hostd_protocol.errors import InvalidArgument
from tests.e2e import daemon_proc

pytestmark = pytest.mark.e2e

SUPPORT = probe()
needs_bwrap = pytest.mark.skipif(not SUPPORT.available, reason=SUPPORT.reason)


@pytest.fixture
def user_home(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A stand-in for the user's home, outside /tmp, with a canary; the daemon gets it as
    HOME (it inherits this process's environment)."""
    root = Path(tempfile.mkdtemp(prefix="hdsb", dir="/var/tmp"))
    home = root / "home"
    home.mkdir()
    (home / "canary.txt").write_text("canary-secret")
    monkeypatch.setenv("HOME", str(home))
    try:
        yield home
    finally:
        shutil.rmtree(root, ignore_errors=True)


orphans = marked  # live processes whose argv holds the marker


async def answer(c: object, topic_id: str, text: str) -> str:
    async with c.attach(topic_id) as sub:  # type: ignore[attr-defined]
        await c.send(topic_id, text)  # type: ignore[attr-defined]
        async for ev in sub:
            if isinstance(ev, TurnEnded):
                assert ev.status == "success", ev
                break
    rows = (await c.history(topic_id)).rows  # type: ignore[attr-defined]
    return "".join(p.text for p in rows[-1].parts if isinstance(p, TextDelta))


async def answer_on_own_daemon(home: Path, project: Path, sandbox: object, script: str) -> str:
    """`script`'s answer in a new scripted topic in `project` under `sandbox`, on a daemon of
    its own that has ended when this returns (so what outlives it can be looked for)."""
    d = await daemon_proc.start(home)
    try:
        async with open_client(Paths.under(home)) as c:
            t = await c.create_topic(
                driver="scripted", working_dir=str(project),
                options={"sandbox": sandbox, "chunk_rate": 0},
            )
            return await answer(c, t.id, script)
    finally:
        assert await d.terminate() == 0


async def reach_out(home: Path, user_home: Path, sandbox: object) -> tuple[str, list[int], Path]:
    """One turn that reaches out every way; returns its answer, the orphans left once the
    daemon is gone, and the file it tried to write outside the workspace."""
    marker = f"hostd-orphan-{uuid.uuid4().hex}"
    outside = user_home.parent / "outside.txt"
    project = home / "project"
    project.mkdir()
    listener = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
    port = listener.socket.getsockname()[1]
    script = "\n".join([
        f"/readfile {user_home / 'canary.txt'}",
        "/text |",
        f"/writefile {outside}",
        "/text |",
        f"/writefile {project / 'inside.txt'}",
        "/text |",
        f"/connect 127.0.0.1 {port}",
        "/text |",
        f"/orphan {marker}",
    ])
    with trio.fail_after(60):
        try:
            text = await answer_on_own_daemon(home, project, sandbox, script)
        finally:
            await listener.aclose()
    assert (project / "inside.txt").exists()  # the workspace is writable either way
    return text, orphans(marker), outside


@pytest.mark.parametrize("policy", ["none", None])
async def test_unconfined_reaches_everything(home: Path, user_home: Path, policy: object) -> None:
    text, left, outside = await reach_out(home, user_home, policy)
    try:
        parts = [p.strip() for p in text.split("|")]
        assert parts[0] == "read 13 bytes: canary-secret"
        assert parts[1] == f"wrote {outside}" and outside.exists()
        assert parts[3].startswith("connected 127.0.0.1:")
        assert parts[4].startswith("orphan ")
        # Not the sandbox's doing: the driver harness ends its process tree, setsid'd
        # children included (issue 31), confined or not.
        assert left == [], "a setsid child outlived its driver"
    finally:
        for pid in left:
            os.kill(pid, signal.SIGKILL)


@needs_bwrap
@pytest.mark.parametrize(
    ("policy", "connect"),
    [("confined", "connect-error ECONNREFUSED"),
     ({"mode": "confined", "network": "none"}, "connect-error ECONNREFUSED"),
     ({"mode": "confined", "network": "shared"}, "connected 127.0.0.1:")],
)
async def test_confined_contains_everything(
    home: Path, user_home: Path, policy: object, connect: str
) -> None:
    text, left, outside = await reach_out(home, user_home, policy)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    parts = [p.strip() for p in text.split("|")]
    assert parts[0] == "read-error ENOENT"  # the home is an empty tmpfs
    assert parts[1] == "write-error EROFS" and not outside.exists()
    assert parts[3].startswith(connect)
    assert parts[4].startswith("orphan ")
    assert left == [], "the sandbox's pid namespace ends with the driver"


async def test_an_unhonourable_policy_refuses_the_turn(home: Path, user_home: Path) -> None:
    project = home / "project"
    project.mkdir()
    with trio.fail_after(60):
        d = await daemon_proc.start(home)
        try:
            async with open_client(Paths.under(home)) as c:
                t = await c.create_topic(
                    driver="scripted", working_dir=str(project),
                    options={"sandbox": {"mode": "confined", "network": "loopback"}},
                )
                async with c.attach(t.id) as sub:
                    await c.send(t.id, f"/writefile {project / 'ran.txt'}")
                    async for ev in sub:
                        if isinstance(ev, TurnEnded):
                            break
                assert ev.status == "error"
                assert ev.error_code == "sandbox_unavailable"
                assert "sandbox network 'loopback' needs the ports" in ev.error
        finally:
            assert await d.terminate() == 0
    assert not (project / "ran.txt").exists()


async def test_the_policy_is_checked_at_creation_and_is_no_driver_option(
    home: Path, user_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # claude-code declares its options (`options_type`): `sandbox` is the host's, not its.
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-not-used")
    with trio.fail_after(60):
        d = await daemon_proc.start(home)
        try:
            async with open_client(Paths.under(home)) as c:
                t = await c.create_topic(driver="claude-code", options={"sandbox": "confined"})
                assert t.options == {"sandbox": "confined"}
                with pytest.raises(InvalidArgument, match=r"^sandbox 'jail' is not a policy"):
                    await c.create_topic(driver="scripted", options={"sandbox": "jail"})
        finally:
            assert await d.terminate() == 0


@needs_bwrap
async def test_loopback_reaches_the_declared_ports_of_the_hosts_loopback_only(
    home: Path, user_home: Path
) -> None:
    project = home / "project"
    project.mkdir()
    allowed = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
    other = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
    port = allowed.socket.getsockname()[1]
    other_port = other.socket.getsockname()[1]

    async def echo_once(task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        stream = await allowed.accept()
        async with stream:
            await stream.send_all(b"pong")

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            await nursery.start(echo_once)
            try:
                text = await answer_on_own_daemon(
                    home, project, {"mode": "confined", "network": "loopback", "ports": [port]},
                    "\n".join([
                        f"/connect 127.0.0.1 {port}", "/text |",
                        f"/connect 127.0.0.1 {other_port}", "/text |",
                        f"/readfile {user_home / 'canary.txt'}",
                    ]),
                )
            finally:
                await allowed.aclose()
                await other.aclose()
    parts = [p.strip() for p in text.split("|")]
    # (`echo_once` returned, or the nursery would still wait: the connection crossed the
    # bridge to the host's listener.)
    assert parts[0] == f"connected 127.0.0.1:{port}"
    assert parts[1] == "connect-error ECONNREFUSED"  # not declared: nothing listens inside
    assert parts[2] == "read-error ENOENT"


def test_drivers_and_status_say_whether_sandboxing_works(tmp_path: Path) -> None:
    import json
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("HOSTD_")}
    env["HOSTD_HOME"] = tempfile.mkdtemp(prefix="hsb", dir="/tmp")
    try:
        def hostd(*args: str) -> str:
            proc = subprocess.run([sys.executable, "-m", "hostd", *args], env=env,
                                  capture_output=True, text=True, timeout=60, check=False)
            assert proc.returncode == 0, proc.stdout + proc.stderr
            return proc.stdout

        want = SUPPORT.summary()
        assert json.loads(hostd("drivers", "--json"))["sandbox"] == want
        assert f"sandbox (option sandbox=confined): {want}" in hostd("drivers")
        hostd("serve", "--detach")
        try:
            status = json.loads(hostd("status", "--json"))
            assert status["sandbox"] == want
            # Which resource limits a confined topic gets here (issue 31).
            from hostd.shell.drivers.limits import probe_limits

            assert status["limits"] == probe_limits().summary()
            assert "confined limits" in hostd("status")
        finally:
            hostd("stop")
    finally:
        shutil.rmtree(env["HOSTD_HOME"], ignore_errors=True)
