"""Memory and descriptors stay bounded whatever connections do (issue 14, item 7): silent
connections, stalled partial frames, more connections than the daemon serves, and refused
sends that brought megabytes along. Real daemon (in process), real sockets."""

from __future__ import annotations

import struct

import msgspec
import pytest
import trio
import trio.testing

from hostd.client import open_client
from hostd.shell.daemon import DaemonConfig
from hostd.shell.paths import Paths
from hostd_protocol.client_messages import ErrorReply
from hostd_protocol.common import HistoryMessage
from hostd_protocol.errors import TopicBusy
from tests.reliability.conftest import start_in_process
from tests.shell.test_bad_input import Raw

pytestmark = pytest.mark.e2e

CONFIG = DaemonConfig(default_driver="scripted", hello_timeout=0.5, frame_timeout=0.5,
                      max_connections=8)


async def test_silent_and_stalled_connections_are_closed_with_a_reason(
    nursery: trio.Nursery, paths: Paths
) -> None:
    with trio.fail_after(30):
        d = await start_in_process(nursery, paths, config=CONFIG)
        silent = await Raw.connect(paths)  # never says hello
        reply = await silent.recv()
        assert isinstance(reply, ErrorReply) and reply.code == "handshake_error"
        assert reply.message == "no hello within 0.5s; closing"
        await silent.expect_eof()

        big_first = await Raw.connect(paths)  # announces 8 MiB before its hello
        await big_first.send(struct.pack(">I", 8 * 1024 * 1024) + b"\x80")
        reply = await big_first.recv()
        assert isinstance(reply, ErrorReply) and reply.code == "frame_too_large"

        # A hello and a big first request in one write are fine (the pre-hello bound is
        # checked after the frames of that read were served).
        eager = await Raw.connect(paths)
        hello = msgspec.msgpack.encode({"type": "hello", "protocol_version": [1, 0]})
        big = msgspec.msgpack.encode({"type": "get-topic", "id": 3, "topic_id": "t" * 200_000})
        await eager.send(struct.pack(">I", len(hello)) + hello + struct.pack(">I", len(big)) + big)
        assert type(await eager.recv()).__name__ == "Welcome"
        reply = await eager.recv()
        assert isinstance(reply, ErrorReply) and reply.id == 3, reply
        assert reply.code == "payload_too_large"  # topic_id over 4096 characters, refused
        await eager.stream.aclose()

        stalled = await Raw.connect(paths)  # says hello, then starts a frame and stalls
        await stalled.hello()
        await stalled.send(struct.pack(">I", 1024 * 1024) + b"\x82" + b"x" * 1000)
        reply = await stalled.recv()
        assert isinstance(reply, ErrorReply) and reply.code == "truncated_frame"
        assert reply.message == ("a frame started 0.5s ago and is still incomplete; closing")
        await stalled.expect_eof()

        # A welcomed window that is merely idle stays.
        async with open_client(paths) as c:
            with trio.move_on_after(1.5):
                await trio.sleep_forever()  # idle, well past both timeouts
            assert await c.ping()
        for raw in (silent, big_first, stalled):
            await raw.stream.aclose()
        await d.stop()


async def test_connections_beyond_the_cap_get_a_clear_refusal(
    nursery: trio.Nursery, paths: Paths
) -> None:
    with trio.fail_after(30):
        d = await start_in_process(nursery, paths, config=CONFIG)
        held = []
        for _ in range(CONFIG.max_connections):
            raw = await Raw.connect(paths)
            await raw.hello()
            held.append(raw)
        extra = await Raw.connect(paths)
        reply = await extra.recv()
        assert isinstance(reply, ErrorReply) and reply.code == "too_many_connections"
        assert reply.message.startswith("hostd already serves 8 connections, its maximum")
        await extra.expect_eof()
        await extra.stream.aclose()
        await held.pop().stream.aclose()
        # A slot is free again once the daemon read that EOF (the connection is gone from
        # its set, which happens just before the slot is released).
        while len(d.daemon.connections) >= CONFIG.max_connections:
            d.daemon._connections_changed = changed = trio.Event()
            await changed.wait()
        await trio.testing.wait_all_tasks_blocked()
        async with open_client(paths) as c:
            assert await c.ping()
        for raw in held:
            await raw.stream.aclose()
        await d.stop()


async def test_refused_sends_release_what_they_brought(
    nursery: trio.Nursery, paths: Paths
) -> None:
    with trio.fail_after(30):
        d = await start_in_process(nursery, paths)
        async with open_client(paths) as c:
            t = await c.create_topic(driver="scripted")
            await c.send(t.id, "/wait\nq", "start")
            history = [HistoryMessage(role="user", text="h" * 1_000_000)]
            for _ in range(10):
                with pytest.raises(TopicBusy):
                    await c.send(t.id, "again", "start", history=history)
            assert not d.daemon.turns._transcripts  # nothing kept for refused sends
            await c.stop(t.id)
        await d.stop()


async def test_incomplete_frames_of_all_connections_share_one_budget(
    nursery: trio.Nursery, paths: Paths
) -> None:
    """30 connections each holding most of an 8 MiB frame once took 278 MiB: together they
    now get `max_partial_bytes`, and the one that goes over is closed with a reason."""
    config = DaemonConfig(default_driver="scripted", max_partial_bytes=5 * 1024 * 1024)
    with trio.fail_after(30):
        d = await start_in_process(nursery, paths, config=config)
        held = []
        for _ in range(2):  # 2 x 2 MiB: within the budget
            raw = await Raw.connect(paths)
            await raw.hello()
            await raw.send(struct.pack(">I", 4 * 1024 * 1024) + b"\x82" + b"x" * (2 * 1024 * 1024))
            held.append(raw)
        over = await Raw.connect(paths)
        await over.hello()
        try:  # the daemon closes it while it is still sending
            await over.send(struct.pack(">I", 4 * 1024 * 1024) + b"\x82" + b"x" * (2 * 1024 * 1024))
        except trio.BrokenResourceError:
            pass
        try:
            reply = await over.recv()
        except (trio.BrokenResourceError, EOFError):
            pass  # closed with our bytes unread: the kernel may reset before we read the reply
        else:
            assert isinstance(reply, ErrorReply) and reply.code == "too_many_connections"
            assert "incomplete frames" in reply.message
        await over.stream.aclose()
        assert d.daemon._partial_frames.total <= config.max_partial_bytes
        # Small requests still pass while the budget is used up, and closing frees it.
        async with open_client(paths) as c:
            assert await c.ping()
            for raw in held:
                await raw.stream.aclose()
            while d.daemon._partial_frames.total:
                await c.ping()  # each round trip lets the daemon read the closes
            t = await c.create_topic(driver="scripted")
            assert (await c.send(t.id, "/text ok\n" + "y" * 1_000_000 + "\nq", "start")).row_id
        await d.stop()


async def test_unwelcomed_connections_never_keep_a_client_out(
    nursery: trio.Nursery, paths: Paths
) -> None:
    """Issue 31 item 8: 300 connections that never say hello (more than every slot) do not
    keep a real client out. They share a small quota of their own (`max_startups`); when it
    is full the oldest is dropped with a reason (like sshd's MaxStartups), so whoever
    connects next, and says hello, gets in."""
    config = DaemonConfig(default_driver="scripted", hello_timeout=120.0, max_connections=256,
                          max_startups=16)
    with trio.fail_after(60):
        d = await start_in_process(nursery, paths, config=config)
        silent = [await Raw.connect(paths) for _ in range(300)]
        async with open_client(paths) as c:
            assert await c.ping()
            # The oldest were dropped with a reason; never more than the quota stayed.
            reply = await silent[0].recv()
            assert isinstance(reply, ErrorReply) and reply.code == "handshake_error"
            assert reply.message == (
                "closed before its hello: 16 newer connections are waiting to say hello (at "
                "most 16 may wait); connect again and send hello at once"
            )
            await silent[0].expect_eof()
            assert len(d.daemon.connections) <= 16 + 1
            # Welcomed windows up to the cap still come in beside the silent ones.
            windows = []
            for _ in range(config.max_connections - 1 - 16):
                raw = await Raw.connect(paths)
                await raw.hello()
                windows.append(raw)
            async with open_client(paths) as late:
                assert await late.ping()
        for raw in silent + windows:
            await raw.stream.aclose()
        await d.stop()
