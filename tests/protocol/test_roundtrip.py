"""Every message of every channel survives encode -> frame -> decode, in both encodings."""

from __future__ import annotations

from typing import Any

import msgspec.inspect as mi
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hostd_protocol.framing import Codec, MessageReader
from tests.protocol.wire_types import CHANNELS, example_for, messages, union_members

ENCODINGS = ["msgpack", "json"]


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("channel", list(CHANNELS))
def test_roundtrip_every_message(channel: str, encoding: Any) -> None:
    union = CHANNELS[channel]
    codec: Codec[Any] = Codec(union, encoding)

    @settings(max_examples=150, deadline=None)
    @given(msg=messages(union))
    def check(msg: Any) -> None:
        assert codec.decode(codec.encode(msg)) == msg
        reader = MessageReader(codec)
        assert reader.feed(codec.encode_frame(msg)) == [msg]

    check()


@pytest.mark.parametrize("encoding", ENCODINGS)
@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_any_split_of_any_sequence_decodes(encoding: Any, data: st.DataObject) -> None:
    union = CHANNELS["server"]
    codec: Codec[Any] = Codec(union, encoding)
    msgs = data.draw(st.lists(messages(union), min_size=1, max_size=5))
    stream = codec.encode_frames(msgs)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=8)))
    reader = MessageReader(codec)
    got: list[Any] = []
    prev = 0
    for cut in [*cuts, len(stream)]:
        got.extend(reader.feed(stream[prev:cut]))
        prev = cut
    reader.close()
    assert got == msgs


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_one_byte_at_a_time(encoding: Any) -> None:
    union = CHANNELS["driver-event"]
    codec: Codec[Any] = Codec(union, encoding)
    msgs = [example_for(mi.type_info(cls)) for cls in union_members(union)]
    stream = codec.encode_frames(msgs)
    reader = MessageReader(codec)
    got: list[Any] = []
    for i in range(len(stream)):
        got.extend(reader.feed(stream[i : i + 1]))
    assert got == msgs
