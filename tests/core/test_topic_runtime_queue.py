"""Unit tests of the topic runtime: the queue (queued and draft rows, edit, discard, send-now;
DESIGN.md invariants 4 and 5). Every test runs through `Harness`.
"""

from __future__ import annotations

import pytest

from hostd.core.effects import (
    DeleteRow,
)
from hostd_protocol.client_messages import (
    NoticeEvent,
    RowRemoved,
    RowUpdated,
    TurnEnded,
)
from hostd_protocol.common import (
    TextDelta,
)
from hostd_protocol.driver_messages import (
    Interrupt,
)
from hostd_protocol.errors import (
    InvalidArgument,
    NotFound,
)
from tests.core.runtime_harness import Harness

# --- queue ----------------------------------------------------------------------------------


def test_queued_messages_run_in_order() -> None:
    h = Harness()
    h.send("U1")
    q = [h.send(f"Q{n}", "queue") for n in range(3)]
    assert [r.disposition for r in q] == ["queued"] * 3
    assert h.rt.queued_row_ids() == [r.row_id for r in q]
    for _ in range(4):
        h.chunk("a")
        h.end()
    assert [s.send.text for s in h.starts()] == ["U1", "Q0", "Q1", "Q2"]
    assert len(h.events(TurnEnded)) == 4 and h.rt.state == "idle"
    assert [t for r, _, t in h.history() if r == "user"] == ["U1", "Q0", "Q1", "Q2"]


def test_queue_intent_when_idle_starts_unless_rows_wait() -> None:
    h = Harness()
    assert h.send("U1", "queue").disposition == "started"


def test_queue_survives_a_restart() -> None:
    h = Harness()
    h.send("U1")
    h.send("Q1", "queue")
    h.send("Q2", "queue")
    h.chunk("A1")
    h.end("stopped")  # e.g. the driver stopped on its own: the queue waits
    assert h.events(NoticeEvent)[-1].code == "queue_paused"
    rows = h.rt.snapshot().rows
    h2 = Harness(rows=rows, last_seq=h.rt.seq, ids_from=100)
    assert h2.rt.state == "idle" and len(h2.rt.queued_row_ids()) == 2
    h2.call("resume_queue")
    assert h2.starts()[-1].send.text == "Q1"
    h2.end()
    assert h2.starts()[-1].send.text == "Q2"
    h2.end()
    assert h2.call("resume_queue") == []
    assert [t for r, _, t in h2.history() if r == "user"] == ["U1", "Q1", "Q2"]


def test_edit_and_discard_queued() -> None:
    h = Harness()
    h.send("U1")
    q1 = h.send("Q1", "queue")
    q2 = h.send("Q2", "queue")
    h.call("edit_queued", q1.row_id, "Q1 edited")
    assert h.events(RowUpdated)[-1].parts == [TextDelta(text="Q1 edited")]
    assert h.saved(q1.row_id).parts == [TextDelta(text="Q1 edited")]
    effects = h.call("discard_queued", q2.row_id)
    assert h.of(DeleteRow, effects) == [DeleteRow(q2.row_id)]
    assert h.events(RowRemoved, effects)[0].row_id == q2.row_id
    h.end()
    assert h.starts()[-1].send.text == "Q1 edited"
    h.end()
    assert h.rt.state == "idle"


def test_queue_edits_are_checked() -> None:
    h = Harness()
    r = h.send("U1")
    q = h.send("Q", "queue")
    with pytest.raises(NotFound, match=r"^row nope does not exist in topic T$"):
        h.rt.edit_queued("nope", "x", h.now)
    with pytest.raises(
        InvalidArgument, match=r"^row r2 is success; only queued or draft messages can be edited$"
    ):
        h.rt.edit_queued(r.row_id, "x", h.now)
    with pytest.raises(InvalidArgument, match=r"^the new text is empty"):
        h.rt.edit_queued(q.row_id, " ", h.now)


def test_send_now_stops_the_turn_and_runs_the_row_next() -> None:
    h = Harness()
    h.send("U1")
    h.chunk("partial")
    q1 = h.send("Q1", "queue")
    q2 = h.send("Q2", "queue")
    effects = h.call("send_now", q2.row_id)
    assert h.commands(Interrupt, effects) == [Interrupt(turn_id=h.turn)]
    assert h.row(q1.row_id).status == "draft"  # the rest goes back to the windows
    assert h.row(q2.row_id).status == "queued"  # never lost on the way
    h.end("stopped")
    assert h.starts()[-1].send.text == "Q2"
    assert h.history()[:2] == [("user", "success", "U1"), ("assistant", "stopped", "partial")]


def test_send_now_a_draft_while_idle_starts_it() -> None:
    h = Harness()
    h.send("U1")
    q = h.send("Q1", "queue")
    h.call("stop")
    h.end("stopped")
    assert h.row(q.row_id).status == "draft"
    h.call("send_now", q.row_id)
    assert h.starts()[-1].send.text == "Q1"


def test_send_now_while_stopping_picks_the_newest() -> None:
    h = Harness()
    h.send("U1")
    q1 = h.send("Q1", "queue")
    q2 = h.send("Q2", "queue")
    h.call("send_now", q1.row_id)
    h.call("send_now", q2.row_id)  # q2 was drafted by the stop; send-now queues it again
    assert h.row(q2.row_id).status == "queued"
    h.end("stopped")
    h.end()
    assert [s.send.text for s in h.starts()] == ["U1", "Q2", "Q1"]


def test_discarding_the_send_now_row_while_stopping() -> None:
    h = Harness()
    h.send("U1")
    q1 = h.send("Q1", "queue")
    h.call("send_now", q1.row_id)
    h.call("discard_queued", q1.row_id)
    h.end("stopped")
    assert h.rt.state == "idle" and len(h.starts()) == 1
