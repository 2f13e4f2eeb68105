"""Unit tests of the topic runtime: steering (DESIGN.md invariant 4: a steer is never lost nor
reordered; A1a, U2, A2 at a boundary). Every test runs through `Harness` (see
`tests/core/test_topic_runtime.py`).
"""

from __future__ import annotations

import pytest

from hostd.core.effects import (
    Emit,
)
from hostd.core.runtime_rows import UNSENT_BASE
from hostd_protocol.client_messages import (
    DriverReady,
    Rolled,
    RowOpened,
    TurnEnded,
    TurnStarted,
)
from hostd_protocol.driver_messages import (
    CompactionStart,
    Ready,
    Redirect,
    SteerBoundary,
    SteerInjected,
    SteerUndelivered,
)
from hostd_protocol.errors import (
    InvalidArgument,
)
from tests.core.runtime_harness import INJECT, NO_INJECT, Harness, steer_id

# --- steering -------------------------------------------------------------------------------


def test_steer_rolls_the_answer_at_the_boundary() -> None:
    h = Harness()
    h.send("U1")
    h.chunk("A1a text")
    r = h.send("U2", "steer")
    assert r.disposition == "steered" and r.position >= UNSENT_BASE
    assert h.commands(Redirect) == [Redirect(turn_id=h.turn, steer_id=steer_id(h), text="U2")]
    h.ev(SteerInjected(turn_id=h.turn, steer_id=steer_id(h)))
    effects = h.ev(SteerBoundary(turn_id=h.turn, steer_ids=[steer_id(h)]))
    (rolled,) = h.events(Rolled, effects)
    assert rolled.steer_row_ids == [r.row_id]
    # Every row event comes before Rolled.
    assert isinstance(effects[-1], Emit) and effects[-1].event is rolled
    h.chunk("A2 text")
    assert h.history() == [
        ("user", "success", "U1"),
        ("assistant", "success", "A1a text"),
        ("user", "success", "U2"),
        ("assistant", "pending", "A2 text"),
    ]
    assert h.row(r.row_id).turn_id == h.turn
    h.end()
    assert h.history()[-1] == ("assistant", "success", "A2 text")
    assert len(h.starts()) == 1  # the steer did not become a turn of its own


def test_several_steers_roll_in_order() -> None:
    h = Harness()
    h.send("U1")
    for n in (2, 3):
        h.chunk(f"A{n - 1}")
        h.send(f"U{n}", "auto")
        h.ev(SteerInjected(turn_id=h.turn, steer_id=steer_id(h)))
        h.ev(SteerBoundary(turn_id=h.turn))
    h.chunk("A3")
    h.end()
    assert [t for _, _, t in h.history()] == ["U1", "A1", "U2", "A2", "U3", "A3"]


def test_two_steers_at_one_boundary() -> None:
    h = Harness()
    h.send("U1")
    h.chunk("A1")
    h.send("U2", "steer")
    s2 = steer_id(h)
    h.send("U3", "steer")
    s3 = steer_id(h)
    h.ev(SteerInjected(turn_id=h.turn, steer_id=s2))
    h.ev(SteerInjected(turn_id=h.turn, steer_id=s3))
    h.ev(SteerBoundary(turn_id=h.turn, steer_ids=[s2, s3]))
    h.chunk("A2")
    assert [t for _, _, t in h.history()] == ["U1", "A1", "U2", "U3", "A2"]


def test_a_boundary_right_away_leaves_an_empty_closed_row() -> None:
    h = Harness()
    h.send("U1")
    a1 = h.events(RowOpened)[-1].row.id
    h.send("U2", "steer")
    h.ev(SteerInjected(turn_id=h.turn, steer_id=steer_id(h)))
    h.ev(SteerBoundary(turn_id=h.turn))
    assert h.row(a1).empty and h.row(a1).status == "success"


def test_undelivered_steer_becomes_the_next_turn() -> None:
    h = Harness()
    h.send("U1")
    r = h.send("U2", "steer")
    first = h.turn
    h.ev(SteerUndelivered(turn_id=first, steer_ids=[steer_id(h)]))
    h.chunk("A1")
    h.end()
    assert h.starts()[-1].send.text == "U2"
    assert h.row(r.row_id).turn_id == h.turn != first
    assert [t for _, _, t in h.history()] == ["U1", "A1", "U2", ""]


def test_steer_not_injected_by_turn_end_becomes_the_next_turn() -> None:
    # The turn ends in the same instant the steer arrives: no undelivered report at all.
    h = Harness()
    h.send("U1")
    h.send("U2", "steer")
    h.end()
    assert [s.send.text for s in h.starts()] == ["U1", "U2"]
    assert len(h.events(TurnEnded)) == 1 and h.rt.state == "answering"


def test_steer_after_turn_end_starts_a_turn() -> None:
    h = Harness()
    h.send("U1")
    h.end()
    assert h.send("U2", "steer").disposition == "started"


def test_injected_steer_without_boundary_is_placed_after_the_answer() -> None:
    h = Harness()
    h.send("U1")
    h.chunk("A1")
    h.send("U2", "steer")
    h.ev(SteerInjected(turn_id=h.turn, steer_id=steer_id(h)))
    h.end()
    # The model saw it, so it is history, not a second turn.
    assert h.history() == [
        ("user", "success", "U1"),
        ("assistant", "success", "A1"),
        ("user", "success", "U2"),
    ]
    assert len(h.starts()) == 1


def test_steer_for_a_driver_that_cannot_inject_is_queued_and_chained() -> None:
    h = Harness(NO_INJECT)
    h.send("U1")
    r = h.send("U2", "steer")
    assert r.disposition == "queued"
    assert h.commands(Redirect) == []
    h.chunk("A1")
    h.end()
    assert h.starts()[-1].send.text == "U2"
    assert h.send("U3", "auto").disposition == "queued"


def test_capabilities_come_from_the_driver() -> None:
    h = Harness(None)
    h.send("U1")
    # Not known before Ready: the steer goes to the driver (see the next test for one that
    # turns out not to inject).
    assert h.send("U2").disposition == "steered"
    assert len(h.commands(Redirect)) == 1
    h.ev(Ready(protocol_version=(1, 0), driver="x", capabilities=INJECT))
    assert h.send("U3").disposition == "steered"
    h.call("driver_ready", NO_INJECT)
    assert h.rt.capabilities == NO_INJECT
    assert h.send("U4").disposition == "queued"


def test_steer_before_ready_to_a_driver_that_cannot_inject_runs_as_the_next_turn() -> None:
    """A topic's first turn takes a steer before its driver is up (a steer sent 0.2 s after
    the send was once queued for good although the driver could inject); a driver that then
    says it cannot inject hands it back and it runs next, never lost, never reordered."""
    h = Harness(None)
    h.send("U1")
    first = h.turn
    r = h.send("U2", "steer")
    assert r.disposition == "steered"
    h.call("driver_ready", NO_INJECT)
    h.ev(SteerUndelivered(turn_id=first, steer_ids=[steer_id(h)]))
    h.chunk("A1")
    h.end()
    assert h.starts()[-1].send.text == "U2"
    assert [t for _, _, t in h.history()] == ["U1", "A1", "U2", ""]


def test_first_turn_says_capabilities_unknown_and_driver_ready_tells_them() -> None:
    h = Harness(None)
    h.send("U1")
    [started] = h.events(TurnStarted)
    assert started.capabilities_known is False
    ready = h.events(DriverReady, h.call("driver_ready", INJECT))
    assert [r.capabilities for r in ready] == [INJECT]
    # The same set again (a restarted session): nothing to tell.
    assert h.events(DriverReady, h.call("driver_ready", INJECT)) == []
    h.chunk("A1")
    h.end()
    h.send("U2")
    assert h.events(TurnStarted)[-1].capabilities_known is True
    assert h.events(TurnStarted)[-1].capabilities == INJECT
    # A changed set is told again.
    assert [r.capabilities for r in h.events(DriverReady, h.call("driver_ready", NO_INJECT))] == [
        NO_INJECT
    ]


def test_steer_while_compacting_is_queued() -> None:
    h = Harness()
    h.send("U1")
    h.ev(CompactionStart(turn_id=h.turn))
    assert h.send("U2", "auto").disposition == "queued"
    assert h.commands(Redirect) == []


def test_in_flight_steer_cannot_be_edited() -> None:
    h = Harness()
    h.send("U1")
    r = h.send("U2", "steer")
    for method, args in (("edit_queued", ("x",)), ("discard_queued", ()), ("send_now", ())):
        with pytest.raises(InvalidArgument, match=r"already handed to the driver as a steer"):
            getattr(h.rt, method)(r.row_id, *args, h.now)
