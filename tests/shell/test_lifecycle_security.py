"""Single instance, stale sockets, file modes, peer credentials, graceful shutdown."""

from __future__ import annotations

import os
import socket
import stat

import pytest
import trio

from hostd.client import DaemonNotRunning, open_client
from hostd.shell.daemon import serve_daemon
from hostd.shell.paths import Paths
from hostd.shell.server import DaemonAlreadyRunning
from hostd_protocol.errors import AccessDenied
from tests.shell.conftest import REGISTRY, Running, start_daemon


def exists(path: object) -> bool:
    return os.path.lexists(path)  # type: ignore[arg-type]


async def test_second_serve_refuses_and_keeps_the_socket(running: Running) -> None:
    with trio.fail_after(10):
        before = os.stat(running.paths.socket_path).st_ino
        with pytest.raises(DaemonAlreadyRunning, match=r"^another hostd is already running \(pid \d+\)"):
            await serve_daemon(running.paths, registry=REGISTRY)
        assert os.stat(running.paths.socket_path).st_ino == before
        async with open_client(running.paths) as c:
            assert (await c.status()).pid == os.getpid()


async def test_stale_socket_is_replaced(nursery: trio.Nursery, paths: Paths) -> None:
    with trio.fail_after(10):
        paths.ensure()
        # What a SIGKILLed daemon leaves: a socket file nobody listens on.
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(str(paths.socket_path))
        s.close()
        with pytest.raises(DaemonNotRunning, match=r"^hostd is not running \(its socket refuses connections"):
            async with open_client(paths):
                pass
        r = await start_daemon(nursery, paths)
        async with open_client(paths) as c:
            assert (await c.ping()).time > 0
        await r.stop()
        assert not exists(paths.socket_path)


async def test_modes_with_permissive_umask(nursery: trio.Nursery, paths: Paths) -> None:
    with trio.fail_after(10):
        old = os.umask(0)
        try:
            # Even a pre-existing, world-open runtime dir is tightened.
            paths.runtime_dir.mkdir(parents=True, mode=0o777)
            os.chmod(paths.runtime_dir, 0o777)
            r = await start_daemon(nursery, paths)
        finally:
            os.umask(old)
        assert stat.S_IMODE(os.stat(paths.runtime_dir).st_mode) == 0o700
        st = os.stat(paths.socket_path)
        assert stat.S_ISSOCK(st.st_mode)
        assert stat.S_IMODE(st.st_mode) == 0o600
        assert stat.S_IMODE(os.stat(paths.lock_path).st_mode) == 0o600
        await r.stop()


async def test_other_uid_is_refused(nursery: trio.Nursery, paths: Paths) -> None:
    with trio.fail_after(10):
        seen: list[int] = []

        def other_user(sock: object) -> int:
            seen.append(1)
            return os.getuid() + 1

        r = await start_daemon(nursery, paths, peer_uid=other_user)
        with pytest.raises(AccessDenied, match=rf"^this hostd serves uid {os.getuid()} only; you are uid {os.getuid() + 1}$"):
            async with open_client(paths):
                pass
        assert seen == [1]
        await r.stop()


async def test_real_peer_credentials_accept_ourselves(running: Running) -> None:
    with trio.fail_after(10):
        async with open_client(running.paths) as c:
            assert (await c.ping()).time > 0


async def test_shutdown_request_stops_turns_flushes_and_removes_socket(
    nursery: trio.Nursery, paths: Paths
) -> None:
    with trio.fail_after(10):
        r = await start_daemon(nursery, paths)
        async with open_client(paths) as c:
            t = await c.create_topic()
            await c.send(t.id, "q")
            turn = await r.supervisor.turns.receive()
            turn.chunk("partial")
            await c.shutdown()
        with trio.fail_after(5):
            await r.done.wait()
        assert not exists(paths.socket_path)
        from hostd.shell.store.store import Store

        with Store(paths.db_path) as s:
            rows = s.load_rows(t.id)
        assert [(x.role, x.status) for x in rows] == [("user", "success"), ("assistant", "stopped")]
        assert rows[1].parts[0].text == "partial"  # type: ignore[union-attr]
        # The lock is free again: a new daemon starts on the same paths.
        r2 = await start_daemon(nursery, paths)
        await r2.stop()
