"""The shared transcript fixtures (tests/fixtures/transcripts/*.json) through the Python
reducer. The TypeScript reducer replays the same files (protocol/typescript/test/
transcript-fixtures.test.ts): both must produce `expected`, so they produce the same rows.
Re-record them with `.venv/bin/python tests/fixtures/transcripts/record.py`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from hostd.transcript import Transcript
from hostd_protocol.client_messages import Snapshot, TopicEvent

FIXTURES = sorted((Path(__file__).resolve().parents[1] / "fixtures" / "transcripts").glob("*.json"))


def test_the_fixture_set_covers_rolls_compaction_and_removals() -> None:
    kinds = {e["type"] for f in FIXTURES for e in json.loads(f.read_text())["events"]}
    assert {"rolled", "row-removed", "row-updated", "topic-deleted"} <= kinds
    rows = [r for f in FIXTURES for r in json.loads(f.read_text())["expected"]["rows"]]
    assert any(r["role"] == "marker" and r.get("anchor") for r in rows)


@pytest.mark.parametrize("path", FIXTURES, ids=[p.stem for p in FIXTURES])
def test_python_reducer_matches_fixture(path: Path) -> None:
    fixture: dict[str, Any] = json.loads(path.read_text())
    t = Transcript(msgspec.convert(fixture["snapshot"], Snapshot))
    for raw in fixture["events"]:
        t.apply(msgspec.convert(raw, TopicEvent))  # type: ignore[arg-type]
    got = {
        "rows": msgspec.to_builtins(t.rows()),
        "approvals": msgspec.to_builtins(t.approvals()),
        "state": t.state,
        "seq": t.seq,
        "active_turn_id": t.active_turn_id,
        "deleted": t.deleted,
    }
    assert got == fixture["expected"]
