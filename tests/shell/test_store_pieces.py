"""Schema 8: streamed rows are stored as whole parts plus appended pieces (`row_content`).

The model is the whole-row store it replaces: after any mix of streamed chunks, joins, flushes,
replaced parts, status changes, deletions, failed batches and restarts (a crash: what was not
flushed is gone, the next daemon reconciles), every reader returns exactly the rows the
whole-row store would hold.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import apsw
import msgspec
import pytest
from hypothesis import settings
from hypothesis import strategies as hs
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from hostd.core.rows import LiveRow
from hostd.shell.store import store as st
from hostd.shell.store.row_content import MAX_PIECES
from hostd_protocol.client_messages import MessageRow, TopicInfo
from hostd_protocol.common import Chunk, TextDelta, ThinkingDelta, ToolCall
from hostd_protocol.errors import StoreError

ROWS = 2
NOW = 1000.0


def _topic(tid: str = "t1") -> TopicInfo:
    return TopicInfo(
        id=tid, title="", assistant="", driver="fake", model="", working_dir="", options={},
        created_at=1.0, updated_at=1.0,
    )


def _row(i: int) -> MessageRow:
    return MessageRow(
        id=f"r{i}", topic_id="t1", role="assistant", status="pending", position=i + 1,
        parts=[], created_at=1.0, updated_at=1.0,
    )


_texts = hs.text(alphabet='ab"\\\u00e9\U0001f600', min_size=0, max_size=5)
_chunks = hs.one_of(
    hs.builds(TextDelta, text=_texts),
    hs.builds(ThinkingDelta, text=_texts),
    hs.builds(ToolCall, call_id=hs.just("c"), name=hs.just("Read"), input=hs.just({"a": 1})),
)
_which = hs.integers(0, ROWS - 1)


class PiecesMatchWholeRows(RuleBasedStateMachine):
    @initialize()
    def open_store(self) -> None:
        self.dir = tempfile.TemporaryDirectory()
        self.path = Path(self.dir.name) / "db"
        self.store = st.Store(self.path)
        self.store.apply([st.PutTopic(_topic())])
        self.live: dict[str, LiveRow] = {}
        self.queue: dict[tuple[str, str], st.Op] = {}
        #: The whole-row store: each row as its newest committed op wrote it.
        self.model: dict[str, MessageRow] = {}
        for i in range(ROWS):
            self.open_row(i)

    def teardown(self) -> None:
        self.store.close()
        self.dir.cleanup()

    def _put(self, op: st.Op) -> None:
        key = st.op_key(op)
        self.queue.pop(key, None)
        self.queue[key] = op

    def _commit_model(self, op: st.Op) -> None:
        if isinstance(op, st.PutRow):
            self.model[op.row.id] = op.row
        elif isinstance(op, st.TouchRow):
            self.model[op.row_id] = op.row.freeze()
        elif isinstance(op, st.DeleteRow):
            self.model.pop(op.row_id, None)

    @rule(i=_which)
    def open_row(self, i: int) -> None:
        row = _row(i)
        if row.id not in self.live:
            self.live[row.id] = LiveRow(row)
            self._put(st.PutRow(row))

    @rule(i=_which, chunks=hs.lists(_chunks, min_size=1, max_size=4))
    def stream(self, i: int, chunks: list[Chunk]) -> None:
        live = self.live.get(f"r{i}")
        if live is not None:
            for chunk in chunks:
                if live.append(chunk):
                    self._put(st.TouchRow(live.snapshot()))

    @rule(i=_which)
    def join_run(self, i: int) -> None:
        """A window attached: the runtime built the row (its open run joined)."""
        if (live := self.live.get(f"r{i}")) is not None:
            live.freeze()

    @rule(i=_which, parts=hs.lists(_chunks, max_size=3), save=hs.booleans())
    def replace_parts(self, i: int, parts: list[Chunk], save: bool) -> None:
        if (live := self.live.get(f"r{i}")) is not None:
            live.set_parts(parts)
            live.update(updated_at=live.base.updated_at + 1)
            self._put(st.PutRow(live.freeze()) if save else st.TouchRow(live.snapshot()))

    @rule(i=_which, meta=hs.integers(0, 3))
    def change_fields(self, i: int, meta: int) -> None:
        """A field other than parts changed, seen by the store through a touch."""
        if (live := self.live.get(f"r{i}")) is not None:
            live.update(meta={"n": meta})
            self._put(st.TouchRow(live.snapshot()))

    @rule(i=_which, status=hs.sampled_from(["success", "error", "stopped"]))
    def end_row(self, i: int, status: str) -> None:
        if (live := self.live.get(f"r{i}")) is not None:
            live.update(status=status)
            self._put(st.PutRow(live.freeze()))

    @rule(i=_which)
    def delete_row(self, i: int) -> None:
        if self.live.pop(f"r{i}", None) is not None:
            self._put(st.DeleteRow(f"r{i}"))

    @rule(i=_which, chunks=hs.lists(_chunks, min_size=1, max_size=4))
    def stream_and_flush(self, i: int, chunks: list[Chunk]) -> None:
        """The common case, made likely: a flush interval of streaming, then its flush."""
        self.stream(i, chunks)
        self.flush()

    @rule()
    def flush(self) -> None:
        batch = list(self.queue.values())
        self.queue = {}
        self.store.apply(batch)
        for op in batch:
            self._commit_model(op)

    @rule()
    def flush_fails_then_ops_are_written_one_by_one(self) -> None:
        """A batch failing on a constraint writes nothing; the writer then writes its ops one
        by one (`StoreWriter._isolate`): the streamed rows still append from where they were."""
        bad = st.PutRow(msgspec.structs.replace(_row(9), topic_id="no-such-topic"))
        batch = list(self.queue.values())
        self.queue = {}
        with pytest.raises(StoreError):
            self.store.apply([*batch, bad])
        for op in batch:
            self.store.apply([op])
            self._commit_model(op)

    @rule()
    def crash_and_restart(self) -> None:
        """kill -9: what was queued is lost; the next daemon reconciles, then loads the rows."""
        self.queue = {}
        self.store.close()
        self.store = st.Store(self.path)
        self.store.reconcile(now=NOW)
        for rid, row in list(self.model.items()):
            if row.status == "pending":
                self.model[rid] = msgspec.structs.replace(
                    row, status="error", error=st.RESTART_REASON, updated_at=NOW
                )
        self.live = {r.id: LiveRow(r) for r in self.store.load_rows("t1")}

    @invariant()
    def readers_see_the_whole_rows(self) -> None:
        if not hasattr(self, "store"):
            return
        expected = sorted(self.model.values(), key=lambda r: r.position)
        assert self.store.load_rows("t1") == expected
        assert self.store.history_page("t1", None, 10) == (expected, False)
        for row in expected:
            assert self.store.load_row("t1", row.id) == row


PiecesMatchWholeRows.TestCase.settings = settings(
    max_examples=200, stateful_step_count=30, deadline=None
)
test_pieces_match_whole_rows = PiecesMatchWholeRows.TestCase


def _stream(store: st.Store, live: LiveRow, texts: list[str]) -> None:
    for text in texts:
        live.append(TextDelta(text=text))
        store.apply([st.TouchRow(live.snapshot())])


def _pieces(path: Path) -> dict[str, int]:
    db = apsw.Connection(str(path))
    try:
        return dict(db.execute("SELECT row_id, count(*) FROM row_parts GROUP BY row_id"))
    finally:
        db.close()


def test_a_flush_appends_only_the_new_text(tmp_path: Path) -> None:
    """The point of schema 8: a flush of a long answer encodes what streamed since the last
    one, not the answer again; the row's end folds its pieces into the row."""
    with st.Store(tmp_path / "db") as s:
        s.apply([st.PutTopic(_topic()), st.PutRow(_row(0))])
        live = LiveRow(_row(0))
        live.append(TextDelta(text="x" * 100_000))
        assert s.apply([st.TouchRow(live.snapshot())]) > 100_000  # first: whole
        live.append(TextDelta(text="tail"))
        written = s.apply([st.TouchRow(live.snapshot())])
        assert 0 < written < 100
        assert _pieces(tmp_path / "db") == {"r0": 1}
        live.update(status="success")
        s.apply([st.PutRow(live.freeze())])
        assert _pieces(tmp_path / "db") == {}
        assert s.load_rows("t1") == [live.freeze()]


def test_a_row_with_many_pieces_is_compacted(tmp_path: Path) -> None:
    with st.Store(tmp_path / "db") as s:
        s.apply([st.PutTopic(_topic()), st.PutRow(_row(0))])
        live = LiveRow(_row(0))
        _stream(s, live, ["a"] * (MAX_PIECES + 2))
        assert _pieces(tmp_path / "db").get("r0", 0) < MAX_PIECES
        assert s.load_rows("t1") == [live.freeze()]


def test_a_deleted_topic_takes_its_pieces(tmp_path: Path) -> None:
    with st.Store(tmp_path / "db") as s:
        s.apply([st.PutTopic(_topic()), st.PutRow(_row(0))])
        live = LiveRow(_row(0))
        _stream(s, live, ["a", "b", "c"])
        assert _pieces(tmp_path / "db") == {"r0": 2}
        s.apply([st.DeleteTopic("t1")])
        assert _pieces(tmp_path / "db") == {}


def test_a_schema_7_database_with_rows_opens_and_reads_the_same(tmp_path: Path) -> None:
    """Migration 8 on a file written by the previous hostd: rows read back unchanged and new
    streamed rows are stored as pieces."""
    path = tmp_path / "db"
    rows: list[Any] = []
    with st.Store(path) as s:
        s.apply([st.PutTopic(_topic())])
        for i in range(3):
            rows.append(
                msgspec.structs.replace(
                    _row(i), status="success", parts=[TextDelta(text=f"answer {i}")]
                )
            )
        s.apply([st.PutRow(r) for r in rows])
    db = apsw.Connection(str(path))
    for column in ("options", "option_id", "lane"):  # schema 9
        db.execute(f"ALTER TABLE approvals DROP COLUMN {column}")
    db.execute("DROP TABLE row_parts")
    db.pragma("user_version", 7)
    db.close()
    with st.Store(path) as s:
        assert s.schema_version == len(st.MIGRATIONS)
        assert s.load_rows("t1") == rows
        live = LiveRow(_row(5))
        s.apply([st.PutRow(_row(5))])
        _stream(s, live, ["one ", "two"])
        assert _pieces(path) == {"r5": 1}
        assert s.load_rows("t1") == [*rows, live.freeze()]
