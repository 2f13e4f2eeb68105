"""One write per window per batch of driver events (`TopicStream.held` + `Connection.flush`):
every frame still arrives, in order, and a window whose socket is full still holds up nobody."""

from __future__ import annotations

import socket
from typing import Any

import msgspec
import trio

from hostd.shell.connection import Connection
from hostd.shell.fanout import TopicStream
from hostd_protocol.client_messages import RowAppended, ServerMessage
from hostd_protocol.common import TextDelta
from hostd_protocol.framing import FrameDecoder
from tests.shell.test_fanout_and_clients import Counting

_decode = msgspec.msgpack.Decoder(ServerMessage).decode


def event(seq: int, text: str = "hi") -> RowAppended:
    return RowAppended(topic_id="tp", seq=seq, row_id="r", chunk=TextDelta(text))


def test_a_held_batch_is_flushed_once_per_window_at_its_end() -> None:
    stream = TopicStream("tp", 0)
    subs = [Counting("msgpack"), Counting("json")]
    for s in subs:
        stream.subscribe(s)
    with stream.held():
        for seq in (1, 2, 3):
            stream.publish(event(seq))
        with stream.held():  # nested: the outer batch flushes
            stream.publish(event(4))
        assert all(s.written == [] for s in subs)  # queued, nothing written yet
    for s in subs:
        assert s.written == [s.frames] and len(s.frames) == 4
    stream.publish(event(5))  # outside a batch: written at once, as before
    assert all(len(s.written) == 2 and len(s.written[1]) == 1 for s in subs)


class NoRequests:
    async def handle_request(self, conn: Connection, msg: Any) -> None:
        raise AssertionError(f"no request expected, got {msg!r}")

    def connection_closed(self, conn: Connection) -> None:
        pass


async def read_seqs(sock: trio.socket.SocketType, count: int) -> list[int]:
    frames = FrameDecoder(1 << 24)
    seqs: list[int] = []
    while len(seqs) < count:
        data = await sock.recv(1 << 16)
        assert data, f"the connection closed after {len(seqs)} frames"
        seqs.extend(_decode(body).seq for body in frames.feed(data))  # type: ignore[union-attr]
    return seqs


async def test_a_batch_reaches_every_window_in_order_and_a_full_one_blocks_nobody() -> None:
    stream = TopicStream("tp", 0)
    pairs = [trio.socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM) for _ in range(2)]
    fast_peer, slow_peer = pairs[0][1], pairs[1][1]
    conns = [
        Connection(
            trio.SocketStream(ours),
            NoRequests(),
            connection_id=f"c{i}",
            max_queue_bytes=64 << 20,
            hello_timeout=60,
        )
        for i, (ours, _) in enumerate(pairs)
    ]
    n, text = 400, "x" * 2000  # ~800 KB: far beyond a socket buffer
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            for conn in conns:
                stream.subscribe(conn)
                nursery.start_soon(conn.run)
            await trio.testing.wait_all_tasks_blocked()
            with stream.held():
                for seq in range(1, n + 1):
                    stream.publish(event(seq, text))
            # The fast window reads everything while the slow one has not read a byte:
            # its full socket holds up neither the batch nor the other window.
            assert await read_seqs(fast_peer, n) == list(range(1, n + 1))
            stream.publish(event(n + 1))
            assert await read_seqs(fast_peer, 1) == [n + 1]
            # The slow window's rest went to its writer: it gets every frame, in order.
            assert await read_seqs(slow_peer, n + 1) == list(range(1, n + 2))
            # Batched: what the socket took at once, the rest in one writer pass, the last one.
            assert conns[0].statistics().writes <= 3
            assert conns[1].statistics().resyncs == 0
            for conn in conns:
                conn.abort()
    for ours, peer in pairs:
        ours.close()
        peer.close()


def writer_tasks() -> int:
    """How many connection writer tasks are alive in this trio run."""
    count, nurseries = 0, list(trio.lowlevel.current_root_task().child_nurseries)
    while nurseries:
        for task in nurseries.pop().child_tasks:
            count += task.name.endswith("Connection._writer")
            nurseries.extend(task.child_nurseries)
    return count


async def test_a_window_that_keeps_up_has_no_writer_task() -> None:
    # A streaming window's frames go out through `flush`; its writer task only lives while
    # something is left for it (a full socket, a reply), then ends: fewer long-lived tasks for
    # every full GC pass to walk. Frames still arrive in order, through either path.
    stream = TopicStream("tp", 0)
    ours, peer = trio.socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    conn = Connection(
        trio.SocketStream(ours), NoRequests(), connection_id="c", max_queue_bytes=64 << 20,
        hello_timeout=60,
    )
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            stream.subscribe(conn)
            nursery.start_soon(conn.run)
            await trio.testing.wait_all_tasks_blocked()
            assert writer_tasks() == 0
            for seq in (1, 2, 3):
                with stream.held():
                    stream.publish(event(seq))
            assert await read_seqs(peer, 3) == [1, 2, 3]
            await trio.testing.wait_all_tasks_blocked()
            assert writer_tasks() == 0
            stream.publish(event(4))  # outside a batch: the writer writes it, then ends
            assert writer_tasks() == 1
            assert await read_seqs(peer, 1) == [4]
            await trio.testing.wait_all_tasks_blocked()
            assert writer_tasks() == 0
            # Beyond the socket's buffer: the writer takes the rest, ends when it is written.
            n, text = 400, "x" * 2000
            with stream.held():
                for seq in range(5, 5 + n):
                    stream.publish(event(seq, text))
            assert writer_tasks() == 1
            assert await read_seqs(peer, n) == list(range(5, 5 + n))
            await trio.testing.wait_all_tasks_blocked()
            assert writer_tasks() == 0
            stream.publish(event(5 + n))
            assert await read_seqs(peer, 1) == [5 + n]
            conn.abort()
    ours.close()
    peer.close()


async def test_an_aborted_window_is_sent_nothing_more() -> None:
    # Until its task has unwound, an aborted connection is still subscribed: the frames the
    # fan-out gives it meanwhile are not written (no writer is started for them).
    stream = TopicStream("tp", 0)
    ours, peer = trio.socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    conn = Connection(
        trio.SocketStream(ours), NoRequests(), connection_id="c", hello_timeout=60
    )
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            stream.subscribe(conn)
            nursery.start_soon(conn.run)
            await trio.testing.wait_all_tasks_blocked()
            with stream.held():
                stream.publish(event(1))
            assert await read_seqs(peer, 1) == [1]
            conn.abort()
            with stream.held():
                stream.publish(event(2))
            stream.publish(event(3))
        assert await peer.recv(1 << 16) == b""  # closed, and nothing after seq 1
    ours.close()
    peer.close()
