"""The recorded real session (tests/fixtures/wire/session.jsonl, see record.py there) still
decodes with today's schemas, and shows the rules docs/protocol.md states: one reply or error
per request id, and per topic a seq that grows by one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hostd_protocol.client_messages import ClientMessage, ServerMessage
from hostd_protocol.framing import Codec

SESSION = Path(__file__).resolve().parents[1] / "fixtures" / "wire" / "session.jsonl"


def _lines() -> list[dict[str, Any]]:
    return [json.loads(line) for line in SESSION.read_text().splitlines()]


def test_every_frame_decodes() -> None:
    client: Codec[Any] = Codec(ClientMessage, "json")
    server: Codec[Any] = Codec(ServerMessage, "json")
    lines = _lines()
    # Requests sent wrong on purpose (a bad intent, an unknown request) were refused as such.
    refused = {
        ln["frame"]["id"]
        for ln in lines
        if ln["frame"]["type"] == "error"
        and ln["frame"]["code"] in {"invalid_message", "unknown_request"}
    }
    assert len(refused) == 2
    for line in lines:
        if line["dir"] == "send" and line["frame"].get("id") in refused:
            continue
        codec = client if line["dir"] == "send" else server
        codec.decode(json.dumps(line["frame"]).encode())


def test_one_answer_per_request_and_seqs_without_gaps() -> None:
    lines = _lines()
    asked = [ln["frame"]["id"] for ln in lines if ln["dir"] == "send" and "id" in ln["frame"]]
    answered = [
        ln["frame"]["id"]
        for ln in lines
        if ln["dir"] == "recv" and ln["frame"]["type"] in {"reply", "error"}
    ]
    assert sorted(answered) == sorted(asked)
    kinds = {ln["frame"]["type"] for ln in lines if ln["dir"] == "recv"}
    assert {"rolled", "replay-end", "resync", "topics-changed", "driver-ready", "error"} <= kinds
    # Live events (outside replays) of the one topic: 1, 2, 3, ... without a gap.
    live = []
    replaying = False
    for ln in lines:
        f = ln["frame"]
        if ln["dir"] == "send" and f["type"] == "attach":
            replaying = "since" in f
        if ln["dir"] != "recv" or "seq" not in f or f["type"] in {"replay-end", "resync"}:
            if f.get("type") == "replay-end":
                replaying = False
            continue
        if not replaying:
            live.append(f["seq"])
    assert live == list(range(1, len(live) + 1))
