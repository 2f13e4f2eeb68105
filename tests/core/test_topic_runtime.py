"""Unit tests of the topic runtime, one path each (DESIGN.md invariants 1-7).

Every test runs through `Harness`, which also checks seq continuity and that a window that
attached at the start rebuilds exactly the runtime's rows.
"""

from __future__ import annotations

import msgspec
import pytest

from hostd.core.effects import (
    Emit,
    SaveResumeToken,
    SaveRow,
    SaveTopic,
    SaveTurn,
    StartTurn,
    ToDriver,
    TouchRow,
)
from hostd.core.runtime_rows import UNSENT_BASE
from hostd_protocol.client_messages import (
    ApprovalResolved,
    MessageRow,
    NoticeEvent,
    RowAppended,
    RowOpened,
    StateChanged,
    TopicChanged,
    TopicInfo,
    TurnEnded,
    TurnStarted,
    UsageUpdated,
)
from hostd_protocol.common import (
    Capabilities,
    CompactionAnchor,
    TextDelta,
    ThinkingDelta,
    ToolCall,
    ToolResult,
    Usage,
)
from hostd_protocol.driver_messages import (
    ApiRetry,
    ApprovalRequest,
    ApprovalResponse,
    ChunkEvent,
    CompactionComplete,
    CompactionError,
    CompactionStart,
    DriverFatal,
    Interrupt,
    Log,
    Notice,
    ResumeToken,
    SteerBoundary,
    SteerInjected,
    SteerUndelivered,
    TurnEnd,
    UsageEvent,
    Warmed,
)
from hostd_protocol.errors import (
    DriverCrashed,
    InvalidArgument,
    NothingToStop,
    TopicBusy,
)
from tests.core.runtime_harness import INJECT, NO_INJECT, Harness, steer_id

# --- sending and streaming ------------------------------------------------------------------


def test_send_when_idle_starts_a_turn() -> None:
    h = Harness()
    result = h.send("hello", "start")
    assert result.disposition == "started"
    assert result.turn_id == h.turn
    kinds = [type(e).__name__ for e in h.last]
    assert kinds == [
        "SaveRow",  # U1, durable: acknowledged only after commit
        "Emit",  # RowOpened U1
        "SaveTurn",  # status None
        "Emit",  # TurnStarted
        "SaveRow",  # A1 pending
        "Emit",  # RowOpened A1
        "StartTurn",
        "Emit",  # StateChanged(answering)
    ]
    assert all(e.durable for e in h.of(SaveRow))
    assert h.of(SaveTurn) == [SaveTurn(result.turn_id, None)]
    (start,) = h.starts()
    assert start.send.text == "hello" and start.send.message_id == result.row_id
    started = h.events(TurnStarted)[0]
    assert (started.driver, started.model, started.capabilities) == ("scripted", "m1", INJECT)
    assert h.events(StateChanged)[-1].state == "answering"
    assert h.rt.state == "answering"
    assert h.history() == [("user", "success", "hello"), ("assistant", "pending", "")]


def test_chunks_stream_into_the_pending_row_and_merge() -> None:
    h = Harness()
    h.send("q")
    answer = h.events(RowOpened)[-1].row.id
    before = len(h.effects)
    h.chunks(
        ThinkingDelta(text="hm"),
        ThinkingDelta(text="m"),
        TextDelta(text="Hel"),
        TextDelta(text="lo"),
        ToolCall(call_id="c1", name="ls"),
        ToolResult(call_id="c1", output="x"),
        TextDelta(text="!"),
        TextDelta(text=""),  # carries nothing: dropped
    )
    streamed = h.effects[before:]
    # Per chunk: the chunk as is, and a TouchRow (no row copy, no durable write) carrying the
    # row as it was at that chunk.
    assert [type(e) for e in streamed] == [Emit, TouchRow] * 7
    touches = [e.row.freeze() for e in streamed if isinstance(e, TouchRow)]
    assert {r.id for r in touches} == {answer}
    assert touches[3].parts == [ThinkingDelta(text="hmm"), TextDelta(text="Hello")]
    assert h.events(RowAppended, streamed)[2].chunk == TextDelta(text="Hel")
    assert h.row(answer).parts == [
        ThinkingDelta(text="hmm"),
        TextDelta(text="Hello"),
        ToolCall(call_id="c1", name="ls"),
        ToolResult(call_id="c1", output="x"),
        TextDelta(text="!"),
    ]
    assert h.row(answer).status == "pending"
    h.history()  # the window merged the same way


def test_turn_end_success() -> None:
    h = Harness()
    r = h.send("q")
    h.chunk("answer")
    effects = h.end()
    answer = h.events(RowOpened)[1].row.id
    assert h.saved(answer).status == "success"
    assert h.of(SaveTurn, effects) == [SaveTurn(r.turn_id, "success", "", "", "")]
    (ended,) = h.events(TurnEnded)
    assert (ended.status, ended.empty) == ("success", False)
    assert h.events(StateChanged)[-1].state == "idle"
    assert h.rt.state == "idle" and h.rt.active_turn_id is None
    assert h.history() == [("user", "success", "q"), ("assistant", "success", "answer")]


def test_a_turn_without_output_is_marked_empty() -> None:
    h = Harness()
    h.send("q")
    answer = h.events(RowOpened)[1].row.id
    h.end()
    (ended,) = h.events(TurnEnded)
    assert ended.empty and ended.status == "success"
    assert h.row(answer).empty


def test_start_while_busy_is_refused_and_changes_nothing() -> None:
    h = Harness()
    h.send("q")
    seq, snap = h.rt.seq, h.rt.snapshot()
    with pytest.raises(TopicBusy, match=r"^topic T is answering \(turn t1\); send with intent"):
        h.rt.send("again", "start", h.now)
    assert h.rt.seq == seq and h.rt.snapshot() == snap


@pytest.mark.parametrize(
    ("text", "intent", "message"),
    [
        ("  ", "auto", r"^the message is empty; type some text to send$"),
        ("x", "later", r"^unknown send intent 'later'; use one of start, steer, queue, auto$"),
    ],
)
def test_bad_sends_are_refused(text: str, intent: str, message: str) -> None:
    h = Harness()
    with pytest.raises(InvalidArgument, match=message):
        h.rt.send(text, intent, h.now)  # type: ignore[arg-type]
    assert h.rt.seq == 0


def test_client_msg_id_makes_a_resend_idempotent() -> None:
    h = Harness()
    first = h.send("q", client_msg_id="c-1")
    again, effects = h.rt.send("q", "auto", h.now, client_msg_id="c-1")
    assert again == first and effects == []
    # Also after a restart: the key travels in the row's meta.
    h2 = Harness(rows=h.rt.snapshot().rows, ids_from=100)
    again2, effects2 = h2.rt.send("q", "auto", h.now, client_msg_id="c-1")
    assert again2.row_id == first.row_id and effects2 == []


def test_options_reach_the_driver_and_survive_the_queue() -> None:
    h = Harness()
    h.send("one")
    h.send("two", "queue", options={"effort": "high"})
    h.end()
    assert h.starts()[-1].send.options == {"effort": "high"}


def test_history_is_sent_to_stateless_drivers() -> None:
    h = Harness(Capabilities(needs_history=True))
    h.send("one")
    h.chunk("first answer")
    h.end()
    h.send("two")
    history = h.starts()[-1].send.history
    assert [(m.role, m.text) for m in history] == [("user", "one"), ("assistant", "first answer")]


# --- stop -----------------------------------------------------------------------------------


def test_stop_keeps_the_partial_answer_and_hands_back_drafts() -> None:
    h = Harness()
    h.send("U1")
    h.chunk("partial")
    steer_seen = h.send("S1", "steer")
    h.ev(SteerInjected(turn_id=h.turn, steer_id=steer_id(h)))
    steer_unseen = h.send("S2", "steer")
    queued = h.send("Q1", "queue")
    h.ev(ApprovalRequest(turn_id=h.turn, approval_id="ap1", tool="bash"))
    effects = h.call("stop")
    turn = h.turn
    assert h.commands(ApprovalResponse, effects) == [
        ApprovalResponse(approval_id="ap1", allow=False, reason="the turn was stopped")
    ]
    assert h.commands(Interrupt, effects) == [Interrupt(turn_id=turn)]
    assert h.row(steer_unseen.row_id).status == "draft"
    assert h.row(queued.row_id).status == "draft"
    assert h.call("stop") == []  # a second stop is a no-op
    # Chunks until the driver's TurnEnd still land in the answer.
    h.chunk(" more")
    effects = h.end("stopped")
    assert h.of(SaveTurn, effects)[0].resume_text == "U1\n\nS1"
    assert h.history() == [
        ("user", "success", "U1"),
        ("assistant", "stopped", "partial more"),
        ("user", "success", "S1"),  # the model saw it before the stop
        ("user", "draft", "S2"),
        ("user", "draft", "Q1"),
    ]
    assert h.row(steer_seen.row_id).turn_id == turn
    assert h.rt.state == "idle" and len(h.starts()) == 1
    # A send after the stop runs; the drafts stay drafts.
    h.send("next")
    assert h.starts()[-1].send.text == "next"


def test_stop_when_idle_raises() -> None:
    h = Harness()
    with pytest.raises(NothingToStop, match=r"^topic T has no running turn to stop$"):
        h.rt.stop(h.now)


def test_stop_then_driver_lost_ends_stopped_at_once() -> None:
    h = Harness()
    h.send("U1")
    h.chunk("x")
    h.call("stop")
    h.call("driver_lost", DriverCrashed("killed after interrupt grace", driver="scripted"))
    (ended,) = h.events(TurnEnded)
    assert ended.status == "stopped"
    assert h.history()[-1] == ("assistant", "stopped", "x")


def test_messages_sent_after_a_stop_run_after_it() -> None:
    h = Harness()
    h.send("U1")
    h.call("stop")
    assert h.send("U2", "auto").disposition == "queued"  # stopping: not steerable
    h.end("stopped")
    assert h.starts()[-1].send.text == "U2"


def test_undelivered_after_stop_goes_back_as_draft() -> None:
    h = Harness()
    h.send("U1")
    r = h.send("S1", "steer")
    sid = steer_id(h)
    h.ev(SteerInjected(turn_id=h.turn, steer_id=sid))
    h.call("stop")
    h.ev(SteerUndelivered(turn_id=h.turn, steer_ids=[sid]))
    h.end("stopped")
    assert h.row(r.row_id).status == "draft"
    assert len(h.starts()) == 1


# --- errors and the driver ------------------------------------------------------------------


def test_turn_error_keeps_partial_and_pauses_the_queue() -> None:
    h = Harness()
    h.send("U1")
    h.chunk("partial")
    h.send("Q1", "queue")
    effects = h.end("error", error="rate limited")
    (ended,) = h.events(TurnEnded)
    assert (ended.status, ended.error, ended.error_code) == (
        "error",
        "rate limited",
        "driver_turn_error",
    )
    assert h.of(SaveTurn, effects)[0].resume_text == "U1"
    row = h.rt.snapshot().rows[1]
    assert (row.status, row.error, row.parts) == (
        "error",
        "rate limited",
        [TextDelta(text="partial")],
    )
    notice = h.events(NoticeEvent)[-1]
    assert notice.code == "queue_paused" and notice.level == "warning"
    assert h.rt.state == "idle" and len(h.starts()) == 1
    # The next successful turn lets the queue go on.
    h.send("U2")
    h.end()
    assert h.starts()[-1].send.text == "Q1"


def test_driver_lost_ends_the_turn_as_error_with_stderr() -> None:
    h = Harness()
    h.send("U1")
    h.chunk("part")
    h.ev(ApprovalRequest(turn_id=h.turn, approval_id="ap1", tool="bash"))
    err = DriverCrashed(
        "driver scripted exited", driver="scripted", exit_code=1, stderr_tail="boom"
    )
    effects = h.call("driver_lost", err)
    (ended,) = h.events(TurnEnded)
    assert ended.status == "error" and ended.error_code == "driver_crashed"
    assert ended.error == str(err) and "boom" in ended.error
    assert h.history()[-1] == ("assistant", "error", "part")
    # Nobody tells a dead driver about the approval; the windows learn it is over.
    assert h.commands(ApprovalResponse, effects) == []
    assert h.events(ApprovalResolved, effects)[0].status == "cancelled"
    assert h.rt.snapshot().approvals == []
    assert h.call("driver_lost", err) == []  # no turn: nothing to do


def test_driver_fatal_during_a_turn_ends_it() -> None:
    h = Harness()
    h.send("U1")
    h.ev(DriverFatal(code="driver_unavailable", message="no API key"))
    (ended,) = h.events(TurnEnded)
    assert (ended.status, ended.error, ended.error_code) == (
        "error",
        "no API key",
        "driver_unavailable",
    )


def test_stray_driver_events_are_ignored() -> None:
    h = Harness()
    h.send("U1")
    old = h.turn
    h.end()
    h.send("U2")
    seq = h.rt.seq
    for ev in (
        ChunkEvent(turn_id=old, chunk=TextDelta(text="late")),
        ChunkEvent(turn_id="other", chunk=TextDelta(text="x")),
        TurnEnd(turn_id=old, status="success"),
        SteerInjected(turn_id=old, steer_id="s"),
        SteerBoundary(turn_id=old),
        SteerUndelivered(turn_id=old, steer_ids=["s"]),
        SteerBoundary(turn_id=h.turn),  # nothing injected: nothing to roll
        SteerInjected(turn_id=h.turn, steer_id="unknown"),
        ApprovalRequest(turn_id=old, approval_id="x", tool="t"),
        UsageEvent(turn_id=old, usage=Usage()),
        CompactionStart(turn_id=old),
        CompactionComplete(turn_id=old, anchor=CompactionAnchor()),
        CompactionError(turn_id=old),
        Warmed(),
        Log(message="hi"),
    ):
        assert h.ev(ev) == [], ev
    assert h.rt.seq == seq
    h.end()
    assert h.ev(CompactionStart()) == []  # no turn: never compacting
    assert h.rt.state == "idle"


def test_resume_token_usage_retries_and_notices() -> None:
    h = Harness()
    h.send("U1")
    assert h.of(SaveResumeToken, h.ev(ResumeToken(token="tok"))) == [SaveResumeToken("tok")]
    usage = Usage(input_tokens=3)
    assert h.events(UsageUpdated, h.ev(UsageEvent(turn_id=h.turn, usage=usage)))[0].usage == usage
    retry = h.events(
        NoticeEvent,
        h.ev(ApiRetry(attempt=1, max_retries=3, retry_delay_ms=1500, error_status=529)),
    )[0]
    assert retry.message == "the model API request failed (HTTP 529); retry 1 of 3 in 1.5 s"
    notice = h.events(NoticeEvent, h.ev(Notice(code="resume_failed", message="fresh session")))
    assert (notice[0].code, notice[0].level) == ("resume_failed", "warning")


# --- compaction -----------------------------------------------------------------------------


def test_compaction_with_anchor_stores_a_marker() -> None:
    h = Harness()
    h.send("U1")
    h.chunk("before")
    h.ev(CompactionStart(turn_id=h.turn))
    assert h.rt.state == "compacting" and h.events(StateChanged)[-1].state == "compacting"
    anchor = CompactionAnchor(tokens_before=100, tokens_after=10)
    h.ev(CompactionComplete(turn_id=h.turn, anchor=anchor))
    h.ev(CompactionComplete(turn_id=h.turn, anchor=anchor))  # duplicate: harmless
    assert h.rt.state == "answering" and h.events(StateChanged)[-1].state == "answering"
    markers = [r for r in h.rt.snapshot().rows if r.role == "marker"]
    assert len(markers) == 1 and markers[0].anchor == anchor
    h.end()
    assert [r for r, _, _ in h.history()] == ["user", "assistant", "marker"]


def test_compaction_before_any_output_puts_the_answer_after_the_marker() -> None:
    h = Harness()
    h.send("U1")
    h.ev(CompactionStart())  # a blank turn id means the running turn
    h.ev(CompactionComplete(anchor=CompactionAnchor(trigger="auto")))
    h.chunk("answer")
    h.end()
    assert [r for r, _, _ in h.history()] == ["user", "marker", "assistant"]


def test_compaction_without_anchor_just_ends_the_state() -> None:
    h = Harness()
    h.send("U1")
    h.ev(CompactionStart(turn_id=h.turn))
    h.ev(CompactionComplete(turn_id=h.turn))
    assert h.rt.state == "answering"
    assert [r for r, _, _ in h.history()] == ["user", "assistant"]


def test_compaction_error_is_shown_once() -> None:
    h = Harness()
    h.send("U1")
    h.ev(CompactionStart(turn_id=h.turn))
    h.ev(CompactionError(turn_id=h.turn, message="too large"))
    h.ev(CompactionError(turn_id=h.turn, message="too large"))
    (notice,) = h.events(NoticeEvent)
    assert (notice.level, notice.message) == ("error", "compaction failed: too large")
    assert h.rt.state == "answering"


def test_turn_end_ends_compaction() -> None:
    h = Harness()
    h.send("U1")
    h.ev(CompactionStart(turn_id=h.turn))
    h.ev(CompactionStart(turn_id=h.turn))
    h.end()
    assert h.rt.state == "idle"
    states = [e.state for e in h.events(StateChanged)]
    assert states == ["answering", "compacting", "idle"]


# --- topic and snapshot ---------------------------------------------------------------------


def test_rename() -> None:
    h = Harness()
    effects = h.call("rename", "New title")
    assert h.of(SaveTopic, effects)[0].topic.title == "New title"
    changed = h.events(TopicChanged, effects)[0]
    assert changed.topic.title == "New title" and changed.topic.seq == changed.seq
    assert h.window.topic.title == "New title"


def test_snapshot_is_truncated_to_the_newest_rows() -> None:
    h = Harness()
    for n in range(3):
        h.send(f"U{n}")
        h.end()
    snap = h.rt.snapshot(max_rows=4)
    assert snap.truncated and [r.position for r in snap.rows] == [3, 4, 5, 6]
    assert not h.rt.snapshot().truncated
    assert snap.topic.seq == snap.seq == h.rt.seq


def test_restart_continues_positions_and_seq() -> None:
    h = Harness()
    h.send("U1")
    h.send("Q", "queue")
    h.end("error")  # the queue waits
    h2 = Harness(rows=h.rt.snapshot().rows, last_seq=h.rt.seq, ids_from=100)
    h2.send("U2")
    rows = h2.rt.snapshot().rows
    assert [(r.position, r.status) for r in rows[:4]] == [
        (1, "success"),
        (2, "error"),
        (3, "success"),
        (4, "pending"),
    ]
    assert rows[-1].status == "queued" and rows[-1].position == UNSENT_BASE
    assert h2.all_events()[0].seq == h.rt.seq + 1


def test_row_returns_none_once_removed() -> None:
    h = Harness()
    h.send("U1")
    q = h.send("Q", "queue")
    h.call("discard_queued", q.row_id)
    assert h.rt.row(q.row_id) is None


def test_constructor_rows_keep_their_content() -> None:
    row = MessageRow(
        id="r-old",
        topic_id="T",
        role="assistant",
        status="error",
        position=7,
        parts=[TextDelta(text="kept")],
    )
    h = Harness(rows=[row], topic=TopicInfo(id="T", title="t"))
    assert h.rt.row("r-old") == row
    r = h.send("U")
    assert r.position == 8
    assert msgspec.structs.replace(h.rt.snapshot().topic, seq=0) == TopicInfo(
        id="T", title="t", state="answering"
    )
    assert isinstance(h.starts()[0], StartTurn)
    assert h.of(ToDriver) == []


# --- the send table, phase by phase ---------------------------------------------------------


def _in_phase(phase: str) -> Harness:
    h = Harness(NO_INJECT if phase == "busy" else INJECT)
    if phase == "waiting":
        h.send("U1")
        h.send("Q1", "queue")
        h.end("error")  # the queue waits
    elif phase in ("steerable", "busy"):
        h.send("U1")
    return h


@pytest.mark.parametrize(
    ("phase", "intent", "disposition"),
    [
        ("idle", "start", "started"),
        ("idle", "steer", "started"),
        ("idle", "queue", "started"),
        ("idle", "auto", "started"),
        ("waiting", "start", "started"),
        ("waiting", "steer", "started"),
        ("waiting", "queue", "queued"),
        ("waiting", "auto", "started"),
        ("steerable", "start", None),
        ("steerable", "steer", "steered"),
        ("steerable", "queue", "queued"),
        ("steerable", "auto", "steered"),
        ("busy", "start", None),
        ("busy", "steer", "queued"),
        ("busy", "queue", "queued"),
        ("busy", "auto", "queued"),
    ],
)
def test_send_disposition(phase: str, intent: str, disposition: str | None) -> None:
    h = _in_phase(phase)
    if disposition is None:
        with pytest.raises(TopicBusy):
            h.rt.send("X", intent, h.now)  # type: ignore[arg-type]
        return
    result = h.send("X", intent)  # type: ignore[arg-type]
    assert result.disposition == disposition
    row = h.row(result.row_id)
    if disposition == "started":
        assert row.status == "success" and row.turn_id == result.turn_id == h.turn
        assert h.starts()[-1].send.message_id == result.row_id
    else:
        assert row.status == "queued" and result.turn_id == "" and row.position >= UNSENT_BASE


def test_a_resent_start_is_not_refused_as_busy() -> None:
    h = Harness()
    first = h.send("U1", "start", client_msg_id="c1")
    again, effects = h.rt.send("U1", "start", h.now, client_msg_id="c1")
    assert again == first and effects == []


def test_an_error_without_a_reason_still_says_what_happened() -> None:
    h = Harness()
    h.send("U1")
    h.end("error")
    (ended,) = h.events(TurnEnded)
    assert ended.error == (
        "the scripted driver ended the turn with an error but gave no reason; see the daemon log"
    )
    assert ended.error_code == "driver_turn_error"
    assert h.rt.snapshot().rows[-1].error == ended.error


def test_shell_notices_reach_every_window() -> None:
    h = Harness()
    effects = h.call("notice", "store_failed", "cannot save", "error")
    (notice,) = h.events(NoticeEvent, effects)
    assert (notice.code, notice.message, notice.level) == ("store_failed", "cannot save", "error")
    assert h.window.notices == [notice]
