"""Access control against the real daemon (DESIGN.md invariant 12): another uid is refused
(for real, with a temporary user, when the test runs as root), file modes hold under a
permissive umask, secrets never reach logs, errors or the database, and drivers get a
minimal environment.

(The injected credential lookup is tested in tests/io/test_lifecycle_security.py.)
"""

from __future__ import annotations

import os
import secrets
import shutil
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
import trio

from hostd.client import open_client
from hostd.shell.drivers.session import MINIMAL_ENV
from hostd_dev.stress.dbcheck import db_bytes_contain
from hostd_dev.stress.process import DaemonProcess
from hostd_protocol.client_messages import ErrorReply, ServerMessage, TurnEnded
from hostd_scripted.spec import SPEC as SCRIPTED

pytestmark = pytest.mark.e2e

#: Runs as the other user, with the system python (the venv lives under /root, which another
#: user cannot enter): connect, send a JSON hello, print what came back (hex) or the errno.
PROBE = r"""
import json, socket, struct, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(10)
try:
    s.connect(sys.argv[1])
except OSError as e:
    print("connect-error", e.errno); sys.exit(0)
body = json.dumps({"type": "hello", "protocol_version": [1, 0]}).encode()
try:
    s.sendall(struct.pack(">I", len(body)) + body)
except OSError:
    pass
data = b""
while True:
    try:
        chunk = s.recv(65536)
    except OSError:
        break
    if not chunk:
        break
    data += chunk
print("reply", data.hex())
"""


@pytest.fixture
def other_user() -> Iterator[int]:
    """A temporary user (root only); removed afterwards."""
    if os.geteuid() != 0 or shutil.which("useradd") is None or not os.path.exists("/usr/bin/python3"):
        pytest.skip("needs root, useradd and /usr/bin/python3 to test a real second user")
    name = f"hostdt{secrets.token_hex(3)}"
    subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
                   check=True, capture_output=True)
    try:
        import pwd

        yield pwd.getpwnam(name).pw_uid
    finally:
        subprocess.run(["userdel", name], check=False, capture_output=True)


def _probe(uid: int, socket_path: Path) -> str:
    out = subprocess.run(["/usr/bin/python3", "-c", PROBE, str(socket_path)], user=uid,
                         capture_output=True, text=True, timeout=20, check=True, cwd="/")
    return out.stdout.strip()


async def test_another_user_is_refused_for_real(home: Path, other_user: int) -> None:
    with trio.fail_after(60):
        daemon = DaemonProcess(home)
        await daemon.start()
        try:
            sock = daemon.paths.socket_path
            # Layer 1: the runtime dir is 0700, so the other user cannot even reach the socket.
            os.chmod(home, 0o711)
            result = await trio.to_thread.run_sync(_probe, other_user, sock)
            assert result == "connect-error 13", result  # EACCES
            # Layer 2: even with the dir and the socket opened up by mistake, the daemon
            # checks the peer's uid and refuses before reading a byte.
            os.chmod(daemon.paths.runtime_dir, 0o711)
            os.chmod(sock, 0o666)
            result = await trio.to_thread.run_sync(_probe, other_user, sock)
            word, _, hexdata = result.partition(" ")
            assert word == "reply", result
            data = bytes.fromhex(hexdata)
            body = data[4 : 4 + int.from_bytes(data[:4], "big")]
            err = msgspec.msgpack.decode(body, type=ServerMessage)
            assert isinstance(err, ErrorReply)
            assert err.code == "access_denied"
            assert err.message == f"this hostd serves uid 0 only; you are uid {other_user}"
            # We are still welcome, and the refusal is in the log.
            async with open_client(daemon.paths) as c:
                assert (await c.status()).pid == daemon.pid
            assert f"refusing a connection from uid {other_user}" in daemon.log_text()
        finally:
            await daemon.stop()


async def test_modes_hold_under_a_permissive_umask(home: Path) -> None:
    with trio.fail_after(40):
        daemon = DaemonProcess(home, umask=0)
        await daemon.start()
        try:
            async with open_client(daemon.paths) as c:
                t = await c.create_topic(driver="scripted")
                await c.send(t.id, "/text private words\nq", "start")
            p = daemon.paths

            def mode(path: Path) -> int:
                return stat.S_IMODE(os.stat(path).st_mode)

            assert mode(p.runtime_dir) == 0o700
            assert stat.S_ISSOCK(os.stat(p.socket_path).st_mode)
            assert mode(p.socket_path) == 0o600
            assert mode(p.lock_path) == 0o600
            # The conversations and the logs are nobody else's business either.
            for d in (p.data_dir, p.config_dir, p.log_dir):
                assert mode(d) & 0o077 == 0, f"{d} is {oct(mode(d))}"
        finally:
            await daemon.stop()


async def test_secrets_stay_out_of_logs_errors_and_the_database(home: Path) -> None:
    secret = f"sk-test-{secrets.token_hex(16)}"
    canaries = {"AWS_SECRET_ACCESS_KEY": f"aws-{secrets.token_hex(8)}",
                "OPENAI_API_KEY": f"oa-{secrets.token_hex(8)}",
                "HOSTD_LOG_LEVEL": "DEBUG"}
    with trio.fail_after(40):
        daemon = DaemonProcess(home, env={"HOSTD_SCRIPTED_TOKEN": secret, **canaries},
                               log_level="DEBUG")
        await daemon.start()
        try:
            async with open_client(daemon.paths) as c:
                t = await c.create_topic(driver="scripted")
                async with c.attach(t.id) as sub:
                    first = await c.send(t.id, "/envkeys\nq", "start")
                    async for ev in sub:
                        if isinstance(ev, TurnEnded) and ev.turn_id == first.turn_id:
                            break
                    # The driver's environment: only the minimal set and what its spec names.
                    (pid,) = daemon.driver_pids()
                    environ = await trio.Path(f"/proc/{pid}/environ").read_bytes()
                    names = {kv.split(b"=", 1)[0].decode() for kv in environ.split(b"\0") if kv}
                    assert names <= set(MINIMAL_ENV) | set(SCRIPTED.env), names
                    assert "HOSTD_SCRIPTED_TOKEN" in names  # the one its spec asks for
                    # The driver prints the secret to stderr, then crashes: the turn's error
                    # carries the stderr tail, which must not carry the secret.
                    second = await c.send(t.id, "/env HOSTD_SCRIPTED_TOKEN\n/crash 3\nq", "auto")
                    end = None
                    async for ev in sub:
                        if isinstance(ev, TurnEnded) and ev.turn_id == second.turn_id:
                            end = ev
                            break
            assert end is not None and end.status == "error"
            assert "scripted: env HOSTD_SCRIPTED_TOKEN=" in end.error  # the tail is there...
            assert secret not in end.error  # ...redacted
        finally:
            await daemon.stop()
        assert secret not in daemon.log_text()
        assert db_bytes_contain(daemon.paths.db_path, secret.encode()) == []
        for value in canaries.values():
            assert db_bytes_contain(daemon.paths.db_path, value.encode()) == []
