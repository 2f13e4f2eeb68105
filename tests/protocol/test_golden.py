"""Golden files: the JSON wire shape of every tag, so a change to the wire is a visible diff.

Regenerate after an intended change with `HOSTD_UPDATE_GOLDEN=1 scripts/test tests/protocol`
and review the diff: a changed tag or a removed field breaks old clients.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import msgspec
import msgspec.inspect as mi
import pytest

from hostd_protocol.framing import Codec
from tests.protocol.wire_types import CHANNELS, all_tagged, example_for

GOLDEN = Path(__file__).resolve().parent.parent / "golden"
UPDATE = os.environ.get("HOSTD_UPDATE_GOLDEN") == "1"


def _golden_path(channel: str, cls: type[msgspec.Struct]) -> Path:
    tag = cls.__struct_config__.tag
    return GOLDEN / channel / f"{tag}.json"


@pytest.mark.parametrize(
    ("channel", "cls"), all_tagged(), ids=[f"{c}:{k.__name__}" for c, k in all_tagged()]
)
def test_wire_shape_matches_golden(channel: str, cls: type[msgspec.Struct]) -> None:
    example = example_for(mi.type_info(cls))
    text = json.dumps(json.loads(msgspec.json.encode(example)), indent=2, sort_keys=True) + "\n"
    path = _golden_path(channel, cls)
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"no golden file for {channel}:{cls.__name__}; see module docstring"
    assert path.read_text() == text
    # The golden bytes decode back, in both encodings.
    codec: Codec[Any] = Codec(CHANNELS[channel], "json")
    assert codec.decode(path.read_bytes()) == example
    mp: Codec[Any] = Codec(CHANNELS[channel], "msgpack")
    assert mp.decode(mp.encode(example)) == example


def test_no_stale_golden_files() -> None:
    expected = {_golden_path(c, k) for c, k in all_tagged()}
    present = set(GOLDEN.glob("*/*.json"))
    assert present - expected == set(), "golden files for tags that no longer exist"


def test_tags_are_unique_per_channel() -> None:
    for channel, union in CHANNELS.items():
        del union
        tags = [k.__struct_config__.tag for c, k in all_tagged() if c == channel]
        assert len(tags) == len(set(tags)), channel
