"""The blocking one-shot client (`hostd.client.sync_wire`) against a real daemon socket; the connect
retry on a full listen backlog; many windows connecting at once; one-shot CLI commands that
import neither trio nor rich."""

from __future__ import annotations

import errno
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import trio
import trio.testing

from hostd.client.async_client import _connect_socket, open_client
from hostd.client.sync_wire import (
    BACKLOG_RETRY_S,
    REFUSED_RETRY_S,
    ConnectRetry,
    DaemonNotRunning,
    WireClient,
    request,
)
from hostd.shell.paths import Paths
from hostd_protocol.client_messages import (
    CreateTopic,
    GetTopic,
    ListTopics,
    Status,
    StatusResult,
    TopicListResult,
    TopicResult,
)
from hostd_protocol.errors import UnknownTopic
from tests.shell.conftest import Running


async def test_round_trip(running: Running) -> None:
    def go() -> tuple[TopicResult, TopicListResult, TopicResult]:
        with WireClient.open(running.paths, client_name="sync-test") as wire:
            assert wire.welcome is not None and wire.welcome.connection_id
            created = wire.request(CreateTopic(id=0, title="sync wire"))
            listed = wire.request(ListTopics(id=0))
            got = wire.request(GetTopic(id=0, topic_id=created.topic.id))
            return created, listed, got

    with trio.fail_after(10):
        created, listed, got = await trio.to_thread.run_sync(go)
    assert [t.id for t in listed.topics] == [created.topic.id]
    assert got.topic.title == "sync wire"
    async with open_client(running.paths) as c:
        assert (await c.get_topic(created.topic.id)).title == "sync wire"


async def test_error_reply_is_the_typed_error(running: Running) -> None:
    def go() -> None:
        with WireClient.open(running.paths) as wire:
            with pytest.raises(UnknownTopic, match=r"^no topic with id 'nope'$"):
                wire.request(GetTopic(id=0, topic_id="nope"))
            # The connection is still usable after an error reply.
            assert isinstance(wire.request(Status(id=0)), StatusResult)

    with trio.fail_after(10):
        await trio.to_thread.run_sync(go)


async def test_one_request_helper(running: Running) -> None:
    with trio.fail_after(10):
        st = await trio.to_thread.run_sync(lambda: request(running.paths, Status(id=0)))
    assert isinstance(st, StatusResult) and st.socket_path == str(running.paths.socket_path)


async def _both_not_running(paths: Paths) -> tuple[str, str]:
    with pytest.raises(DaemonNotRunning) as sync_err:
        await trio.to_thread.run_sync(lambda: WireClient.open(paths))
    with pytest.raises(DaemonNotRunning) as async_err:
        async with open_client(paths):
            pass
    return sync_err.value.message, async_err.value.message


async def test_not_running_reads_like_the_async_client(paths: Paths) -> None:
    with trio.fail_after(10):
        sync_msg, async_msg = await _both_not_running(paths)
        assert sync_msg == async_msg
        assert sync_msg == (
            f"hostd is not running (no socket); start it with "
            f"`hostd serve --home {paths.home}` (or `hostd serve --detach --home {paths.home}`)"
        )
        # A stale socket (a SIGKILLed daemon's): refused, retried briefly, then the same words.
        paths.ensure()
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(str(paths.socket_path))
        s.close()
        sync_msg, async_msg = await _both_not_running(paths)
        assert sync_msg == async_msg
        assert sync_msg.startswith(
            "hostd is not running (its socket refuses connections: a daemon that stopped"
            " without removing it); start it"
        )


def test_connect_retry_policy(tmp_path: Path) -> None:
    sock = tmp_path / "s"
    retry = ConnectRetry(sock, now=100.0)
    full = BlockingIOError(errno.EAGAIN, "full")
    refused = ConnectionRefusedError(errno.ECONNREFUSED, "refused")
    # A full backlog: retried with growing, capped delays until BACKLOG_RETRY_S.
    delays = [retry.next_delay(full, 100.0) for _ in range(8)]
    assert delays == [0.002, 0.004, 0.008, 0.016, 0.032, 0.05, 0.05, 0.05]
    assert retry.next_delay(full, 100.0 + BACKLOG_RETRY_S) is None
    # Refused: only while the socket file exists, and only for REFUSED_RETRY_S.
    assert ConnectRetry(sock, 0.0).next_delay(refused, 0.0) is None
    sock.touch()
    assert ConnectRetry(sock, 0.0).next_delay(refused, 0.0) == 0.002
    assert ConnectRetry(sock, 0.0).next_delay(refused, REFUSED_RETRY_S) is None
    assert ConnectRetry(sock, 0.0).next_delay(FileNotFoundError(), 0.0) is None


async def test_connect_waits_out_a_full_backlog(paths: Paths) -> None:
    """trio's `open_unix_socket` returns a never-connected socket on EAGAIN; ours retries."""
    paths.ensure()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    fillers: list[socket.socket] = []
    try:
        listener.bind(str(paths.socket_path))
        listener.listen(0)
        with trio.fail_after(10):
            while True:  # fill the backlog until the kernel says EAGAIN
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.setblocking(False)
                fillers.append(s)
                try:
                    s.connect(str(paths.socket_path))
                except BlockingIOError:
                    break
                assert len(fillers) < 100
            result: list[trio.SocketStream] = []

            async def connect() -> None:
                result.append(await _connect_socket(paths))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(connect)
                await trio.testing.wait_all_tasks_blocked()
                assert not result  # still retrying: the backlog is full
                accepted, _ = listener.accept()  # frees one slot
                accepted.close()
            stream = result[0]
            await stream.send_all(b"x")  # connected for real (ENOTCONN otherwise)
            await stream.aclose()
    finally:
        for s in fillers:
            s.close()
        listener.close()


async def test_300_windows_connect_at_once(running: Running) -> None:
    n = 300
    welcomed: list[str] = []
    all_in = trio.Event()

    async def window(i: int, done: trio.Event) -> None:
        async with open_client(running.paths, client_name=f"w{i}") as c:
            assert c.welcome is not None
            welcomed.append(c.welcome.connection_id)
            if len(welcomed) == n:
                all_in.set()
            await done.wait()  # hold the connection until every window is in

    with trio.fail_after(60):
        done = trio.Event()
        async with trio.open_nursery() as nursery:
            for i in range(n):
                nursery.start_soon(window, i, done)
            await all_in.wait()
            async with open_client(running.paths) as c:
                assert (await c.status()).connections == n + 1
            done.set()
    assert len(set(welcomed)) == n


@pytest.mark.parametrize(
    "argv",
    [
        ["topics"],
        ["status"],
        ["new", "--title", "light"],
        ["usage"],
    ],
)
async def test_one_shot_commands_import_neither_trio_nor_rich(
    running: Running, argv: list[str]
) -> None:
    code = (
        "import sys\n"
        "from hostd.cli.main import main\n"
        f"rc = main(['--home', {str(running.paths.home)!r}, *{argv!r}])\n"
        "heavy = sorted(m for m in ('trio', 'rich') if m in sys.modules)\n"
        "print('HEAVY', heavy, rc)\n"
    )
    with trio.fail_after(30):
        proc = await trio.run_process(
            [sys.executable, "-c", code], capture_stdout=True, capture_stderr=True, check=False
        )
    out = proc.stdout.decode()
    assert proc.returncode == 0, proc.stderr.decode()
    assert out.rstrip().endswith("HEAVY [] 0"), out


def test_main_imports_nothing_heavy() -> None:
    code = (
        "import sys, hostd, hostd.cli.main, hostd.client.sync_wire\n"
        "print(sorted(m for m in ('trio', 'rich', 'apsw', 'platformdirs') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=30
    ).stdout
    assert out.strip() == "[]"


def test_a_request_over_the_frame_size_names_the_limit_it_broke() -> None:
    """Both clients encode through `encode_request`: a request too big for a frame says which
    of its own limits it broke (as the daemon would under the frame size), not "exceeds the
    maximum frame size"."""
    from hostd.client.sync_wire import encode_request
    from hostd_protocol.client_messages import ClientMessage, CreateTopic, SendMessage
    from hostd_protocol.common import HistoryMessage
    from hostd_protocol.errors import FrameTooLarge, PayloadTooLarge
    from hostd_protocol.framing import Codec

    codec = Codec(ClientMessage, "msgpack")
    with pytest.raises(PayloadTooLarge, match=r"^the message is 9000000 bytes; the limit is "
                       r"1048576 bytes$"):
        encode_request(codec, SendMessage(id=1, topic_id="tp", text="x" * 9_000_000))
    history = [HistoryMessage(role="user", text="h" * 3_000_000)] * 3
    with pytest.raises(PayloadTooLarge, match=r"^the history sent along is 9000000 bytes"):
        encode_request(codec, SendMessage(id=1, topic_id="tp", text="q", history=history))
    with pytest.raises(PayloadTooLarge, match=r"^title is 9000000 characters; the limit is"):
        encode_request(codec, CreateTopic(id=1, title="t" * 9_000_000))
    # Within every limit of its own yet over the frame: the frame size is the reason.
    with pytest.raises(FrameTooLarge):
        encode_request(Codec(ClientMessage, "msgpack", max_frame_size=1000),
                       SendMessage(id=1, topic_id="tp", text="x" * 2000))
