"""The SQLite store (apsw), and the trio task that writes to it.

The only module that imports apsw.

Rules this module guards:

- `apsw.bestpractice` is applied once (WAL, busy timeout, foreign keys); the schema is
  migrated by `pragma user_version`, each migration in one transaction.
- One writer: every write goes through `StoreWriter`, a trio task that batches operations and
  commits each batch in one transaction (`executemany` per kind) on a worker thread, so the
  event stream never waits for the disk. Repeated saves of one row between flushes are
  coalesced: the row objects are immutable, the newest wins.
- Streamed content is committed at most `flush_interval` (default 100 ms) after it was
  produced: that is the bound on what `kill -9` can lose. A durable operation (a user message,
  a status change) is flushed at once, and whoever needs it on disk awaits `wait_committed`.
- `reconcile()` runs at start, before any client is served: a `pending` row from a killed
  daemon becomes `error` (its partial content kept), open approvals become `cancelled`,
  running turns become `error`. Queued rows stay queued; the runtime restarts them.
- Reads use their own connection (WAL lets them run beside the writer); each connection is
  used by one thread at a time (a `CapacityLimiter(1)` each).
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from time import monotonic_ns
from typing import Any

import apsw
import apsw.bestpractice
import msgspec
import trio

from hostd.shell import trace
from hostd.shell.store.ops import (
    DeleteRow as DeleteRow,
)
from hostd.shell.store.ops import (
    DeleteSchedule as DeleteSchedule,
)
from hostd.shell.store.ops import (
    DeleteTopic as DeleteTopic,
)
from hostd.shell.store.ops import (
    Op as Op,
)
from hostd.shell.store.ops import (
    PutApproval as PutApproval,
)
from hostd.shell.store.ops import (
    PutResumeToken as PutResumeToken,
)
from hostd.shell.store.ops import (
    PutRow as PutRow,
)
from hostd.shell.store.ops import (
    PutSchedule as PutSchedule,
)
from hostd.shell.store.ops import (
    PutSeq as PutSeq,
)
from hostd.shell.store.ops import (
    PutSteps as PutSteps,
)
from hostd.shell.store.ops import (
    PutTopic as PutTopic,
)
from hostd.shell.store.ops import (
    PutTurn as PutTurn,
)
from hostd.shell.store.ops import (
    PutTurnUsage as PutTurnUsage,
)
from hostd.shell.store.ops import (
    ReconcileReport as ReconcileReport,
)
from hostd.shell.store.ops import (
    StepRow as StepRow,
)
from hostd.shell.store.ops import (
    TopicRecord as TopicRecord,
)
from hostd.shell.store.ops import (
    TouchRow as TouchRow,
)
from hostd.shell.store.ops import (
    TurnRecord as TurnRecord,
)
from hostd.shell.store.ops import (
    op_key as op_key,
)
from hostd.shell.store.ops import (
    op_topic as op_topic,
)
from hostd.shell.store.rows import (
    ROW_COLUMNS,
    SCHEDULE_COLUMNS,
    TOPIC_COLUMNS,
    approval_from,
    dict_decoder,
    json_encoder,
    row_from,
    row_values,
    schedule_from,
    schedule_values,
    topic_from,
)
from hostd_protocol.client_messages import ApprovalInfo, MessageRow, ScheduleInfo
from hostd_protocol.common import Usage
from hostd_protocol.errors import StoreError

log = logging.getLogger(__name__)

#: The default bound on streamed content lost to `kill -9` (seconds).
DEFAULT_FLUSH_INTERVAL = 0.1
#: After a failed batch the writer retries after this long, doubling up to `RETRY_MAX`.
RETRY_MIN = 0.1
RETRY_MAX = 2.0

RESTART_REASON = "daemon restarted during this answer"

_bestpractice_lock = threading.Lock()
_bestpractice_applied = False


def _apply_bestpractice() -> None:
    # `apply` appends a connection hook each call: do it once per process.
    global _bestpractice_applied
    with _bestpractice_lock:
        if not _bestpractice_applied:
            apsw.bestpractice.apply(apsw.bestpractice.recommended)
            _bestpractice_applied = True


def _parts_to_json(db: apsw.Connection) -> None:
    """Migration 4: message parts and anchors from msgpack blobs to JSON text, so `sqlite3`,
    Datasette or `json_extract` read a user's history (as `llm` stores its logs)."""
    import msgspec

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
)


class Store:
    """Synchronous access to the database file. Call its methods from worker threads
    (through `AsyncStore` / `StoreWriter`), or directly before trio starts serving."""

    def __init__(self, path: str | Path) -> None:
        _apply_bestpractice()
        self.path = Path(path)
        try:
            self._db = apsw.Connection(str(self.path))
            self._migrate()
        except apsw.Error as exc:
            raise StoreError(f"cannot open the database {str(self.path)!r}: {exc}") from exc
        #: Which file we opened (device, inode): a deleted or replaced file is noticed at the
        #: next write instead of writing on into an unlinked inode (`check_file`).
        self._identity = _file_identity(self.path)

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def schema_version(self) -> int:
        value = self._db.pragma("user_version")
        return int(value) if value is not None else 0

    def _migrate(self) -> None:
        current = self.schema_version
        if current > len(MIGRATIONS):
            raise StoreError(
                f"database {str(self.path)!r} has schema version {current}, newer than this "
                f"hostd knows ({len(MIGRATIONS)}); upgrade hostd"
            )
        for version in range(current + 1, len(MIGRATIONS) + 1):
            with self._db:  # one transaction per migration, version bump included
                step = MIGRATIONS[version - 1]
                if isinstance(step, str):
                    self._db.execute(step)
                else:
                    step(self._db)
                self._db.pragma("user_version", version)
            log.info("store: migrated %s to schema version %d", self.path, version)

    # --- reads --------------------------------------------------------------------------------

    def load_topics(self) -> list[TopicRecord]:
        cur = self._db.execute(
            f"SELECT {TOPIC_COLUMNS}, r.token FROM topics t "
            "LEFT JOIN resume_tokens r ON r.topic_id = t.id ORDER BY t.created_at, t.id"
        )
        out = []
        for values in cur:
            info = topic_from(values[:-1])
            out.append(TopicRecord(info, info.seq, values[-1]))
        return out

    def load_rows(self, topic_id: str) -> list[MessageRow]:
        cur = self._db.execute(
            f"SELECT {ROW_COLUMNS} FROM rows WHERE topic_id = ? AND superseded = 0 "
            "ORDER BY position, created_at",
            (topic_id,),
        )
        return [row_from(v) for v in cur]

    def load_approvals(self, topic_id: str, *, open_only: bool = True) -> list[ApprovalInfo]:
        sql = (
            "SELECT id, topic_id, turn_id, tool, input, description, status, answered_by, "
            "reason, created_at FROM approvals WHERE topic_id = ?"
        )
        if open_only:
            sql += " AND status = 'open'"
        return [
            approval_from(v) for v in self._db.execute(sql + " ORDER BY created_at", (topic_id,))
        ]

    def load_turns(self, topic_id: str) -> list[TurnRecord]:
        cur = self._db.execute(
            "SELECT id, topic_id, status, error, error_code, resume_text FROM turns "
            "WHERE topic_id = ? ORDER BY started_at",
            (topic_id,),
        )
        return [TurnRecord(*v) for v in cur]

    def load_steps(self, turn_id: str) -> list[StepRow]:
        """The recorded steps of a turn, in the order they started."""
        cur = self._db.execute(
            "SELECT kind, status, started_at, ended_at, data FROM steps WHERE turn_id = ? "
            "ORDER BY id",
            (turn_id,),
        )
        return [
            StepRow(kind, status, started, ended, dict_decoder.decode(data))
            for kind, status, started, ended, data in cur
        ]

    def history_page(
        self,
        topic_id: str,
        before_position: int | None,
        limit: int,
        max_bytes: int = 1 << 62,
        *,
        include_superseded: bool = False,
    ) -> tuple[list[MessageRow], bool]:
        """Up to `limit` rows before `before_position`, oldest first, and whether more exist.
        Superseded rows (cut by a rewind) only with `include_superseded`.

        Stops early once the rows read hold about `max_bytes` of content (at least one row is
        always read), so a page of huge rows never loads them all; the caller fits the page
        to its reply exactly (`payload_bounds.fit_rows`).
        """
        bound = before_position if before_position is not None else 2**62
        cur = self._db.execute(
            f"SELECT {ROW_COLUMNS} FROM rows WHERE topic_id = ? AND position < ? "
            "AND superseded <= ? ORDER BY position DESC LIMIT ?",
            (topic_id, bound, int(include_superseded), limit + 1),
        )
        rows: list[MessageRow] = []
        size = 0
        has_more = False
        for values in cur:
            if len(rows) >= limit or (rows and size >= max_bytes):
                has_more = True
                break
            size += sum(len(v) for v in values if isinstance(v, str | bytes))
            rows.append(row_from(values))
        rows.reverse()
        return rows, has_more

    def load_schedules(self) -> list[ScheduleInfo]:
        cur = self._db.execute(
            f"SELECT {SCHEDULE_COLUMNS} FROM schedules ORDER BY created_at, id"
        )
        return [schedule_from(v) for v in cur]

    def load_row(self, topic_id: str, row_id: str) -> MessageRow | None:
        cur = self._db.execute(
            f"SELECT {ROW_COLUMNS} FROM rows WHERE topic_id = ? AND id = ?", (topic_id, row_id)
        )
        for values in cur:
            return row_from(values)
        return None

    def load_usage(self) -> list[tuple[str, str, Usage]]:
        """(topic id, turn id, usage) of every turn that reported usage, oldest first."""
        decode = msgspec.json.Decoder(Usage).decode
        return [
            (topic_id, turn_id, decode(usage))
            for topic_id, turn_id, usage in self._db.execute(
                "SELECT topic_id, id, usage FROM turns WHERE usage != '' ORDER BY started_at, id"
            )
        ]

    def topics_with_rows_in(self, statuses: Iterable[str]) -> list[str]:
        marks = ",".join("?" for _ in statuses)
        cur = self._db.execute(
            f"SELECT DISTINCT topic_id FROM rows WHERE status IN ({marks})", tuple(statuses)
        )
        return [v[0] for v in cur]

    # --- writes -------------------------------------------------------------------------------

    def reconcile(self, now: float | None = None) -> ReconcileReport:
        """Repair what a killed daemon left behind. Run before serving anyone."""
        at = time.time() if now is None else now
        db = self._db
        with db:
            db.execute(
                "UPDATE rows SET status = 'error', error = ?, updated_at = ? "
                "WHERE status = 'pending'",
                (RESTART_REASON, at),
            )
            rows_failed = db.changes()
            db.execute(
                "UPDATE approvals SET status = 'cancelled', reason = ? WHERE status = 'open'",
                ("daemon restarted",),
            )
            approvals = db.changes()
            db.execute(
                "UPDATE turns SET status = 'error', error = ?, ended_at = ? WHERE status IS NULL",
                (RESTART_REASON, at),
            )
            turns = db.changes()
        report = ReconcileReport(rows_failed, approvals, turns)
        if rows_failed or approvals or turns:
            log.warning(
                "store: reconciled after an unclean stop: %d pending rows -> error, "
                "%d open approvals -> cancelled, %d running turns -> error",
                rows_failed,
                approvals,
                turns,
            )
        return report

    def check_file(self) -> None:
        """Raise `StoreError` if the database file was deleted or replaced since it was opened:
        SQLite would go on writing into the old (unlinked) inode, acknowledging messages that
        no restart would ever find."""
        if _file_identity(self.path) != self._identity:
            raise StoreError(
                f"the database file {str(self.path)!r} was deleted or replaced while hostd was "
                "running; nothing is saved any more (messages are refused). Put the file back "
                "and restart hostd, or restart it to start a new database",
                details={"path": str(self.path)},
            ) from DatabaseFileLost(str(self.path))

    def apply(self, ops: Sequence[Op]) -> None:
        """Write one batch in one transaction. Raises `StoreError`, having written nothing."""
        self.check_file()
        groups: dict[type, list[Any]] = {}
        for op in ops:
            groups.setdefault(type(op), []).append(op)
        db = self._db
        try:
            with db:
                # Order by dependency: parents first, deletions last (foreign keys are checked
                # per statement).
                if ts := groups.get(PutTopic):
                    db.executemany(
                        "INSERT INTO topics (id, title, assistant, driver, model, working_dir, "
                        "options, created_at, updated_at, last_seq) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET "
                        "title = excluded.title, assistant = excluded.assistant, "
                        "driver = excluded.driver, model = excluded.model, "
                        "working_dir = excluded.working_dir, options = excluded.options, "
                        "updated_at = excluded.updated_at, "
                        "last_seq = max(topics.last_seq, excluded.last_seq)",
                        [
                            (
                                t.id,
                                t.title,
                                t.assistant,
                                t.driver,
                                t.model,
                                t.working_dir,
                                json_encoder.encode(t.options).decode(),
                                t.created_at,
                                t.updated_at,
                                t.seq,
                            )
                            for t in (op.topic for op in ts)
                        ],
                    )
                if ss := groups.get(PutSeq):
                    db.executemany(
                        "UPDATE topics SET last_seq = max(last_seq, ?) WHERE id = ?",
                        [(op.seq, op.topic_id) for op in ss],
                    )
                if rs := groups.get(PutRow):
                    db.executemany(
                        f"INSERT INTO rows ({ROW_COLUMNS}) VALUES "
                        "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET "
                        "role = excluded.role, status = excluded.status, "
                        "position = excluded.position, turn_id = excluded.turn_id, "
                        "parts = excluded.parts, error = excluded.error, "
                        "error_code = excluded.error_code, anchor = excluded.anchor, "
                        "empty = excluded.empty, updated_at = excluded.updated_at, "
                        "meta = excluded.meta, superseded = excluded.superseded",
                        [row_values(op.row) for op in rs],
                    )
                if aps := groups.get(PutApproval):
                    db.executemany(
                        "INSERT INTO approvals (id, topic_id, turn_id, tool, input, description, "
                        "status, answered_by, reason, created_at) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET "
                        "status = excluded.status, answered_by = excluded.answered_by, "
                        "reason = excluded.reason",
                        [
                            (
                                a.id,
                                a.topic_id,
                                a.turn_id,
                                a.tool,
                                json_encoder.encode(a.input).decode(),
                                a.description,
                                a.status,
                                a.answered_by,
                                a.reason,
                                a.created_at,
                            )
                            for a in (op.approval for op in aps)
                        ],
                    )
                if tus := groups.get(PutTurn):
                    db.executemany(
                        "INSERT INTO turns (id, topic_id, status, error, error_code, resume_text, "
                        "started_at, ended_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
                        "ON CONFLICT(id) DO UPDATE SET status = excluded.status, "
                        "error = excluded.error, error_code = excluded.error_code, "
                        "resume_text = excluded.resume_text, ended_at = excluded.ended_at",
                        [
                            (
                                op.turn_id,
                                op.topic_id,
                                op.status,
                                op.error,
                                op.error_code,
                                op.resume_text,
                                op.at,
                                op.at if op.status is not None else None,
                            )
                            for op in tus
                        ],
                    )
                if uss := groups.get(PutTurnUsage):
                    db.executemany(
                        "UPDATE turns SET usage = ? WHERE id = ?",
                        [(json_encoder.encode(op.usage).decode(), op.turn_id) for op in uss],
                    )
                if sts := groups.get(PutSteps):
                    db.executemany(
                        "DELETE FROM steps WHERE turn_id = ?", [(op.turn_id,) for op in sts]
                    )
                    db.executemany(
                        "INSERT INTO steps (turn_id, kind, status, data, started_at, ended_at) "
                        "VALUES (?, ?, ?, ?, ?, ?)",
                        [
                            (
                                op.turn_id,
                                step.kind,
                                step.status,
                                json_encoder.encode(step.data).decode(),
                                step.started_at,
                                step.ended_at,
                            )
                            for op in sts
                            for step in op.steps
                        ],
                    )
                if tks := groups.get(PutResumeToken):
                    db.executemany(
                        "INSERT INTO resume_tokens (topic_id, token, updated_at) VALUES (?, ?, ?) "
                        "ON CONFLICT(topic_id) DO UPDATE SET token = excluded.token, "
                        "updated_at = excluded.updated_at",
                        [(op.topic_id, op.token, op.at) for op in tks],
                    )
                if scs := groups.get(PutSchedule):
                    marks = ", ".join("?" for _ in SCHEDULE_COLUMNS.split(","))
                    db.executemany(
                        f"INSERT OR REPLACE INTO schedules ({SCHEDULE_COLUMNS}) VALUES ({marks})",
                        [schedule_values(op.schedule) for op in scs],
                    )
                if dss := groups.get(DeleteSchedule):
                    db.executemany(
                        "DELETE FROM schedules WHERE id = ?", [(op.schedule_id,) for op in dss]
                    )
                if drs := groups.get(DeleteRow):
                    db.executemany("DELETE FROM rows WHERE id = ?", [(op.row_id,) for op in drs])
                if dts := groups.get(DeleteTopic):
                    db.executemany(
                        "DELETE FROM topics WHERE id = ?", [(op.topic_id,) for op in dts]
                    )
        except apsw.Error as exc:
            raise StoreError(f"database write failed: {type(exc).__name__}: {exc}") from exc


class AsyncStore:
    """Reads from trio: a separate connection used from a worker thread, one call at a time."""

    def __init__(self, path: str | Path) -> None:
        self._store = Store(path)
        self._limiter = trio.CapacityLimiter(1)

    @property
    def sync(self) -> Store:
        return self._store

    async def run(self, fn: Any, *args: Any) -> Any:
        try:
            return await trio.to_thread.run_sync(fn, *args, limiter=self._limiter)
        except apsw.Error as exc:
            raise StoreError(f"database read failed: {type(exc).__name__}: {exc}") from exc

    def close(self) -> None:
        self._store.close()


@dataclass(frozen=True)
class StoreWriterStatistics:
    queued_ops: int
    batches: int
    ops_written: int
    failed_batches: int
    last_batch_seconds: float


def _materialize(op: Op) -> Op:
    if isinstance(op, TouchRow):
        return PutRow(op.row.freeze())
    return op


#: Failures a retry can cure (disk full, read-only, I/O, locks); others are bugs in an op.
class DatabaseFileLost(Exception):
    """The cause of the `StoreError` `Store.check_file` raises (retried, never isolated)."""


def _file_identity(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_dev, st.st_ino)


_TRANSIENT = (
    DatabaseFileLost,
    apsw.FullError,
    apsw.IOError,
    apsw.ReadOnlyError,
    apsw.BusyError,
    apsw.LockedError,
    apsw.CantOpenError,
    apsw.NoMemError,
)
_APPLY_ORDER: tuple[type, ...] = (
    PutTopic,
    PutSeq,
    PutRow,
    TouchRow,
    PutApproval,
    PutTurn,
    PutTurnUsage,
    PutSteps,
    PutResumeToken,
    PutSchedule,
    DeleteSchedule,
    DeleteRow,
    DeleteTopic,
)


class StoreWriter:
    """The one writer. `put` never blocks; `wait_committed` waits for the disk.

    Ops are coalesced by key while they wait (see `_op_key`). A batch is written when the
    flush interval has passed since the first op of the batch, or at once when a durable op
    is queued or someone waits for a commit.

    A batch that fails (disk full, read-only, I/O error) is not dropped: its ops go back in
    the queue (newer ops with the same key win) and are retried with a backoff, so what the
    daemon holds reaches the disk once it works again. Waiters of the failed batch get the
    `StoreError` at once (a message is never acknowledged unless committed). `on_health` is
    called with the error when writes start failing and with None when they work again.
    A batch failing on a constraint (a bug in one op, which no retry cures) is written op by
    op instead, dropping only the ops that fail.
    """

    def __init__(self, store: Store, *, flush_interval: float = DEFAULT_FLUSH_INTERVAL) -> None:
        self._store = store
        self.flush_interval = flush_interval
        self._pending: dict[tuple[str, str], Op] = {}
        self._queued_gen = 0
        self._committed_gen = 0
        self._urgent = False
        self._wakeup = trio.Event()
        self._urgent_event = trio.Event()
        self._committed_event = trio.Event()
        # (first_gen, last_gen, error) of recent failed batches, for the waiters to find.
        self._failures: deque[tuple[int, int, StoreError]] = deque(maxlen=64)
        self._limiter = trio.CapacityLimiter(1)
        self._batches = 0
        self._ops_written = 0
        self._last_batch_seconds = 0.0
        #: trio time of the oldest op waiting (inf: none), where the flush interval starts.
        self._first_put_at = math.inf
        self.on_health: Callable[[StoreError | None], None] | None = None
        self._failing: StoreError | None = None
        self._failed_in_row = 0

    def put(self, op: Op, *, durable: bool = False) -> int:
        """Queue one op; returns its generation (for `wait_committed`)."""
        if isinstance(op, DeleteTopic):
            # Nothing of a deleted topic may be written after (or instead of) its deletion.
            for key in [k for k, v in self._pending.items() if op_topic(v) == op.topic_id]:
                del self._pending[key]
        key = op_key(op)
        if not self._pending:
            self._first_put_at = trio.current_time()
        # Re-insert at the end so the batch keeps the order of the newest ops.
        self._pending.pop(key, None)
        self._pending[key] = op
        self._queued_gen += 1
        self._wakeup.set()
        if durable:
            self._make_urgent()
        return self._queued_gen

    def _make_urgent(self) -> None:
        self._urgent = True
        self._urgent_event.set()

    @property
    def queued_generation(self) -> int:
        return self._queued_gen

    async def wait_committed(self, generation: int | None = None) -> None:
        """Wait until everything queued so far (or up to `generation`) is on disk.

        Raises `StoreError` if the batch holding it failed.
        """
        gen = self._queued_gen if generation is None else generation
        while self._committed_gen < gen:
            self._make_urgent()
            await self._committed_event.wait()
        for first, last, err in self._failures:
            if first <= gen <= last:
                raise StoreError(err.message)

    def statistics(self) -> StoreWriterStatistics:
        return StoreWriterStatistics(
            queued_ops=len(self._pending),
            batches=self._batches,
            ops_written=self._ops_written,
            failed_batches=len(self._failures),
            last_batch_seconds=self._last_batch_seconds,
        )

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Write batches until cancelled. Cancel it only after `wait_committed()`."""
        task_status.started()
        while True:
            await self._wakeup.wait()
            if self._failing is not None:
                # A failing disk is retried with a backoff, not hammered.
                await trio.sleep(min(RETRY_MAX, RETRY_MIN * 2 ** (self._failed_in_row - 1)))
            elif not self._urgent:
                # The interval runs from the oldest waiting op (not from the end of the last
                # write, which ops may have waited through), less the time a write takes, so
                # streamed content is on disk within one flush interval of being produced.
                write_time = min(self._last_batch_seconds, self.flush_interval / 2)
                start = min(self._first_put_at, trio.current_time())
                with trio.move_on_at(start + self.flush_interval - write_time):
                    await self._urgent_event.wait()
            await self._write_batch()

    async def _write_batch(self) -> None:
        batch = [_materialize(op) for op in self._pending.values()]
        first, last = self._committed_gen + 1, self._queued_gen
        self._pending = {}
        self._first_put_at = math.inf
        self._wakeup = trio.Event()
        self._urgent = False
        self._urgent_event = trio.Event()
        if batch:
            started = time.perf_counter()
            trace_start = monotonic_ns() if trace.ENABLED else 0
            try:
                # Not abandoned on cancel: a batch that started is always finished, so a
                # shutdown never leaves half a transaction behind.
                await trio.to_thread.run_sync(self._store.apply, batch, limiter=self._limiter)
                if trace.ENABLED:
                    trace.commit(trace_start)
            except StoreError as exc:
                self._failures.append((first, last, exc))
                if isinstance(exc.__cause__, _TRANSIENT):
                    self._failed(batch, exc)
                else:
                    await self._isolate(batch, exc)
            else:
                self._batches += 1
                self._ops_written += len(batch)
                if self._failing is not None:
                    log.warning(
                        "store: writes work again after %d failed batches", self._failed_in_row
                    )
                    self._failing = None
                    self._failed_in_row = 0
                    self._tell_health(None)
            self._last_batch_seconds = time.perf_counter() - started
        self._committed_gen = last
        event, self._committed_event = self._committed_event, trio.Event()
        event.set()

    async def _isolate(self, batch: list[Op], exc: StoreError) -> None:
        """A batch failed for a reason a retry does not cure (a constraint: a bug): write its
        ops one by one, in dependency order, and drop only those that fail."""
        last = len(_APPLY_ORDER) - 2  # an op kind not listed goes before the deletions
        ordered = sorted(
            batch,
            key=lambda op: _APPLY_ORDER.index(type(op)) if type(op) in _APPLY_ORDER else last,
        )

        def each() -> list[tuple[Op, StoreError]]:
            bad = []
            for op in ordered:
                try:
                    self._store.apply([op])
                except StoreError as err:
                    bad.append((op, err))
            return bad

        log.error("store: a batch of %d ops failed: %s; writing them one by one", len(batch), exc)
        for op, err in await trio.to_thread.run_sync(each, limiter=self._limiter):
            log.error("store: dropped %s %s, it cannot be written: %s", *op_key(op), err)

    def _failed(self, batch: list[Op], exc: StoreError) -> None:
        # Keep the ops for a retry; an op queued meanwhile with the same key is newer.
        kept = {op_key(op): op for op in batch if op_key(op) not in self._pending}
        if kept:
            self._pending = {**kept, **self._pending}
            self._wakeup.set()
        self._failed_in_row += 1
        if self._failing is None:
            log.error(
                "store: a batch of %d ops failed: %s; streams go on, unsaved data is kept in "
                "memory and retried",
                len(batch),
                exc,
            )
            self._failing = exc
            self._tell_health(exc)
        else:
            log.debug("store: retry %d failed: %s", self._failed_in_row, exc)

    def _tell_health(self, error: StoreError | None) -> None:
        if self.on_health is not None:
            try:
                self.on_health(error)
            except Exception:  # a listener's bug must not stop the writer
                log.exception("store: on_health listener failed")
