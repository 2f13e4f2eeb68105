"""The database file (apsw): opening it (best practice, migrations), reads, the one-batch
write, reconcile after a crash; and `AsyncStore`, its reads from trio.

The only module that imports apsw at run time (`migrations` names its type only). Its rules
are the store's (see `hostd.shell.store.store`): `apsw.bestpractice` applied once, the schema
migrated by `pragma user_version` one transaction per step, a batch written in one
transaction, `reconcile()` before anyone is served, each connection used by one thread at a
time.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import apsw
import apsw.bestpractice
import msgspec
import trio

from hostd.shell.store.migrations import MIGRATIONS
from hostd.shell.store.ops import (
    DeleteRow,
    DeleteSchedule,
    DeleteTopic,
    Op,
    PutApproval,
    PutResumeToken,
    PutSchedule,
    PutSeq,
    PutSteps,
    PutTopic,
    PutTurn,
    PutTurnUsage,
    ReconcileReport,
    StepRow,
    TopicRecord,
    TurnRecord,
)
from hostd.shell.store.row_content import Cursor, Plan, compact_all, merge_pieces, plan_rows
from hostd.shell.store.rows import (
    APPROVAL_COLUMNS,
    ROW_COLUMNS,
    ROW_PLACEHOLDERS,
    SCHEDULE_COLUMNS,
    TOPIC_COLUMNS,
    approval_from,
    approval_values,
    dict_decoder,
    json_encoder,
    many_rows,
    row_from,
    schedule_from,
    schedule_values,
    topic_from,
)
from hostd_protocol.client_messages import ApprovalInfo, MessageRow, ScheduleInfo
from hostd_protocol.common import Usage
from hostd_protocol.errors import StoreError

log = logging.getLogger(__name__)

RESTART_REASON = "daemon restarted during this answer"

_bestpractice_lock = threading.Lock()
_bestpractice_applied = False


#: SQLite's log text quotes the statement it is about in brackets ("statement aborts at 32:
#: [INSERT ...] database schema has changed"): cut out, so no statement reaches the log.
_STATEMENT = re.compile(r"\[.*\]", re.DOTALL)


def _sqlite_log(code: int, message: str) -> None:
    """SQLite's error log (`SQLITE_CONFIG_LOG`) into ours, instead of apsw's
    `library_logging`, which logs a normal SQLITE_SCHEMA retry at INFO with the whole
    statement. A schema retry is routine (another connection migrated, or a statement was
    prepared before a `CREATE`): DEBUG. Nothing here quotes the statement."""
    base = code & 0xFF
    if base == apsw.SQLITE_SCHEMA:
        level = logging.DEBUG
    elif base in (apsw.SQLITE_WARNING, apsw.SQLITE_NOTICE):
        level = logging.WARNING
    else:
        level = logging.ERROR
    if log.isEnabledFor(level):
        text = _STATEMENT.sub("[statement]", message)
        log.log(level, "sqlite: %s (%s)", text, apsw.mapping_result_codes.get(base, code))


def _apply_bestpractice() -> None:
    # `apply` appends a connection hook each call: do it once per process.
    global _bestpractice_applied
    with _bestpractice_lock:
        if not _bestpractice_applied:
            apsw.bestpractice.apply(
                tuple(
                    f
                    for f in apsw.bestpractice.recommended
                    if f is not apsw.bestpractice.library_logging
                )
            )
            apsw.config(apsw.SQLITE_CONFIG_LOG, _sqlite_log)
            _bestpractice_applied = True


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
        #: What this connection committed of each streaming row (`row_content`): the writer's.
        self._cursors: dict[str, Cursor] = {}

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
        return merge_pieces(self._db, [row_from(v) for v in cur])

    def load_approvals(self, topic_id: str, *, open_only: bool = True) -> list[ApprovalInfo]:
        sql = f"SELECT {APPROVAL_COLUMNS} FROM approvals WHERE topic_id = ?"
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
        # The last column: the size of the row's streamed pieces (`row_content`).
        cur = self._db.execute(
            f"SELECT {ROW_COLUMNS}, (SELECT total(length(chunks)) FROM row_parts "
            "WHERE row_id = rows.id) FROM rows WHERE topic_id = ? AND position < ? "
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
            size += int(values[-1]) + sum(len(v) for v in values if isinstance(v, str | bytes))
            rows.append(row_from(values[:-1]))
        rows.reverse()
        return merge_pieces(self._db, rows), has_more

    def load_schedules(self) -> list[ScheduleInfo]:
        cur = self._db.execute(f"SELECT {SCHEDULE_COLUMNS} FROM schedules ORDER BY created_at, id")
        return [schedule_from(v) for v in cur]

    def load_row(self, topic_id: str, row_id: str) -> MessageRow | None:
        return self._load_one("topic_id = ? AND id = ?", (topic_id, row_id))

    def _load_row_by_id(self, row_id: str) -> MessageRow | None:
        return self._load_one("id = ?", (row_id,))

    def _load_one(self, where: str, args: tuple[str, ...]) -> MessageRow | None:
        """The one row `where` selects, its streamed pieces merged (`row_content`)."""
        for values in self._db.execute(f"SELECT {ROW_COLUMNS} FROM rows WHERE {where}", args):
            return merge_pieces(self._db, [row_from(values)])[0]
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
            # Streamed pieces of rows the killed daemon never wrote whole: fold them in.
            compact_all(db, self._load_row_by_id)
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

    def apply(self, ops: Sequence[Op]) -> int:
        """Write one batch in one transaction; returns the bytes of row content it encoded.
        Raises `StoreError`, having written nothing."""
        return self.write(self.prepare(ops))

    def prepare(self, ops: Sequence[Op]) -> Prepared:
        """Everything of a batch's write that is Python: the statements and their rows, in
        dependency order. The store writer runs it on the event loop and only `write` on its
        worker thread: Python on that thread holds the GIL, and the loop, waking for a
        driver's chunk, waited for it (docs/benchmarks.md, "Tail latency (session 10,
        tail)"). Reads the row cursors, which only `write` changes: run the two in turn."""
        groups: dict[type, list[Any]] = {}
        for op in ops:
            groups.setdefault(type(op), []).append(op)
        rows = plan_rows(ops, self._cursors)
        out: list[tuple[str, list[tuple[Any, ...]]]] = []
        # Order by dependency: parents first, deletions last (foreign keys are checked per
        # statement).
        if ts := groups.get(PutTopic):
            out.append((
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
            ))
        if ss := groups.get(PutSeq):
            # One statement for many topics (a flush of 100 streaming topics has 100): the
            # worker lets go of the GIL per statement step, and takes it back after each.
            out.extend(
                many_rows(
                    "WITH v(id, seq) AS (VALUES {rows}) UPDATE topics SET "
                    "last_seq = max(last_seq, v.seq) FROM v WHERE topics.id = v.id",
                    [(op.topic_id, op.seq) for op in ss],
                )
            )
        # Rows: whole (a `PutRow`, a row's first or replaced content) or a piece of what was
        # streamed since the last commit (`row_content`).
        out.extend(rows.statements(ROW_COLUMNS, ROW_PLACEHOLDERS))
        if aps := groups.get(PutApproval):
            out.append((
                f"INSERT INTO approvals ({APPROVAL_COLUMNS}) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(id) DO UPDATE "
                "SET status = excluded.status, answered_by = excluded.answered_by, "
                "reason = excluded.reason, option_id = excluded.option_id",
                [approval_values(op.approval) for op in aps],
            ))
        if tus := groups.get(PutTurn):
            out.append((
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
            ))
        if uss := groups.get(PutTurnUsage):
            out.append((
                "UPDATE turns SET usage = ? WHERE id = ?",
                [(json_encoder.encode(op.usage).decode(), op.turn_id) for op in uss],
            ))
        if sts := groups.get(PutSteps):
            out.append(("DELETE FROM steps WHERE turn_id = ?", [(op.turn_id,) for op in sts]))
            out.append((
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
            ))
        if tks := groups.get(PutResumeToken):
            out.append((
                "INSERT INTO resume_tokens (topic_id, token, updated_at) VALUES (?, ?, ?) "
                "ON CONFLICT(topic_id) DO UPDATE SET token = excluded.token, "
                "updated_at = excluded.updated_at",
                [(op.topic_id, op.token, op.at) for op in tks],
            ))
        if scs := groups.get(PutSchedule):
            marks = ", ".join("?" for _ in SCHEDULE_COLUMNS.split(","))
            out.append((
                f"INSERT OR REPLACE INTO schedules ({SCHEDULE_COLUMNS}) VALUES ({marks})",
                [schedule_values(op.schedule) for op in scs],
            ))
        if dss := groups.get(DeleteSchedule):
            out.append(("DELETE FROM schedules WHERE id = ?", [(op.schedule_id,) for op in dss]))
        if drs := groups.get(DeleteRow):
            out.append(("DELETE FROM rows WHERE id = ?", [(op.row_id,) for op in drs]))
        if dts := groups.get(DeleteTopic):
            out.append(("DELETE FROM topics WHERE id = ?", [(op.topic_id,) for op in dts]))
        return Prepared(out, rows)

    def write(self, batch: Prepared) -> int:
        """Run a prepared batch in one transaction; returns the bytes of row content it
        encoded. Raises `StoreError`, having written nothing."""
        self.check_file()
        db = self._db
        try:
            with db:
                for sql, values in batch.statements:
                    db.executemany(sql, values)
        except apsw.Error as exc:
            raise StoreError(f"database write failed: {type(exc).__name__}: {exc}") from exc
        batch.rows.commit(self._cursors)
        return batch.rows.content_bytes


@dataclass(frozen=True)
class Prepared:
    """A batch ready to write (`Store.prepare`): its statements with their rows, in order,
    and the row plan whose cursors become the store's once it committed."""

    statements: list[tuple[str, list[tuple[Any, ...]]]]
    rows: Plan


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


class DatabaseFileLost(Exception):
    """The cause of the `StoreError` `Store.check_file` raises (retried, never isolated)."""


def _file_identity(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_dev, st.st_ino)


#: Failures a retry can cure (disk full, read-only, I/O, locks); others are bugs in an op.
TRANSIENT_ERRORS = (
    DatabaseFileLost,
    apsw.FullError,
    apsw.IOError,
    apsw.ReadOnlyError,
    apsw.BusyError,
    apsw.LockedError,
    apsw.CantOpenError,
    apsw.NoMemError,
)
