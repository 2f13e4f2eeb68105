"""Rewind, regenerate, edit-and-resend and fork in the topic runtime (hostd.core.runtime_rewind)."""

from __future__ import annotations

import pytest

from hostd.core.effects import ResetSession, SaveRow
from hostd_protocol.client_messages import RowsRemoved
from hostd_protocol.driver_messages import Interrupt
from hostd_protocol.errors import InvalidArgument, NotFound, TopicBusy
from tests.core.runtime_harness import Harness


def two_turns(h: Harness) -> list[str]:
    """u1 a1 u2 a2 (all success); returns their ids."""
    ids = []
    for text in ("one", "two"):
        sent = h.send(text)
        h.chunk(f"answer {text}")
        ids += [sent.row_id, h.rt.snapshot().rows[-1].id]
        h.end()
    return ids


def test_rewind_cuts_the_rows_after_the_target_and_keeps_them_as_superseded() -> None:
    h = Harness()
    _u1, a1, u2, a2 = two_turns(h)
    cut, effects = h.rt.rewind(a1, h.now)
    h.take(effects)
    assert cut == [u2, a2]
    assert h.history() == [("user", "success", "one"), ("assistant", "success", "answer one")]
    assert [e.row_ids for e in h.events(RowsRemoved, effects)] == [[u2, a2]]
    saved = [e.row for e in effects if isinstance(e, SaveRow)]
    assert [(r.id, r.superseded, r.status) for r in saved] == [
        (u2, True, "success"),
        (a2, True, "success"),
    ]
    assert h.of(ResetSession, effects) == [ResetSession()]
    # Later rows take new positions after every old one: history still reads in order.
    h.send("three")
    assert h.row(h.rt.snapshot().rows[-2].id).position > saved[-1].position


def test_rewind_include_cuts_the_target_too_and_nothing_after_is_a_no_op() -> None:
    h = Harness()
    _u1, _a1, u2, a2 = two_turns(h)
    cut, effects = h.rt.rewind(a2, h.now)
    assert cut == [] and h.of(ResetSession, effects) == [] and h.events(RowsRemoved, effects) == []
    cut, effects = h.rt.rewind(u2, h.now, include=True)
    h.take(effects)
    assert cut == [u2, a2]


def test_rewind_is_refused_while_a_turn_runs_unless_stop() -> None:
    h = Harness()
    _u1, a1, _u2, _a2 = two_turns(h)
    h.send("three")
    h.chunk("partial")
    before = h.rt.snapshot()
    with pytest.raises(TopicBusy, match=r"cannot rewind while a turn runs"):
        h.rt.rewind(a1, h.now)
    assert h.rt.snapshot() == before
    cut, effects = h.rt.rewind(a1, h.now, stop=True)
    h.take(effects)
    assert cut == [] and h.commands(Interrupt, effects)
    assert len(h.history()) == 6  # nothing cut before the turn ended
    h.end("stopped")
    assert h.history() == [("user", "success", "one"), ("assistant", "success", "answer one")]
    assert len(h.rt.last_rewound) == 4


def test_rewind_refuses_unknown_and_unsent_rows() -> None:
    h = Harness()
    h.send("one")
    queued = h.send("later", "queue")
    with pytest.raises(NotFound, match=r"^row nope is not in the visible history of topic T$"):
        h.rt.rewind("nope", h.now)
    with pytest.raises(InvalidArgument, match=r"is queued, not part of the history yet"):
        h.rt.rewind(queued.row_id, h.now)


def test_regenerate_resends_the_last_message_after_cutting_its_answer() -> None:
    h = Harness()
    _u1, _a1, u2, _a2 = two_turns(h)
    result, effects = h.rt.regenerate(h.now, client_msg_id="k")
    h.take(effects)
    assert result.disposition == "started"
    assert h.history() == [
        ("user", "success", "one"),
        ("assistant", "success", "answer one"),
        ("user", "success", "two"),
        ("assistant", "pending", ""),
    ]
    assert result.row_id != u2
    assert h.starts(effects)[0].send.text == "two"
    # A resend of the same request changes nothing.
    again, more = h.rt.regenerate(h.now, client_msg_id="k")
    assert again == result and more == []


def test_edit_and_resend_with_stop_runs_the_new_text_after_the_stopped_turn() -> None:
    h = Harness()
    _u1, _a1, u2, _a2 = two_turns(h)
    h.send("three")
    h.chunk("partial")
    result, effects = h.rt.resend(u2, "two, edited", h.now, stop=True)
    h.take(effects)
    assert result.disposition == "queued"
    effects = h.end("stopped")
    assert h.history() == [
        ("user", "success", "one"),
        ("assistant", "success", "answer one"),
        ("user", "success", "two, edited"),
        ("assistant", "pending", ""),
    ]
    assert [s.send.text for s in h.starts(effects)] == ["two, edited"]
    # The new turn's history (stateless drivers, or a fresh vendor session) lacks the cut rows.
    assert [m.text for m in h.rt.history_for(result.row_id)] == ["one", "answer one"]


def test_resend_refuses_an_answer_row_and_empty_text() -> None:
    h = Harness()
    u1, a1, _u2, _a2 = two_turns(h)
    with pytest.raises(InvalidArgument, match=r"is not a user message"):
        h.rt.resend(a1, "x", h.now)
    with pytest.raises(InvalidArgument, match=r"empty"):
        h.rt.resend(u1, "  ", h.now)


def test_regenerate_with_nothing_sent_is_not_found() -> None:
    h = Harness()
    with pytest.raises(NotFound, match=r"has no sent message to regenerate"):
        h.rt.regenerate(h.now)


def test_fork_rows_copy_the_history_up_to_the_target() -> None:
    h = Harness()
    u1, a1, u2, a2 = two_turns(h)
    h.send("three")
    assert [r.id for r in h.rt.fork_rows(a1)] == [u1, a1]
    assert [r.id for r in h.rt.fork_rows(a2)] == [u1, a1, u2, a2]
    pending = h.rt.snapshot().rows[-1]
    with pytest.raises(InvalidArgument, match=r"still being answered"):
        h.rt.fork_rows(pending.id)
