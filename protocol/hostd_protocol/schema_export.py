"""JSON Schema of every wire type, so a UI in any language can generate its bindings."""

from __future__ import annotations

import json
from typing import Any

import msgspec

from hostd_protocol import client_messages, driver_messages
from hostd_protocol.common import PROTOCOL_VERSION


def wire_schema() -> dict[str, Any]:
    """One JSON Schema document with a top-level `oneOf` per channel direction."""
    unions = {
        "ClientMessage": client_messages.ClientMessage,
        "ServerMessage": client_messages.ServerMessage,
        "HostCommand": driver_messages.HostCommand,
        "DriverEvent": driver_messages.DriverEvent,
    }
    names = list(unions)
    schemas, components = msgspec.json.schema_components(
        [unions[n] for n in names], ref_template="#/$defs/{name}"
    )
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "hostd wire protocol",
        "description": (
            f"hostd protocol {PROTOCOL_VERSION[0]}.{PROTOCOL_VERSION[1]}. Frames are a 4-byte "
            "big-endian length followed by one message body, msgpack or JSON. Each message is "
            "an object whose 'type' field is its tag."
        ),
        "properties": {name: schema for name, schema in zip(names, schemas, strict=True)},
        "$defs": components,
    }


def wire_schema_json() -> str:
    return json.dumps(wire_schema(), indent=2, sort_keys=True) + "\n"
