"""The one store writer: a trio task that batches operations and commits each batch in one
transaction on a worker thread, so the event stream never waits for the disk.

Rules it guards (the store's; see `hostd.shell.store.store`):

- Repeated saves of one row between flushes are coalesced (by `op_key`): the newest wins.
- Streamed content is committed at most `flush_interval` after it was produced (the bound on
  what `kill -9` loses); a durable op is flushed at once, and whoever needs it on disk awaits
  `wait_committed`.
- A failed batch is never dropped: transient failures are retried with a backoff, a batch
  failing on a constraint is written op by op, dropping only the ops that fail.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from time import monotonic_ns
from typing import TYPE_CHECKING

import trio

from hostd.shell import probe, trace
from hostd.shell.store.database import TRANSIENT_ERRORS
from hostd.shell.store.ops import (
    DeleteRow,
    DeleteSchedule,
    DeleteTopic,
    Op,
    PutApproval,
    PutResumeToken,
    PutRow,
    PutSchedule,
    PutSeq,
    PutSteps,
    PutTopic,
    PutTurn,
    PutTurnUsage,
    TouchRow,
    op_key,
    op_topic,
)
from hostd.shell.store.writer_thread import WriterThread
from hostd_protocol.errors import StoreError

if TYPE_CHECKING:
    from hostd.shell.store.database import Store

log = logging.getLogger(__name__)

#: The default bound on streamed content lost to `kill -9` (seconds).
DEFAULT_FLUSH_INTERVAL = 0.1
#: After a failed batch the writer retries after this long, doubling up to `RETRY_MAX`.
RETRY_MIN = 0.1
RETRY_MAX = 2.0


@dataclass(frozen=True)
class StoreWriterStatistics:
    queued_ops: int
    batches: int
    ops_written: int
    failed_batches: int
    last_batch_seconds: float
    #: Bytes of row content the last batch encoded (whole rows and streamed pieces).
    last_batch_bytes: int = 0


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
        self._thread = WriterThread()
        self._batches = 0
        self._ops_written = 0
        self._last_batch_seconds = 0.0
        self._last_batch_bytes = 0
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
            last_batch_bytes=self._last_batch_bytes,
        )

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Write batches until cancelled. Cancel it only after `wait_committed()`."""
        task_status.started()
        try:
            await self._serve()
        finally:
            self._thread.close()

    async def _serve(self) -> None:
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
        # Touched rows go as they are: `Store.prepare` encodes what they streamed since the
        # last commit (`row_content`), not the whole row again.
        batch = list(self._pending.values())
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
                # The batch's Python (statements, rows, the streamed pieces' JSON) runs here,
                # in one go; the worker thread only runs SQLite, which lets go of the GIL.
                # Python there held the GIL in turns with the loop, so every chunk read
                # meanwhile waited for it (`Store.prepare`).
                prepared = self._store.prepare(batch)
                write = probe.timed_batch(self._store.write) if probe.ENABLED else self._store.write
                # On the writer's own thread, nicer than the loop (`writer_thread`). Not
                # abandoned on cancel: a batch that started is always finished, so a shutdown
                # never leaves half a transaction behind.
                self._last_batch_bytes = await self._thread.run(write, prepared)
                if trace.ENABLED:
                    trace.commit(trace_start)
            except StoreError as exc:
                self._failures.append((first, last, exc))
                if isinstance(exc.__cause__, TRANSIENT_ERRORS):
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
        for op, err in await self._thread.run(each):
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
