"""The store's schema, as migrations in order (`pragma user_version` counts them): SQL text,
or a function of the connection for a step SQL cannot express. Never edit a migration that
has shipped: add one."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import msgspec

if TYPE_CHECKING:
    import apsw


def _parts_to_json(db: apsw.Connection) -> None:
    """Migration 4: message parts and anchors from msgpack blobs to JSON text, so `sqlite3`,
    Datasette or `json_extract` read a user's history (as `llm` stores its logs)."""
    from hostd_protocol.common import Chunk, CompactionAnchor

    parts_of = msgspec.msgpack.Decoder(list[Chunk])
    anchor_of = msgspec.msgpack.Decoder(CompactionAnchor)
    encode = msgspec.json.Encoder().encode
    updates = []
    for rid, parts, anchor in db.execute("SELECT id, parts, anchor FROM rows"):
        new_parts = encode(parts_of.decode(parts)).decode() if isinstance(parts, bytes) else parts
        new_anchor = (
            encode(anchor_of.decode(anchor)).decode() if isinstance(anchor, bytes) else anchor
        )
        updates.append((new_parts, new_anchor, rid))
    db.executemany("UPDATE rows SET parts = ?, anchor = ? WHERE id = ?", updates)


#: Schema migrations in order: SQL text, or a function of the connection (run inside the
#: migration's transaction) for a step SQL cannot express.
MIGRATIONS: tuple[str | Callable[[apsw.Connection], None], ...] = (
    # 1: the first schema.
    """
    CREATE TABLE topics (
        id TEXT PRIMARY KEY,
        title TEXT NOT NULL DEFAULT '',
        assistant TEXT NOT NULL DEFAULT '',
        driver TEXT NOT NULL DEFAULT '',
        model TEXT NOT NULL DEFAULT '',
        working_dir TEXT NOT NULL DEFAULT '',
        options TEXT NOT NULL DEFAULT '{}',
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL,
        last_seq INTEGER NOT NULL DEFAULT 0
    );
    CREATE TABLE rows (
        id TEXT PRIMARY KEY,
        topic_id TEXT NOT NULL REFERENCES topics(id) ON DELETE CASCADE,
        role TEXT NOT NULL,
        status TEXT NOT NULL,
        position INTEGER NOT NULL,
        turn_id TEXT NOT NULL DEFAULT '',
        parts BLOB NOT NULL,
        error TEXT NOT NULL DEFAULT '',
        error_code TEXT NOT NULL DEFAULT '',
        anchor BLOB,
        empty INTEGER NOT NULL DEFAULT 0,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL,
        meta TEXT NOT NULL DEFAULT '{}'
    );
    CREATE INDEX rows_by_topic ON rows(topic_id, position);
    CREATE INDEX rows_by_status ON rows(status);
    CREATE TABLE approvals (
        id TEXT PRIMARY KEY,
        topic_id TEXT NOT NULL REFERENCES topics(id) ON DELETE CASCADE,
        turn_id TEXT NOT NULL,
        tool TEXT NOT NULL,
        input TEXT NOT NULL DEFAULT '{}',
        description TEXT NOT NULL DEFAULT '',
        status TEXT NOT NULL,
        answered_by TEXT NOT NULL DEFAULT '',
        reason TEXT NOT NULL DEFAULT '',
        created_at REAL NOT NULL
    );
    CREATE INDEX approvals_by_topic ON approvals(topic_id);
    CREATE TABLE resume_tokens (
        topic_id TEXT PRIMARY KEY REFERENCES topics(id) ON DELETE CASCADE,
        token TEXT NOT NULL,
        updated_at REAL NOT NULL
    );
    CREATE TABLE turns (
        id TEXT PRIMARY KEY,
        topic_id TEXT NOT NULL REFERENCES topics(id) ON DELETE CASCADE,
        status TEXT,
        error TEXT NOT NULL DEFAULT '',
        error_code TEXT NOT NULL DEFAULT '',
        resume_text TEXT NOT NULL DEFAULT '',
        started_at REAL NOT NULL,
        ended_at REAL
    );
    CREATE INDEX turns_by_topic ON turns(topic_id);
    CREATE TABLE steps (
        id INTEGER PRIMARY KEY,
        turn_id TEXT NOT NULL REFERENCES turns(id) ON DELETE CASCADE,
        kind TEXT NOT NULL,
        status TEXT,
        data TEXT NOT NULL DEFAULT '{}',
        started_at REAL NOT NULL,
        ended_at REAL
    );
    """,
    # 2: scheduled prompts (hostd.core.schedules). `last_due` is the latest due time handled:
    # a restart never runs it again.
    """
    CREATE TABLE schedules (
        id TEXT PRIMARY KEY,
        topic_id TEXT NOT NULL REFERENCES topics(id) ON DELETE CASCADE,
        text TEXT NOT NULL,
        cron TEXT NOT NULL DEFAULT '',
        every_s REAL NOT NULL DEFAULT 0,
        tz TEXT NOT NULL DEFAULT 'UTC',
        busy TEXT NOT NULL DEFAULT 'queue',
        missed TEXT NOT NULL DEFAULT 'run-once',
        enabled INTEGER NOT NULL DEFAULT 1,
        created_at REAL NOT NULL,
        active_since REAL NOT NULL,
        last_due REAL,
        last_run_at REAL NOT NULL DEFAULT 0,
        last_status TEXT NOT NULL DEFAULT '',
        last_error TEXT NOT NULL DEFAULT '',
        last_row_id TEXT NOT NULL DEFAULT '',
        runs INTEGER NOT NULL DEFAULT 0,
        failures INTEGER NOT NULL DEFAULT 0,
        skipped INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX schedules_by_topic ON schedules(topic_id);
    """,
    # 3: a schedule may create a topic per run from an assistant: `topic_id` becomes
    # nullable (SQLite cannot relax NOT NULL in place: the table is rebuilt).
    """
    CREATE TABLE schedules_3 (
        id TEXT PRIMARY KEY,
        topic_id TEXT REFERENCES topics(id) ON DELETE CASCADE,
        text TEXT NOT NULL,
        cron TEXT NOT NULL DEFAULT '',
        every_s REAL NOT NULL DEFAULT 0,
        tz TEXT NOT NULL DEFAULT 'UTC',
        busy TEXT NOT NULL DEFAULT 'queue',
        missed TEXT NOT NULL DEFAULT 'run-once',
        enabled INTEGER NOT NULL DEFAULT 1,
        created_at REAL NOT NULL,
        active_since REAL NOT NULL,
        last_due REAL,
        last_run_at REAL NOT NULL DEFAULT 0,
        last_status TEXT NOT NULL DEFAULT '',
        last_error TEXT NOT NULL DEFAULT '',
        last_row_id TEXT NOT NULL DEFAULT '',
        runs INTEGER NOT NULL DEFAULT 0,
        failures INTEGER NOT NULL DEFAULT 0,
        skipped INTEGER NOT NULL DEFAULT 0,
        assistant TEXT NOT NULL DEFAULT '',
        last_topic_id TEXT NOT NULL DEFAULT ''
    );
    INSERT INTO schedules_3 (id, topic_id, text, cron, every_s, tz, busy, missed, enabled,
        created_at, active_since, last_due, last_run_at, last_status, last_error, last_row_id,
        runs, failures, skipped, last_topic_id)
    SELECT id, topic_id, text, cron, every_s, tz, busy, missed, enabled, created_at,
        active_since, last_due, last_run_at, last_status, last_error, last_row_id, runs,
        failures, skipped, topic_id FROM schedules;
    DROP TABLE schedules;
    ALTER TABLE schedules_3 RENAME TO schedules;
    CREATE INDEX schedules_by_topic ON schedules(topic_id);
    """,
    # 4: rows' parts and anchors become JSON text (they were msgpack blobs).
    _parts_to_json,
    # 5: a rewind keeps the rows it cuts, marked superseded (out of the visible history).
    """
    ALTER TABLE rows ADD COLUMN superseded INTEGER NOT NULL DEFAULT 0;
    """,
    # 6: usage is kept per turn (JSON of `Usage`), so `hostd usage` survives a restart.
    """
    ALTER TABLE turns ADD COLUMN usage TEXT NOT NULL DEFAULT '';
    """,
    # 7: multi-answer turns: which answer a row is, whether it was not chosen, who wrote it
    # and its own usage (JSON of `AnswerTarget` / `Usage`, NULL on other rows).
    """
    ALTER TABLE rows ADD COLUMN lane INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE rows ADD COLUMN alternative INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE rows ADD COLUMN target TEXT;
    ALTER TABLE rows ADD COLUMN usage TEXT;
    """,
    # 8: streamed text is appended as pieces (JSON lists of chunks) after the row's whole
    # parts, so a flush writes what is new, not the whole answer again (`row_content`).
    """
    CREATE TABLE row_parts (
        id INTEGER PRIMARY KEY,
        row_id TEXT NOT NULL REFERENCES rows(id) ON DELETE CASCADE,
        chunks TEXT NOT NULL
    );
    CREATE INDEX row_parts_by_row ON row_parts(row_id, id);
    """,
    # 9: an approval keeps what its driver offered beyond allow / deny (JSON list of
    # `ApprovalOption`), the option chosen, and the answer (lane) of a multi-answer turn.
    """
    ALTER TABLE approvals ADD COLUMN options TEXT NOT NULL DEFAULT '[]';
    ALTER TABLE approvals ADD COLUMN option_id TEXT NOT NULL DEFAULT '';
    ALTER TABLE approvals ADD COLUMN lane INTEGER NOT NULL DEFAULT 0;
    """,
)
