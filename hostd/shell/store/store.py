"""The SQLite store (apsw), and the trio task that writes to it: the store's public surface
(`from hostd.shell.store import store as st`, then `st.StoreWriter`, `st.PutRow`, ...).

Its parts: `database` (the file: open, migrate, read, write one batch, reconcile; the only
run-time apsw importer), `migrations` (the schema), `writer` (the trio writer task), `ops`
(the operations queued to it), `rows` (row codecs), `row_content` (a row's stored content:
whole parts plus the pieces streamed since).

Rules the store guards (each part says which are its own):

- `apsw.bestpractice` is applied once (WAL, busy timeout, foreign keys); the schema is
  migrated by `pragma user_version`, each migration in one transaction.
- One writer: every write goes through `StoreWriter`, a trio task that batches operations and
  commits each batch in one transaction (`executemany` per kind) on a worker thread, so the
  event stream never waits for the disk. Repeated saves of one row between flushes are
  coalesced: the row objects are immutable, the newest wins. A streamed row's flush appends
  what it streamed since the last commit (schema 8, `row_content`), so a flush costs the new
  text, not the answer so far; readers see the whole row.
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

from hostd.shell.store.database import (
    RESTART_REASON,
    TRANSIENT_ERRORS,
    AsyncStore,
    DatabaseFileLost,
    Store,
)
from hostd.shell.store.migrations import MIGRATIONS
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
from hostd.shell.store.writer import (
    DEFAULT_FLUSH_INTERVAL,
    RETRY_MAX,
    RETRY_MIN,
    StoreWriter,
    StoreWriterStatistics,
)

__all__ = [
    "AsyncStore",
    "DEFAULT_FLUSH_INTERVAL",
    "DatabaseFileLost",
    "DeleteRow",
    "DeleteSchedule",
    "DeleteTopic",
    "MIGRATIONS",
    "Op",
    "PutApproval",
    "PutResumeToken",
    "PutRow",
    "PutSchedule",
    "PutSeq",
    "PutSteps",
    "PutTopic",
    "PutTurn",
    "PutTurnUsage",
    "RESTART_REASON",
    "RETRY_MAX",
    "RETRY_MIN",
    "ReconcileReport",
    "StepRow",
    "Store",
    "StoreWriter",
    "StoreWriterStatistics",
    "TRANSIENT_ERRORS",
    "TopicRecord",
    "TouchRow",
    "TurnRecord",
    "op_key",
    "op_topic",
]
