"""Vendor fork and rewind: the host's choice between a vendor copy and the host path
(`hostd.core.vendor_session`, used by `hostd.core.runtime_rewind` and the topic host)."""

from __future__ import annotations

import pytest

from hostd.core.effects import ResetSession
from hostd.core.vendor_session import CHECKPOINT_KEY, feeds_history
from hostd_protocol.client_messages import RowUpdated
from hostd_protocol.common import AnswerTarget, Capabilities, TextDelta
from hostd_protocol.driver_messages import Checkpoint, ChunkEvent, TurnEnd
from tests.core.runtime_harness import Harness


def turn(h: Harness, text: str, checkpoint: str = "") -> tuple[str, str]:
    """One whole turn (user row, answer row), reporting `checkpoint` before its end."""
    sent = h.send(text)
    h.chunk(f"answer {text}")
    answer = h.rt.snapshot().rows[-1].id
    if checkpoint:
        h.ev(Checkpoint(turn_id=h.turn, token=checkpoint))
    h.end()
    return sent.row_id, answer


def test_a_checkpoint_is_kept_on_the_answer_row_and_windows_see_it() -> None:
    h = Harness()
    _u1, a1 = turn(h, "one", "s1@m1")
    assert h.row(a1).meta[CHECKPOINT_KEY] == "s1@m1"
    assert h.saved(a1).meta[CHECKPOINT_KEY] == "s1@m1"
    assert [e.meta for e in h.events(RowUpdated) if e.meta is not None] == [
        {CHECKPOINT_KEY: "s1@m1"}
    ]
    h.history()  # the window's copy agrees with the runtime, meta included


def test_a_checkpoint_of_another_turn_is_ignored() -> None:
    h = Harness()
    _u1, a1 = turn(h, "one")
    h.send("two")
    assert h.ev(Checkpoint(turn_id="not-running", token="x@y")) == []
    assert CHECKPOINT_KEY not in h.row(a1).meta


def test_rewind_starts_from_the_checkpoint_of_the_last_kept_row() -> None:
    h = Harness()
    _u1, a1 = turn(h, "one", "s1@m1")
    _u2, _a2 = turn(h, "two", "s1@m2")
    _cut, effects = h.rt.rewind(a1, h.now)
    assert h.of(ResetSession, effects) == [ResetSession(resume_at="s1@m1")]


def test_regenerate_starts_from_the_previous_turns_checkpoint() -> None:
    h = Harness()
    turn(h, "one", "s1@m1")
    turn(h, "two", "s1@m2")
    _result, effects = h.rt.regenerate(h.now)
    h.take(effects)
    assert h.of(ResetSession, effects) == [ResetSession(resume_at="s1@m1")]


def test_rewind_without_a_checkpoint_takes_the_host_path() -> None:
    h = Harness()
    u1, a1 = turn(h, "one")
    turn(h, "two", "s1@m2")
    # The kept row has no checkpoint: a fresh session, fed the history.
    _cut, effects = h.rt.rewind(a1, h.now)
    assert h.of(ResetSession, effects) == [ResetSession()]
    h.take(effects)
    # Keeping nothing: fresh too (there is nothing to copy).
    _cut, effects = h.rt.rewind(u1, h.now, include=True)
    assert h.of(ResetSession, effects) == [ResetSession()]


def test_rewind_into_a_turn_keeps_no_checkpoint_of_a_later_row() -> None:
    """A rewind to a user row keeps no answer of it: the last kept row is the previous
    answer, whose checkpoint holds nothing of the cut user message."""
    h = Harness()
    turn(h, "one", "s1@m1")
    u2, _a2 = turn(h, "two", "s1@m2")
    _cut, effects = h.rt.rewind(u2, h.now)  # keeps u2, cuts its answer
    assert h.of(ResetSession, effects) == [ResetSession()]


def test_fork_source_prefers_the_rows_checkpoint() -> None:
    h = Harness()
    _u1, a1 = turn(h, "one", "s1@m1")
    _u2, a2 = turn(h, "two", "s1@m2")
    assert h.rt.fork_source(a1, "s1") == "s1@m1"
    assert h.rt.fork_source(a2, "s1") == "s1@m2"


def test_fork_source_without_checkpoints_is_the_resume_token_at_the_last_row_only() -> None:
    h = Harness()
    u1, a1 = turn(h, "one")
    _u2, a2 = turn(h, "two")
    # The vendor session holds exactly the history up to its last row.
    assert h.rt.fork_source(a2, "s1") == "s1"
    # An earlier row: the vendor session holds rows the fork does not.
    assert h.rt.fork_source(a1, "s1") is None
    assert h.rt.fork_source(u1, "s1") is None
    # No token: nothing to copy.
    assert h.rt.fork_source(a2, None) is None
    assert h.rt.fork_source("nope", "s1") is None


def test_fork_source_is_not_the_token_while_a_later_turn_runs() -> None:
    h = Harness()
    _u1, a1 = turn(h, "one")
    h.send("two")  # running: the vendor session has "two" already
    h.chunk("partial")
    assert h.rt.fork_source(a1, "s1") is None


FORKS = Capabilities(resume=True, fork_session=True)
PLAIN = Capabilities(resume=True)


@pytest.mark.parametrize(
    ("resumed", "offered", "caps", "fed"),
    [
        # A resumed session remembers: never fed.
        (True, False, PLAIN, False),
        (True, False, FORKS, False),
        # Fresh, nothing offered: the host path.
        (False, False, PLAIN, True),
        (False, False, FORKS, True),
        # Offered, and the driver declares it took the copy: the vendor path.
        (False, True, FORKS, False),
        # Offered to a driver that does not declare fork (an old one ignores the field).
        (False, True, PLAIN, True),
        # A stateless driver gets the history with every turn anyway.
        (False, False, Capabilities(needs_history=True), False),
    ],
)
def test_feeds_history(resumed: bool, offered: bool, caps: Capabilities, fed: bool) -> None:
    assert feeds_history(resumed=resumed, offered=offered, capabilities=caps) is fed


def test_an_answer_not_chosen_is_never_a_vendor_source() -> None:
    """The topic's session writes lane 0's answer; when another answer is chosen, lane 0's
    checkpoint is not the history: neither a rewind nor a fork may start from it."""
    h = Harness()
    turn(h, "one", "s1@m1")
    h.send("compare", "start", also=[AnswerTarget(driver="other", model="m2")])
    tid = h.turn
    h.chunk("lane zero")
    h.ev(Checkpoint(turn_id=tid, token="s1@m2"))
    h.take(h.rt.lane_event(1, ChunkEvent(turn_id=tid, chunk=TextDelta(text="one")), h.now))
    h.take(h.rt.lane_event(1, TurnEnd(turn_id=tid, status="success"), h.now))
    h.end()
    zero, one = [r for r in h.rt.snapshot().rows if r.role == "assistant" and r.turn_id == tid]
    assert zero.meta[CHECKPOINT_KEY] == "s1@m2" and not zero.alternative
    # Lane 0 chosen (the default): its checkpoint is the history's end.
    assert h.rt.fork_source(zero.id, "s1") == "s1@m2"
    h.take(h.rt.choose_answer(one.id, h.now))
    assert h.row(zero.id).alternative
    assert h.rt.fork_source(zero.id, "s1") is None
    # The last history row is the chosen answer now: no checkpoint, and not the token's
    # session either (the topic's session was replaced when the choice moved off lane 0).
    assert h.rt.fork_source(one.id, None) is None
    # A rewind keeping the whole multi-answer turn has nothing to cut; one into it (the
    # user row kept) keeps no checkpoint of it.
    user = next(r for r in h.rt.snapshot().rows if r.role == "user" and r.turn_id == tid)
    _cut, effects = h.rt.rewind(user.id, h.now)
    assert h.of(ResetSession, effects) == [ResetSession()]
