"""`hostd.core.transcript`: rebuilding a topic from a snapshot plus events, as windows do."""

from __future__ import annotations

import pytest

from hostd.core.transcript import PartsBuilder, Transcript
from hostd_protocol.client_messages import (
    ApprovalInfo,
    ApprovalRequested,
    ApprovalResolved,
    MessageRow,
    NoticeEvent,
    ReplayEnd,
    Resync,
    RowAppended,
    RowOpened,
    RowRemoved,
    RowUpdated,
    Snapshot,
    StateChanged,
    TopicChanged,
    TopicDeleted,
    TopicInfo,
    TurnEnded,
    TurnStarted,
    UsageUpdated,
)
from hostd_protocol.common import TextDelta, ThinkingDelta, ToolCall, Usage
from hostd_protocol.driver_messages import Redirect, SteerBoundary, SteerInjected
from hostd_protocol.errors import EventGap
from tests.core.runtime_harness import Harness, normalized

TOPIC = TopicInfo(id="T")


def _row(row_id: str, position: int, **kw: object) -> MessageRow:
    fields: dict[str, object] = {"role": "assistant", "status": "pending"}
    fields.update(kw)
    return MessageRow(id=row_id, topic_id="T", position=position, **fields)  # type: ignore[arg-type]


def test_parts_builder_merges_runs() -> None:
    b = PartsBuilder([TextDelta(text="a")])
    for chunk in (TextDelta(text="b"), ThinkingDelta(text="t"), ThinkingDelta(text="u")):
        assert b.append(chunk)
    assert not b.append(TextDelta(text=""))
    b.append(ToolCall(call_id="c", name="n"))
    b.append(TextDelta(text="z"))
    assert b.build() == [
        TextDelta(text="ab"),
        ThinkingDelta(text="tu"),
        ToolCall(call_id="c", name="n"),
        TextDelta(text="z"),
    ]
    assert b.build() == b.build()  # building twice gives the same parts
    assert b.text() == "abz"
    assert not PartsBuilder()


def test_a_row_snapshot_stays_what_it_was_while_the_row_grows() -> None:
    """O(1) snapshots share the builder's append-only lists: later chunks, a closed run, a
    join by `freeze()` or new parts never show in an older snapshot."""
    from hostd.core.rows import LiveRow

    live = LiveRow(_row("a", 1, parts=[ToolCall(call_id="c", name="n")]))
    live.append(TextDelta(text="he"))
    snaps = [live.snapshot()]
    live.append(TextDelta(text="llo"))
    snaps.append(live.snapshot())
    assert live.freeze().parts[-1] == TextDelta(text="hello")  # joins the run in the builder
    live.append(TextDelta(text="!"))
    snaps.append(live.snapshot())
    live.append(ThinkingDelta(text="t"))  # closes the text run
    live.update(status="success")
    snaps.append(live.snapshot())
    live.set_parts([TextDelta(text="edited")])
    tool = ToolCall(call_id="c", name="n")
    assert [s.freeze().parts for s in snaps] == [
        [tool, TextDelta(text="he")],
        [tool, TextDelta(text="hello")],
        [tool, TextDelta(text="hello!")],
        [tool, TextDelta(text="hello!"), ThinkingDelta(text="t")],
    ]
    assert [s.freeze().status for s in snaps] == ["pending"] * 3 + ["success"]
    assert snaps[0].id == "a" and snaps[0].freeze() == snaps[0].freeze()


def test_events_rebuild_rows() -> None:
    t = Transcript(Snapshot(topic=TOPIC, seq=10, rows=[_row("a", 1)]))
    events = [
        RowAppended(topic_id="T", seq=11, row_id="a", chunk=TextDelta(text="he")),
        RowAppended(topic_id="T", seq=12, row_id="a", chunk=TextDelta(text="y")),
        RowOpened(topic_id="T", seq=13, row=_row("q", 1 << 40, role="user", status="queued")),
        RowUpdated(topic_id="T", seq=14, row_id="a", status="success", empty=False),
        RowUpdated(topic_id="T", seq=15, row_id="q", parts=[TextDelta(text="edited")]),
        RowUpdated(topic_id="T", seq=16, row_id="q", status="success", position=2, turn_id="t"),
        RowOpened(topic_id="T", seq=17, row=_row("x", 3)),
        RowRemoved(topic_id="T", seq=18, row_id="x"),
        RowUpdated(topic_id="T", seq=19, row_id="older-than-snapshot", status="error"),
    ]
    assert all(t.apply(e) for e in events)
    assert t.rows() == [
        _row("a", 1, status="success", parts=[TextDelta(text="hey")]),
        _row("q", 2, role="user", status="success", turn_id="t", parts=[TextDelta(text="edited")]),
    ]
    assert t.row("x") is None and t.seq == 19


def test_turn_state_approvals_topic() -> None:
    t = Transcript(Snapshot(topic=TOPIC, seq=0))
    approval = ApprovalInfo(id="ap", topic_id="T", turn_id="t1", tool="bash")
    for event in (
        TurnStarted(topic_id="T", seq=1, turn_id="t1"),
        StateChanged(topic_id="T", seq=2, state="answering"),
        ApprovalRequested(topic_id="T", seq=3, approval=approval),
        UsageUpdated(topic_id="T", seq=4, turn_id="t1", usage=Usage(output_tokens=5)),
        NoticeEvent(topic_id="T", seq=5, code="api_retry", message="retrying"),
    ):
        t.apply(event)
    snap = t.snapshot()
    assert (snap.active_turn_id, snap.topic.state, snap.approvals) == (
        "t1",
        "answering",
        [approval],
    )
    assert t.usage["t1"].output_tokens == 5 and t.notices[0].code == "api_retry"
    t.apply(ApprovalResolved(topic_id="T", seq=6, approval_id="ap", status="allowed"))
    t.apply(TurnEnded(topic_id="T", seq=7, turn_id="t1", status="success"))
    t.apply(TopicChanged(topic_id="T", seq=8, topic=TopicInfo(id="T", title="new")))
    snap = t.snapshot()
    assert (snap.active_turn_id, snap.approvals, snap.topic.title, snap.topic.seq) == (
        "",
        [],
        "new",
        8,
    )
    t.apply(TopicDeleted(topic_id="T", seq=9))
    assert t.deleted and t.state == "closed"


def test_already_included_events_are_skipped() -> None:
    t = Transcript(Snapshot(topic=TOPIC, seq=5, rows=[_row("a", 1)]))
    # Replay overlapping the snapshot: seq <= 5 is already in it.
    assert not t.apply(RowAppended(topic_id="T", seq=5, row_id="a", chunk=TextDelta(text="x")))
    assert not t.apply(ReplayEnd(topic_id="T", seq=5))
    assert t.rows() == [_row("a", 1)] and t.seq == 5


def test_a_gap_raises() -> None:
    t = Transcript(Snapshot(topic=TOPIC, seq=5))
    with pytest.raises(EventGap, match=r"^topic T: missed events 6\.\.7; reattach with since=5$"):
        t.apply(StateChanged(topic_id="T", seq=8, state="idle"))
    with pytest.raises(EventGap, match=r"take a fresh snapshot$"):
        t.apply(Resync(topic_id="T", seq=9, reason="too old"))


def test_truncated_snapshot_stays_truncated() -> None:
    t = Transcript(Snapshot(topic=TOPIC, seq=0, rows=[_row("a", 1), _row("b", 2)]))
    snap = t.snapshot(max_rows=1)
    assert snap.truncated and [r.id for r in snap.rows] == ["b"]
    assert not t.snapshot().truncated


def test_windows_attaching_at_every_step_agree_with_the_runtime() -> None:
    """A window attaching between any two steps of a busy topic ends up equal."""
    h = Harness()
    windows: list[Transcript] = []

    def attach_one_more() -> None:
        for w in windows:
            for event in h.all_events():
                w.apply(event)  # replays what it already has too: skipped by seq
        windows.append(Transcript(h.rt.snapshot()))

    h.send("U1")
    attach_one_more()
    h.chunk("a")
    attach_one_more()
    h.send("U2", "steer")
    attach_one_more()
    h.ev(SteerInjected(turn_id=h.turn, steer_id=h.commands(Redirect)[-1].steer_id))
    attach_one_more()
    h.ev(SteerBoundary(turn_id=h.turn))
    attach_one_more()
    h.chunk("b")
    h.end()
    attach_one_more()
    want = normalized(h.rt.snapshot())
    for w in windows:
        assert normalized(w.snapshot()) == want
