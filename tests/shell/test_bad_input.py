"""Bad input from a socket: typed errors, framing errors close, nothing crashes the daemon."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio

from hostd.client import open_client
from hostd.shell.paths import Paths
from hostd_protocol.client_messages import ErrorReply, Reply, ServerMessage, Welcome
from hostd_protocol.common import PROTOCOL_VERSION
from hostd_protocol.errors import TopicClosed
from hostd_protocol.framing import Codec, FrameDecoder, encode_frame
from tests.shell.conftest import Running

CODEC: Codec[Any] = Codec(ServerMessage, "msgpack")
JSON_CODEC: Codec[Any] = Codec(ServerMessage, "json")
HELLO = msgspec.msgpack.encode({"type": "hello", "protocol_version": list(PROTOCOL_VERSION)})


class Raw:
    """A raw socket speaking frames by hand."""

    def __init__(self, stream: trio.SocketStream, codec: Codec[Any] = CODEC) -> None:
        self.stream = stream
        self.codec = codec
        self.frames = FrameDecoder()
        self.buffered: list[Any] = []

    @classmethod
    async def connect(cls, paths: Paths, codec: Codec[Any] = CODEC) -> Raw:
        return cls(await trio.open_unix_socket(str(paths.socket_path)), codec)

    async def send(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def send_body(self, body: bytes) -> None:
        await self.send(encode_frame(body))

    async def recv(self) -> Any:
        while not self.buffered:
            data = await self.stream.receive_some(65536)
            if not data:
                raise EOFError
            self.buffered += [self.codec.decode(b) for b in self.frames.feed(data)]
        return self.buffered.pop(0)

    async def expect_eof(self) -> None:
        assert not self.buffered
        while True:
            data = await self.stream.receive_some(65536)
            if not data:
                return
            assert not self.frames.feed(data), "no frame expected before close"

    async def hello(self) -> None:
        await self.send_body(HELLO)
        assert isinstance(await self.recv(), Welcome)

    async def aclose(self) -> None:
        await self.stream.aclose()


async def still_serving(paths: Paths) -> None:
    async with open_client(paths) as c:
        assert (await c.ping()).time > 0


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (encode_frame(b"\xc1\xc1\xc1"), "malformed_frame"),  # 0xc1 is never valid msgpack
        (struct.pack(">I", 2**31) + b"xx", "frame_too_large"),
    ],
    ids=["garbage", "oversized-length"],
)
async def test_framing_errors_close_the_connection(
    running: Running, data: bytes, code: str
) -> None:
    with trio.fail_after(10):
        raw = await Raw.connect(running.paths)
        await raw.hello()
        await raw.send(data)
        err = await raw.recv()
        assert isinstance(err, ErrorReply) and err.code == code and err.id is None
        await raw.expect_eof()
        await raw.aclose()
        await still_serving(running.paths)


async def test_truncated_frame_then_eof(running: Running) -> None:
    with trio.fail_after(10):
        raw = await Raw.connect(running.paths)
        await raw.hello()
        await raw.send(encode_frame(msgspec.msgpack.encode({"type": "ping", "id": 1}))[:-2])
        await raw.stream.send_eof()
        await raw.expect_eof()
        await raw.aclose()
        await still_serving(running.paths)


async def test_wrong_types_and_unknown_request_keep_the_connection(running: Running) -> None:
    with trio.fail_after(10):
        raw = await Raw.connect(running.paths)
        await raw.hello()
        await raw.send_body(msgspec.msgpack.encode({"type": "get-topic", "id": 7, "topic_id": 5}))
        err = await raw.recv()
        assert isinstance(err, ErrorReply)
        assert (err.code, err.id) == ("invalid_message", 7)
        await raw.send_body(msgspec.msgpack.encode({"type": "launch-rockets", "id": 8}))
        err = await raw.recv()
        assert isinstance(err, ErrorReply)
        assert (err.code, err.id) == ("unknown_request", 8)
        assert err.message == "unknown request type 'launch-rockets'"
        await raw.send_body(msgspec.msgpack.encode({"type": "get-topic", "id": 9, "topic_id": "x"}))
        err = await raw.recv()
        assert isinstance(err, ErrorReply) and (err.code, err.id) == ("unknown_topic", 9)
        await raw.send_body(msgspec.msgpack.encode({"type": "ping", "id": 10}))
        reply = await raw.recv()
        assert isinstance(reply, Reply) and reply.id == 10
        await raw.aclose()


_NO_ID = ("; it names no request id, so nothing can be answered by it: the connection is "
          "closed (every request needs an integer id)")


@pytest.mark.parametrize(
    ("body", "code", "message"),
    [
        ({"type": "get-topic", "topic_id": "x"}, "invalid_message",
         "invalid message: Object missing required field `id`" + _NO_ID),
        ({"type": "launch-rockets"}, "unknown_request",
         "unknown request type 'launch-rockets'" + _NO_ID),
        ({"type": "ping", "id": "seven"}, "invalid_message",
         "invalid message: Expected `int`, got `str` - at `$.id`" + _NO_ID),
        ({"type": "hello", "protocol_version": [1, 0]}, "handshake_error",
         "hello was already received; closing the connection"),
    ],
)
async def test_a_bad_message_without_a_request_id_closes_the_connection(
    running: Running, body: dict[str, object], code: str, message: str
) -> None:
    """Issue 36: nothing can be answered by a message that names no request id (the client
    cannot tell which request failed), so like a framing error it gets its typed error, with
    no id, and the connection closes; the daemon serves others as before. An error without
    an id is always a connection's last frame (a second hello's too)."""
    with trio.fail_after(10):
        raw = await Raw.connect(running.paths)
        await raw.hello()
        await raw.send_body(msgspec.msgpack.encode(body))
        err = await raw.recv()
        assert isinstance(err, ErrorReply) and (err.code, err.id) == (code, None), err
        assert err.message == message
        await raw.expect_eof()
        await raw.aclose()
        await still_serving(running.paths)


async def test_request_before_hello(running: Running) -> None:
    with trio.fail_after(10):
        raw = await Raw.connect(running.paths)
        await raw.send_body(msgspec.msgpack.encode({"type": "ping", "id": 3}))
        err = await raw.recv()
        assert isinstance(err, ErrorReply)
        assert err.code == "handshake_error"
        assert err.message == "the first message must be hello, not 'ping'"
        await raw.expect_eof()
        await raw.aclose()


async def test_version_mismatch(running: Running) -> None:
    with trio.fail_after(10):
        raw = await Raw.connect(running.paths)
        await raw.send_body(msgspec.msgpack.encode({"type": "hello", "protocol_version": [99, 0]}))
        err = await raw.recv()
        assert isinstance(err, ErrorReply) and err.code == "version_mismatch"
        await raw.expect_eof()
        await raw.aclose()


async def test_json_encoding_is_negotiated_by_the_first_frame(running: Running) -> None:
    with trio.fail_after(10):
        raw = await Raw.connect(running.paths, JSON_CODEC)
        await raw.send_body(b'{"type": "hello", "protocol_version": [1, 0]}')
        assert isinstance(await raw.recv(), Welcome)
        await raw.send_body(b'{"type": "list-topics", "id": 1}')
        reply = await raw.recv()
        assert isinstance(reply, Reply) and reply.id == 1
        await raw.aclose()


async def test_many_bad_connections_do_not_hurt(running: Running) -> None:
    with trio.fail_after(20):
        async def bad(i: int) -> None:
            raw = await Raw.connect(running.paths)
            await raw.send(bytes([i % 256]) * 37)
            await raw.aclose()

        async with trio.open_nursery() as n:
            for i in range(50):
                n.start_soon(bad, i)
        await still_serving(running.paths)


async def test_a_topic_bug_does_not_take_the_daemon_down(running: Running) -> None:
    with trio.fail_after(10):
        async with open_client(running.paths) as c:
            t = await c.create_topic()
            await c.send(t.id, "q")
            turn = await running.supervisor.turns.receive()
            host = running.daemon.hosts[t.id]

            def broken(*args: object, **kwargs: object) -> object:
                raise RuntimeError("runtime bug")

            host.runtime.driver_event = broken  # type: ignore[method-assign]
            turn.chunk("boom")
            with pytest.raises(TopicClosed, match=r"^topic .* is closed$"):
                while True:  # the failure reaches the host's nursery at its next checkpoint
                    await c.send(t.id, "again", intent="queue")
            other = await c.create_topic()
            assert (await c.send(other.id, "auto:1")).disposition == "started"


async def test_the_daemon_itself_refuses_an_over_limit_text_and_a_missing_working_dir(
    running: Running, tmp_path: Path
) -> None:
    """Both clients check a message text's limit before encoding (so a >8 MiB one names the
    1 MiB limit, not the frame size); the daemon keeps its own typed refusal for any other
    client. A working dir that does not exist is refused at create, not made."""
    from hostd_protocol.limits import MAX_SEND_BYTES

    with trio.fail_after(30):
        raw = await Raw.connect(running.paths)
        await raw.hello()
        text = "x" * (MAX_SEND_BYTES + 1)
        await raw.send_body(msgspec.msgpack.encode(
            {"type": "send", "id": 1, "topic_id": "tp_none", "text": text}
        ))
        err = await raw.recv()
        assert isinstance(err, ErrorReply) and (err.code, err.id) == ("payload_too_large", 1)
        assert err.message == f"the message is {MAX_SEND_BYTES + 1} bytes; the limit is " \
            f"{MAX_SEND_BYTES} bytes"
        missing = tmp_path / "no" / "such"
        await raw.send_body(msgspec.msgpack.encode(
            {"type": "create-topic", "id": 2, "working_dir": str(missing)}
        ))
        err = await raw.recv()
        assert isinstance(err, ErrorReply) and (err.code, err.id) == ("invalid_argument", 2)
        assert err.message == f"working directory {str(missing)!r} does not exist; create " \
            "it, or choose an existing directory"
        assert not (tmp_path / "no").exists()
        await raw.aclose()
        await still_serving(running.paths)


async def test_attach_since_ahead_of_the_topic_resyncs_saying_so(running: Running) -> None:
    """A `since` this topic never handed out (another topic's seq, or one lost with the last
    flush interval when the daemon was killed) gets a resync that says that, not that the
    events "are no longer kept"; a negative one is the window's mistake: a typed error."""
    from hostd_protocol.client_messages import AttachResult, Resync

    with trio.fail_after(10):
        async with open_client(running.paths) as c:
            t = await c.create_topic()
            async with c.attach(t.id) as sub:
                last = sub.seq
        raw = await Raw.connect(running.paths)
        await raw.hello()
        await raw.send_body(msgspec.msgpack.encode(
            {"type": "attach", "id": 1, "topic_id": t.id, "since": last + 1000}
        ))
        reply = await raw.recv()
        assert isinstance(reply, Reply) and isinstance(reply.result, AttachResult)
        resync = await raw.recv()
        assert isinstance(resync, Resync) and resync.seq == last
        assert resync.reason == (
            f"seq {last + 1000} is ahead of this topic's last event (seq {last}): it is not "
            "from this topic, or the daemon lost it in a crash; attach without since for a "
            "fresh snapshot"
        )
        await raw.send_body(msgspec.msgpack.encode(
            {"type": "attach", "id": 2, "topic_id": t.id, "since": -1}
        ))
        err = await raw.recv()
        assert isinstance(err, ErrorReply) and (err.code, err.id) == ("invalid_argument", 2)
        assert err.message == ("since must be a seq this topic handed out (>= 0), not -1; "
                               "leave it out for a fresh snapshot")
        await raw.aclose()
