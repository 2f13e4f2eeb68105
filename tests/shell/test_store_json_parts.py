"""Message parts are JSON text in SQLite (issue 15, item 12): readable with `sqlite3`,
`json_extract` or Datasette; a database from before (msgpack blobs) is migrated in place."""

from __future__ import annotations

import json
from pathlib import Path

import apsw
import msgspec

from hostd.shell.store import store as st
from hostd_protocol.client_messages import MessageRow
from hostd_protocol.common import CompactionAnchor, TextDelta, ToolCall

PARTS = [TextDelta(text="Hello"), ToolCall(call_id="c1", name="Read", input={"path": "a.txt"})]
ANCHOR = CompactionAnchor(tokens_before=120000, tokens_after=8000)


def test_a_msgpack_database_is_migrated_to_json(tmp_path: Path) -> None:
    path = tmp_path / "db"
    db = apsw.Connection(str(path))
    with db:
        for step in st.MIGRATIONS[:3]:
            assert isinstance(step, str)
            db.execute(step)
        db.pragma("user_version", 3)
        db.execute("INSERT INTO topics (id, created_at, updated_at) VALUES ('tp1', 1.0, 1.0)")
        enc = msgspec.msgpack.encode
        db.execute(
            "INSERT INTO rows (id, topic_id, role, status, position, parts, anchor, created_at, "
            "updated_at) VALUES ('r1', 'tp1', 'assistant', 'success', 1, ?, NULL, 1.0, 1.0), "
            "('r2', 'tp1', 'marker', 'success', 2, ?, ?, 1.0, 1.0)",
            (enc(PARTS), enc([]), enc(ANCHOR)),
        )
    db.close()

    with st.Store(path) as s:
        assert s.schema_version == len(st.MIGRATIONS) >= 4
        rows = {r.id: r for r in s.load_rows("tp1")}
    assert rows["r1"].parts == PARTS
    assert rows["r2"].anchor == ANCHOR

    # What a user sees with sqlite3: JSON text, queryable.
    db = apsw.Connection(str(path))
    (kind, text, name, anchor) = next(
        db.execute(
            "SELECT typeof(parts), json_extract(parts, '$[0].text'), "
            "json_extract(parts, '$[1].name'), (SELECT anchor FROM rows WHERE id = 'r2') "
            "FROM rows WHERE id = 'r1'"
        )
    )
    db.close()
    assert (kind, text, name) == ("text", "Hello", "Read")
    anchor_data = json.loads(anchor)
    assert (anchor_data["tokens_before"], anchor_data["tokens_after"]) == (120000, 8000)


def test_new_rows_are_written_as_json(tmp_path: Path) -> None:
    from hostd.shell.store.rows import row_values

    row = MessageRow(id="r", topic_id="t", role="user", status="success", position=1,
                     parts=PARTS)
    values = row_values(row)
    assert json.loads(values[6]) == [
        {"type": "text", "text": "Hello"},
        {"type": "tool-call", "call_id": "c1", "name": "Read", "input": {"path": "a.txt"}},
    ]
