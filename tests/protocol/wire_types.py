"""Every wire type, a hypothesis strategy for any of them, and one fixed example of each.

Both are derived from msgspec's own type information, so a new message type or field is
covered without touching the tests.
"""

from __future__ import annotations

from typing import Any

import msgspec
import msgspec.inspect as mi
from hypothesis import strategies as st

from hostd_protocol import client_messages, driver_messages

CHANNELS: dict[str, Any] = {
    "client": client_messages.ClientMessage,
    "server": client_messages.ServerMessage,
    "host-command": driver_messages.HostCommand,
    "driver-event": driver_messages.DriverEvent,
}


def union_members(union: Any) -> list[type[msgspec.Struct]]:
    info = mi.type_info(union)
    types = info.types if isinstance(info, mi.UnionType) else (info,)
    return [t.cls for t in types if isinstance(t, mi.StructType)]


def all_tagged() -> list[tuple[str, type[msgspec.Struct]]]:
    out = []
    for channel, union in CHANNELS.items():
        for cls in union_members(union):
            out.append((channel, cls))
    return out


_json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-(2**53), 2**53), st.text(max_size=8))
json_values = st.recursive(
    _json_leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)


def strategy_for(t: mi.Type) -> st.SearchStrategy[Any]:
    if isinstance(t, mi.StructType):
        fields = {f.encode_name: strategy_for(f.type) for f in t.fields}
        names = [f.name for f in t.fields]
        enc = [f.encode_name for f in t.fields]

        def build(values: dict[str, Any], cls: Any = t.cls) -> Any:
            return cls(**{n: values[e] for n, e in zip(names, enc, strict=True)})

        return st.fixed_dictionaries(fields).map(build)
    if isinstance(t, mi.StrType):
        return st.text(max_size=20)
    if isinstance(t, mi.BoolType):
        return st.booleans()
    if isinstance(t, mi.IntType):
        return st.integers(-(2**63), 2**64 - 1) if t.ge is None else st.integers(t.ge, 2**63)
    if isinstance(t, mi.FloatType):
        return st.floats(allow_nan=False, allow_infinity=False)
    if isinstance(t, mi.NoneType):
        return st.none()
    if isinstance(t, mi.LiteralType):
        return st.sampled_from(list(t.values))
    if isinstance(t, mi.ListType):
        return st.lists(strategy_for(t.item_type), max_size=3)
    if isinstance(t, mi.TupleType):
        return st.tuples(*[strategy_for(x) for x in t.item_types])
    if isinstance(t, mi.DictType):
        return st.dictionaries(strategy_for(t.key_type), strategy_for(t.value_type), max_size=3)
    if isinstance(t, mi.AnyType):
        return json_values
    if isinstance(t, mi.UnionType):
        return st.one_of([strategy_for(x) for x in t.types])
    raise TypeError(f"no strategy for {t!r}")


def messages(union: Any) -> st.SearchStrategy[Any]:
    return strategy_for(mi.type_info(union))


def example_for(t: mi.Type, name: str = "x") -> Any:
    """A fixed, readable example: every field set (not left to defaults), for golden files."""
    if isinstance(t, mi.StructType):
        return t.cls(**{f.name: example_for(f.type, f.name) for f in t.fields})
    if isinstance(t, mi.StrType):
        return f"{name}-1"
    if isinstance(t, mi.BoolType):
        return True
    if isinstance(t, mi.IntType):
        return 7
    if isinstance(t, mi.FloatType):
        return 1.5
    if isinstance(t, mi.NoneType):
        return None
    if isinstance(t, mi.LiteralType):
        return t.values[0]
    if isinstance(t, mi.ListType):
        return [example_for(t.item_type, name)]
    if isinstance(t, mi.TupleType):
        return tuple(example_for(x, name) for x in t.item_types)
    if isinstance(t, mi.DictType):
        return {"key": "value"}
    if isinstance(t, mi.AnyType):
        return {"any": 1}
    if isinstance(t, mi.UnionType):
        non_none = [x for x in t.types if not isinstance(x, mi.NoneType)]
        return example_for(non_none[0], name)
    raise TypeError(f"no example for {t!r}")
