"""Framing: limits, truncation and garbage become typed errors; the decoder never guesses."""

from __future__ import annotations

import struct

import msgspec
import pytest

from hostd_protocol.client_messages import (
    ClientMessage,
    Hello,
    ListTopics,
    Ping,
    RenameTopic,
    ServerMessage,
)
from hostd_protocol.errors import FrameTooLarge, InvalidMessage, MalformedFrame, TruncatedFrame
from hostd_protocol.framing import (
    Codec,
    FrameDecoder,
    MessageReader,
    detect_encoding,
    encode_frame,
)


def test_frames_split_anywhere() -> None:
    stream = encode_frame(b"hello") + encode_frame(b"") + encode_frame(b"world!")
    for cut in range(len(stream) + 1):
        dec = FrameDecoder()
        got = dec.feed(stream[:cut]) + dec.feed(stream[cut:])
        assert got == [b"hello", b"", b"world!"]
        dec.close()


def test_oversized_header_raises_before_body_arrives() -> None:
    dec = FrameDecoder(max_frame_size=10)
    with pytest.raises(
        FrameTooLarge, match=r"^peer announced a frame of 11 bytes; the maximum is 10 bytes$"
    ):
        dec.feed(struct.pack(">I", 11))
    # The decoder stays failed: the stream is no longer trustworthy.
    with pytest.raises(FrameTooLarge):
        dec.feed(encode_frame(b"ok"))


def test_frame_at_limit_is_accepted() -> None:
    dec = FrameDecoder(max_frame_size=10)
    assert dec.feed(encode_frame(b"x" * 10, 10)) == [b"x" * 10]


def test_encoder_refuses_oversized() -> None:
    with pytest.raises(FrameTooLarge, match=r"^frame body of 5 bytes exceeds the maximum"):
        encode_frame(b"12345", max_frame_size=4)
    codec: Codec[object] = Codec(ClientMessage, "msgpack", max_frame_size=32)
    codec.encode_frame(ListTopics(id=1))  # fits
    with pytest.raises(FrameTooLarge, match=r"^message of \d+ bytes exceeds the maximum"):
        codec.encode_frame(RenameTopic(id=1, topic_id="t", title="x" * 100))


@pytest.mark.parametrize("encoding", ["msgpack", "json"])
def test_encode_frame_into_appends_the_same_frame(encoding: str) -> None:
    codec: Codec[object] = Codec(ClientMessage, encoding, max_frame_size=200)  # type: ignore[arg-type]
    msgs = [ListTopics(id=1), RenameTopic(id=2, topic_id="t", title="é" * 10), Ping(id=3)]
    buf = bytearray(b"already here")
    sizes = [codec.encode_frame_into(m, buf) for m in msgs]
    expected = b"".join(codec.encode_frame(m) for m in msgs)
    assert bytes(buf) == b"already here" + expected
    assert sizes == [len(codec.encode_frame(m)) for m in msgs]


def test_encode_frame_into_leaves_the_buffer_as_it_was_on_error() -> None:
    codec: Codec[object] = Codec(ClientMessage, "msgpack", max_frame_size=32)
    buf = bytearray(codec.encode_frame(ListTopics(id=1)))
    before = bytes(buf)
    with pytest.raises(FrameTooLarge, match=r"^message of \d+ bytes exceeds the maximum"):
        codec.encode_frame_into(RenameTopic(id=1, topic_id="t", title="x" * 100), buf)
    assert bytes(buf) == before
    with pytest.raises(TypeError):
        codec.encode_frame_into(object(), buf)
    assert bytes(buf) == before


def test_truncated_stream() -> None:
    dec = FrameDecoder()
    dec.feed(encode_frame(b"abcdef")[:-2])
    with pytest.raises(TruncatedFrame, match=r"^stream ended inside a frame \(8 bytes"):
        dec.close()


def test_empty_close_is_fine() -> None:
    FrameDecoder().close()


@pytest.mark.parametrize("encoding", ["msgpack", "json"])
def test_garbage_body_is_malformed(encoding: str) -> None:
    codec: Codec[object] = Codec(ClientMessage, encoding)  # type: ignore[arg-type]
    with pytest.raises(MalformedFrame, match=rf"^frame body is not valid {encoding}"):
        codec.decode(b"\xc1\xff{garbage")


@pytest.mark.parametrize("encoding", ["msgpack", "json"])
def test_wrong_shape_is_invalid_message_with_id(encoding: str) -> None:
    codec: Codec[object] = Codec(ClientMessage, encoding)  # type: ignore[arg-type]
    enc = msgspec.msgpack.encode if encoding == "msgpack" else msgspec.json.encode
    # Known tag, wrong field type: the request id is recovered so the error can name it.
    with pytest.raises(InvalidMessage) as info:
        codec.decode(enc({"type": "get-topic", "id": 42, "topic_id": 5}))
    assert info.value.details["id"] == 42
    assert "Expected `str`, got `int`" in info.value.message
    # Unknown tag.
    with pytest.raises(InvalidMessage) as info:
        codec.decode(enc({"type": "no-such-request", "id": 3}))
    assert info.value.details["id"] == 3
    # Not even an object.
    with pytest.raises(InvalidMessage) as info:
        codec.decode(enc([1, 2, 3]))
    assert info.value.details["id"] is None


def test_reader_yields_invalid_messages_in_place_and_goes_on() -> None:
    codec: Codec[object] = Codec(ClientMessage, "msgpack")
    bad = encode_frame(msgspec.msgpack.encode({"type": "ping", "id": "nope"}))
    stream = codec.encode_frame(Ping(id=1)) + bad + codec.encode_frame(Ping(id=2))
    items = MessageReader(codec).feed(stream)
    assert items[0] == Ping(id=1)
    assert isinstance(items[1], InvalidMessage)
    assert items[2] == Ping(id=2)


def test_detect_encoding() -> None:
    json_codec: Codec[object] = Codec(ServerMessage, "json")
    mp_codec: Codec[object] = Codec(ServerMessage, "msgpack")
    assert detect_encoding(json_codec.encode(Hello(protocol_version=(1, 0)))) == "json"
    assert detect_encoding(b"  \n{}") == "json"
    assert detect_encoding(mp_codec.encode(Hello(protocol_version=(1, 0)))) == "msgpack"


@pytest.mark.parametrize("id_first", [True, False])
def test_too_deep_to_decode_is_an_invalid_message_naming_its_id(id_first: bool) -> None:
    """Nesting beyond the decoder's stack is one refused message (with its id), not a crash."""

    deep = b"\x81\xa1a" * 5000 + b"\x80"
    fields = [b"\xa4type\xaccreate-topic", b"\xa2id\xcd\x01\x00", b"\xa7options" + deep]
    if not id_first:
        fields = [fields[0], fields[2], fields[1]]
    body = b"\x83" + b"".join(fields)
    codec: Codec[object] = Codec(ClientMessage, "msgpack")  # type: ignore[arg-type]
    with pytest.raises(InvalidMessage, match=r"too deeply") as info:
        codec.decode(body)
    assert info.value.details["id"] == 256
    jbody = b'{"type":"create-topic","id":256,"options":' + b'{"a":' * 5000 + b"{}" + b"}" * 5001
    jcodec: Codec[object] = Codec(ClientMessage, "json")  # type: ignore[arg-type]
    with pytest.raises(InvalidMessage) as info:
        jcodec.decode(jbody)
    assert info.value.details["id"] == 256
