"""The topic runtime under random interleavings (hypothesis `RuleBasedStateMachine`).

Three parties drive it, synchronously:

- clients: sends of every intent (and idempotent resends), stop, approval answers, queue edits,
  discards and send-now (on any row, valid or not), resume_queue, time passing (tick);
  rewinds, regenerates, edit-and-resends (with and without stop) and forks at any row;
  sends answered by several models (`also`) and choosing one of their answers (any row);
- a well-behaved fake driver that obeys the runtime's effects (StartTurn, Redirect, Interrupt,
  ApprovalResponse): it streams chunks, injects steers in order, reports boundaries, compacts,
  asks for approvals, ends turns (reporting undelivered steers first) or crashes;
- the extra lanes of a multi-answer turn (`StartLane`), each a fake driver of its own that
  streams, asks approvals, ends (any status) or is lost, in any interleaving with lane 0;
- an adversary sending stray driver events (old or unknown turn ids).

Windows attach (snapshot) at random points and apply every later event. The invariants are
DESIGN.md 1-7: seq without gaps, history order, no message lost or duplicated, exactly one
TurnEnded per turn, never stuck compacting, every window equals the snapshot, approvals open
only while a turn runs; for multi-answer turns also: exactly one answer chosen once the turn
ended, and no history sent to a driver holds an answer that was not chosen.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import msgspec
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from hostd.core.effects import (
    DeleteRow,
    Effect,
    Emit,
    ResetSession,
    SaveApproval,
    SaveRow,
    SaveTurn,
    StartLane,
    StartTurn,
    ToDriver,
)
from hostd.core.runtime_rows import UNSENT_STATUSES as UNSENT
from hostd.core.topic_runtime import TopicRuntime
from hostd.core.transcript import Transcript
from hostd_protocol.client_messages import (
    ApprovalInfo,
    MessageRow,
    Rolled,
    RowAppended,
    RowOpened,
    RowsRemoved,
    RowUpdated,
    TopicEvent,
    TopicInfo,
    TurnEnded,
    TurnStarted,
)
from hostd_protocol.common import (
    AnswerTarget,
    Capabilities,
    CompactionAnchor,
    SendIntent,
    TextDelta,
    ThinkingDelta,
    ToolCall,
    ToolResult,
    Usage,
)
from hostd_protocol.driver_messages import (
    ApprovalRequest,
    ApprovalResponse,
    Checkpoint,
    ChunkEvent,
    CompactionComplete,
    CompactionError,
    CompactionStart,
    DriverEvent,
    DriverFatal,
    Interrupt,
    Redirect,
    SteerBoundary,
    SteerInjected,
    SteerUndelivered,
    TurnEnd,
    UsageEvent,
)
from hostd_protocol.errors import (
    AlreadyAnswered,
    DriverCrashed,
    InvalidArgument,
    NotFound,
    NothingToStop,
    TopicBusy,
)
from tests.core.runtime_harness import normalized

TIMEOUT = 30.0
INTENTS: list[SendIntent] = ["start", "steer", "queue", "auto"]
CLIENT_ACTIONS = [
    *["send"] * 3,
    *["steer"] * 3,
    "resend",
    "stop",
    *["stop_answer"] * 2,
    "answer",
    *["queue_op"] * 2,
    "resume_queue",
    "time_passes",
    "attach",
    "detach",
    "restart",
    *["rewind"] * 2,
    "regenerate",
    "edit_resend",
    "fork",
    *["send_multi"] * 3,
    *["choose"] * 3,
]
DRIVER_ACTIONS = [
    *["chunk"] * 3,
    *["inject"] * 3,
    *["boundary"] * 3,
    *["end_turn"] * 2,
    "crash",
    *["compaction"] * 2,
    "approval",
    "checkpoint",
    *["lane_chunk"] * 2,
    *["lane_end"] * 4,
    "lane_lost",
    "lane_approval",
    "lane_usage",
]
TARGETS = [AnswerTarget(driver="b", model="m2"), AnswerTarget(assistant="c")]


class FakeLane:
    """An extra lane's driver session: it runs one turn, then is closed."""

    def __init__(self, turn: str) -> None:
        self.turn = turn
        self.interrupted = False
        self.open_approvals: set[str] = set()


class FakeDriver:
    """A driver that does what the protocol asks, checking that the host does too."""

    def __init__(self) -> None:
        self.turn: str | None = None
        self.pending: list[str] = []  # redirected, not injected
        self.injected: list[str] = []  # injected since the last boundary
        self.interrupted = False
        self.open_approvals: set[str] = set()
        self.sends: Counter[str] = Counter()  # message_id -> Send count
        self.injected_ever: list[str] = []
        #: A multi-answer turn's extra lanes still running, by lane number.
        self.lanes: dict[int, FakeLane] = {}

    def obey(self, effect: Effect) -> None:
        if isinstance(effect, StartLane):
            assert effect.lane not in self.lanes, "a lane was started twice"
            self.lanes[effect.lane] = FakeLane(effect.turn_id)
            return
        if isinstance(effect, ToDriver) and effect.lane:
            lane = self.lanes.get(effect.lane)
            assert lane is not None, f"a command for lane {effect.lane}, which is over"
            cmd = effect.command
            if isinstance(cmd, Interrupt):
                assert cmd.turn_id == lane.turn
                lane.interrupted = True
            elif isinstance(cmd, ApprovalResponse):
                assert cmd.approval_id in lane.open_approvals, cmd
                lane.open_approvals.discard(cmd.approval_id)
            else:  # pragma: no cover
                raise AssertionError(f"unexpected lane command {cmd!r}")
            return
        if isinstance(effect, StartTurn):
            assert self.turn is None, "a turn was started while the driver still ran one"
            self.turn = effect.turn_id
            self.pending, self.injected, self.interrupted = [], [], False
            self.sends[effect.send.message_id] += 1
        elif isinstance(effect, ToDriver):
            cmd = effect.command
            if isinstance(cmd, Redirect):
                assert cmd.turn_id == self.turn
                self.pending.append(cmd.steer_id)
            elif isinstance(cmd, Interrupt):
                assert cmd.turn_id == self.turn
                self.interrupted = True
            elif isinstance(cmd, ApprovalResponse):
                assert cmd.approval_id in self.open_approvals, cmd
                self.open_approvals.discard(cmd.approval_id)
            else:  # pragma: no cover
                raise AssertionError(f"unexpected command {cmd!r}")

    def ended(self) -> None:
        self.turn = None
        self.pending, self.injected = [], []
        self.open_approvals.clear()


class TopicMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.ids = 0
        self.now = 0.0
        self.texts = 0
        self.driver = FakeDriver()
        self.windows: list[Transcript] = []
        self.events: list[TopicEvent] = []
        self.last_seq = 0
        self.accepted: dict[str, int] = {}  # row id -> acceptance order
        self.discarded: set[str] = set()
        self.steer_rows: dict[str, str] = {}  # steer id -> row id
        self.client_ids: dict[str, str] = {}  # client_msg_id -> row id
        self.started: list[str] = []
        self.ended: Counter[str] = Counter()
        self.turn_records: dict[str, list[SaveTurn]] = {}
        self.approval_ids: list[str] = []
        self.old_turns: list[str] = []
        self.stored_approvals: dict[str, ApprovalInfo] = {}  # what the store holds
        self.abandoned: set[str] = set()  # turns running when the daemon restarted
        self.uncertain: set[str] = set()  # rows whose delivery a restart cannot know
        self.picked: set[str] = set()  # rows started explicitly (send when idle, send-now)
        self.stored: dict[str, MessageRow] = {}  # what the store holds (superseded included)
        self.superseded: set[str] = set()  # rows a rewind cut: never seen again
        self.multi: dict[str, int] = {}  # turns answered by several lanes: how many
        self.last_cut: list[str] = []  # the rows the last rewind cut
        self.answers_stopped: set[str] = set()  # answers stopped alone while they ran

    def new_id(self, prefix: str) -> str:
        self.ids += 1
        return f"{prefix}{self.ids}"

    @initialize(inject=st.booleans(), history=st.booleans(), lanes=st.integers(0, 2))
    def setup(self, inject: bool, history: bool, lanes: int) -> None:
        self.caps = Capabilities(inject_steering=inject, needs_history=history)
        self.rt = self.make_runtime([], [], 0)
        self.windows.append(Transcript(self.rt.snapshot()))
        # Most interleavings start with a running turn, a third of them a multi-answer one.
        self.send("auto", with_key=False, also=TARGETS[:lanes])

    def make_runtime(
        self, rows: list[MessageRow], approvals: list[ApprovalInfo], last_seq: int
    ) -> TopicRuntime:
        return TopicRuntime(
            TopicInfo(id="T"),
            rows,
            approvals,
            last_seq,
            new_id=self.new_id,
            wall=lambda: 1.0,
            capabilities=self.caps,
            approval_timeout=TIMEOUT,
        )

    # --- plumbing ---------------------------------------------------------------------------

    def apply(self, effects: list[Effect], queued_before: list[str] | None = None) -> None:
        for eff in effects:
            if isinstance(eff, Emit):
                ev = eff.event
                assert ev.seq == self.last_seq + 1, "seq must grow by one, no gap"
                self.last_seq = ev.seq
                self.events.append(ev)
                for window in self.windows:
                    window.apply(ev)
                if isinstance(ev, TurnStarted):
                    self.started.append(ev.turn_id)
                    if ev.lanes:
                        self.multi[ev.turn_id] = len(ev.lanes)
                elif isinstance(ev, TurnEnded):
                    self.ended[ev.turn_id] += 1
                    self.old_turns.append(ev.turn_id)
                    # Every lane has ended (or ends with the turn); the shell closes them.
                    self.driver.lanes.clear()
                elif isinstance(ev, Rolled):
                    self.check_roll(ev)
                elif isinstance(ev, RowsRemoved):
                    self.superseded |= set(ev.row_ids)
                    self.last_cut = list(ev.row_ids)
                    self._after_cut()
                if isinstance(ev, (RowAppended, RowUpdated)):
                    assert ev.row_id not in self.superseded, "a superseded row came back"
                if isinstance(ev, RowOpened):
                    assert ev.row.id not in self.superseded, "a superseded row came back"
            elif isinstance(eff, SaveRow):
                assert eff.row.id not in self.superseded, "a superseded row was saved again"
                self.stored[eff.row.id] = eff.row
            elif isinstance(eff, DeleteRow):
                self.stored.pop(eff.row_id, None)
            elif isinstance(eff, ResetSession):
                # A rewind's new session may start only from the last kept row's checkpoint
                # (rows placed by the same request, e.g. regenerate's resend, come after the
                # cut: positions never go back).
                # A reset that cut nothing (a multi-answer choice) offers nothing.
                cut = min((self.stored[i].position for i in self.last_cut), default=None)
                kept = [
                    r
                    for r in self.rt.snapshot(10_000).rows
                    if cut is not None
                    and r.position < cut
                    and r.status not in UNSENT
                    and not r.alternative
                ]
                last = kept[-1].meta.get("checkpoint", "") if kept else ""
                assert eff.resume_at == last
                self.last_cut = []
            elif isinstance(eff, SaveTurn):
                self.turn_records.setdefault(eff.turn_id, []).append(eff)
            elif isinstance(eff, SaveApproval):
                self.stored_approvals[eff.approval.id] = eff.approval
            elif isinstance(eff, StartTurn):
                self.check_queue_order(eff)
            if isinstance(eff, StartTurn | StartLane):
                # What a driver is sent never holds an answer that was not chosen.
                for message in eff.send.history:
                    stored = self.stored.get(message.id)
                    assert stored is not None and not stored.alternative, message
            self.driver.obey(eff)

    def check_roll(self, ev: Rolled) -> None:
        closed = self.rt.row(ev.closed_row_id)
        new = self.rt.row(ev.new_row_id)
        assert closed is not None and new is not None
        positions = [closed.position]
        for row_id in ev.steer_row_ids:
            row = self.rt.row(row_id)
            assert row is not None
            positions.append(row.position)
        positions.append(new.position)
        assert positions == sorted(positions), "history must read A1a, U2, A2"
        assert [self.accepted[r] for r in ev.steer_row_ids] == sorted(
            self.accepted[r] for r in ev.steer_row_ids
        ), "steers roll in acceptance order"

    def check_queue_order(self, eff: StartTurn) -> None:
        row_id = eff.send.message_id
        if row_id in self.picked:
            return
        # A queued row starts only when every row still queued was accepted after it.
        for other in self.rt.queued_row_ids():
            assert self.accepted[other] > self.accepted[row_id], "queue order broken"

    def feed(self, event: DriverEvent) -> list[Effect]:
        effects = self.rt.driver_event(event, self.now)
        self.apply(effects)
        return effects

    # --- the two parties, as weighted actions ---------------------------------------------
    #
    # Two rules with weighted action lists rather than one rule per action: hypothesis'
    # swarm testing switches whole rules off per example, and a steer needs several actions
    # in a row (send while busy, inject, boundary) to show anything.

    @rule(action=st.sampled_from(CLIENT_ACTIONS), data=st.data())
    def client(self, action: str, data: st.DataObject) -> None:
        getattr(self, f"client_{action}")(data)

    @precondition(lambda self: self.driver.turn is not None or self.driver.lanes)
    @rule(action=st.sampled_from(DRIVER_ACTIONS), data=st.data())
    def driver_acts(self, action: str, data: st.DataObject) -> None:
        # Lane 0 (the topic's own driver) may have ended while other lanes run, and an
        # ordinary turn has no other lanes: the action goes to whoever still runs.
        lane_action = action.startswith("lane_")
        if lane_action and not self.driver.lanes:
            action = "chunk"
        elif not lane_action and self.driver.turn is None:
            action = "lane_chunk"
        getattr(self, f"driver_{action}")(data)

    # --- clients ----------------------------------------------------------------------------

    def client_send(self, data: st.DataObject) -> None:
        intent = data.draw(st.sampled_from(INTENTS), label="intent")
        self.send(intent, with_key=data.draw(st.booleans(), label="with_key"))

    def client_steer(self, data: st.DataObject) -> None:
        self.send(data.draw(st.sampled_from(["steer", "auto"]), label="intent"), with_key=False)

    def send(
        self, intent: SendIntent, with_key: bool, also: list[AnswerTarget] | None = None
    ) -> None:
        self.texts += 1
        text = f"m{self.texts}"
        key = f"k{self.texts}" if with_key else ""
        busy = self.rt.active_turn_id is not None
        multi = bool(also) or self.rt.active_turn_id in self.multi
        try:
            result, effects = self.rt.send(
                text, intent, self.now, client_msg_id=key, also=also or ()
            )
        except TopicBusy:
            assert busy and intent == "start"
            return
        except InvalidArgument as exc:
            # Several answers are never steered (docs/protocol.md).
            assert busy and multi and intent == "steer", exc
            return
        assert not (busy and multi and intent == "steer")
        if multi and busy:
            assert result.disposition == "queued"
        assert not (busy and intent == "start")
        assert result.row_id not in self.accepted
        self.accepted[result.row_id] = len(self.accepted)
        if key:
            self.client_ids[key] = result.row_id
        for eff in effects:
            if isinstance(eff, ToDriver) and isinstance(eff.command, Redirect):
                self.steer_rows[eff.command.steer_id] = result.row_id
        if result.disposition == "started":
            # Started explicitly (idle topic): it may go ahead of a paused queue.
            assert any(isinstance(e, StartTurn) for e in effects)
            self.picked.add(result.row_id)
        self.apply(effects)

    def client_send_multi(self, data: st.DataObject) -> None:
        intent = data.draw(st.sampled_from(INTENTS), label="intent")
        n = data.draw(st.integers(1, 2), label="lanes")
        self.send(intent, with_key=False, also=TARGETS[:n])

    def client_choose(self, data: st.DataObject) -> None:
        rows = self.rt.snapshot(10_000).rows
        answers = [r.id for r in rows if r.target is not None]
        valid = data.draw(st.sampled_from([True, True, True, False]), label="valid")
        pool = answers[-4:] if answers and valid else []
        others = [] if pool else [*[r.id for r in rows[-2:]], "bogus"]
        row_id = data.draw(st.sampled_from([*pool, *others]), label="row")
        row = self.rt.row(row_id)
        active = self.rt.active_turn_id
        try:
            effects = self.rt.choose_answer(row_id, self.now)
        except NotFound:
            assert row is None
            return
        except InvalidArgument:
            assert row is not None and row.target is None
            return
        except TopicBusy:
            assert row is not None and active is not None and row.turn_id != active
            return
        assert row is not None and row.target is not None
        self.apply(effects)
        chosen = self.rt.row(row_id)
        assert chosen is not None and not chosen.alternative
        siblings = [r for r in self.rt.snapshot(10_000).rows if r.turn_id == row.turn_id]
        assert [r.id for r in siblings if r.target is not None and not r.alternative] == [row_id]

    def client_resend(self, data: st.DataObject) -> None:
        if not self.client_ids:
            return
        key = data.draw(st.sampled_from(sorted(self.client_ids)), label="key")
        result, effects = self.rt.send("again", "auto", self.now, client_msg_id=key)
        assert effects == [] and result.row_id == self.client_ids[key]

    def client_stop(self, data: st.DataObject) -> None:
        running = self.rt.active_turn_id is not None
        try:
            self.apply(self.rt.stop(self.now))
        except NothingToStop:
            assert not running
            return
        assert running

    def client_stop_answer(self, data: st.DataObject) -> None:
        """Stop one answer (protocol 1.2): only its lane is interrupted; a row that is not
        an answer of the running turn is refused with the turn unchanged."""
        rows = self.rt.snapshot(10_000).rows
        active = self.rt.active_turn_id
        ours = [r.id for r in rows if active and r.turn_id == active and r.role == "assistant"]
        row_id = data.draw(st.sampled_from([*ours, *[r.id for r in rows[-2:]], "bogus"]))
        row = self.rt.row(row_id)
        multi = active in self.multi
        before = {n: ln.interrupted for n, ln in self.driver.lanes.items()}
        before[0] = self.driver.interrupted
        stopping = self.rt.stopping
        answer = (
            row is not None
            and row.turn_id == active
            and row.role == "assistant"
            and (multi or row.status == "pending")
        )
        try:
            effects = self.rt.stop(self.now, row_id=row_id)
        except NothingToStop:
            assert active is None
            return
        except NotFound:
            assert row is None
            return
        except InvalidArgument:
            assert row is not None and not answer
            return
        assert row is not None and answer
        self.apply(effects)
        if not multi:  # the one answer: the turn stops
            assert self.rt.stopping
            return
        assert self.rt.stopping == stopping  # the turn goes on
        after = {n: ln.interrupted for n, ln in self.driver.lanes.items()}
        after[0] = self.driver.interrupted
        assert {n: v for n, v in after.items() if n != row.lane} == {
            n: v for n, v in before.items() if n != row.lane
        }
        if row.status == "pending":  # its lane ran: it is interrupted now
            assert after[row.lane]
            self.answers_stopped.add(row_id)

    def client_answer(self, data: st.DataObject) -> None:
        aid = data.draw(st.sampled_from([*self.approval_ids[-4:], "bogus"]), label="approval")
        allow = data.draw(st.booleans(), label="allow")
        open_ids = {a.id for a in self.rt.snapshot().approvals}
        try:
            self.apply(self.rt.answer_approval(aid, allow, self.now, by="w1"))
        except NotFound:
            assert aid == "bogus"
            return
        except AlreadyAnswered:
            assert aid not in open_ids
            return
        assert aid in open_ids

    def _editable(self, row_id: str) -> bool:
        # Drafts, and queued rows that are not steers in flight (those are in the run order).
        row = self.rt.row(row_id)
        if row is None:
            return False
        return row.status == "draft" or row_id in self.rt.queued_row_ids()

    def client_queue_op(self, data: st.DataObject) -> None:
        op = data.draw(st.sampled_from(["edit_queued", "discard_queued", "send_now"]), label="op")
        # Mostly rows that can take it; sometimes any row, or none.
        unsent = [r for r in sorted(self.accepted) if self._editable(r)]
        valid: bool = data.draw(st.booleans(), label="valid")
        pool = unsent if unsent and valid else sorted(self.accepted)
        row_id = data.draw(st.sampled_from([*pool, "bogus"]), label="row")
        ok = self._editable(row_id)
        args: tuple[Any, ...] = (f"edited {row_id}",) if op == "edit_queued" else ()
        try:
            effects = getattr(self.rt, op)(row_id, *args, self.now)
        except (NotFound, InvalidArgument):
            assert not ok
            return
        assert ok
        if op == "discard_queued":
            self.discarded.add(row_id)
        if op == "send_now":
            self.picked.add(row_id)
        self.apply(effects)

    def client_resume_queue(self, data: st.DataObject) -> None:
        self.apply(self.rt.resume_queue(self.now))

    def client_time_passes(self, data: st.DataObject) -> None:
        self.now += data.draw(st.sampled_from([1.0, 10.0, TIMEOUT]), label="dt")
        self.apply(self.rt.tick(self.now))

    def client_attach(self, data: st.DataObject) -> None:
        if len(self.windows) < 3:
            self.windows.append(Transcript(self.rt.snapshot()))

    def client_detach(self, data: st.DataObject) -> None:
        if len(self.windows) > 1:
            self.windows.pop(0)

    def client_restart(self, data: st.DataObject) -> None:
        """The daemon is killed and restarts: the store's reconcile turns pending rows into
        errors; queued and draft rows survive; every window attaches again."""
        snap = self.rt.snapshot(10_000)
        rows = [
            msgspec.structs.replace(r, status="error", error="the daemon restarted")
            if r.status == "pending"
            else r
            for r in snap.rows
        ]
        active = self.rt.active_turn_id
        if active is not None:
            self.abandoned.add(active)
            # A steer the model saw but the host never placed cannot be known after a crash
            # (the vendor session may or may not keep it): it runs again. Not checked.
            turn = self.rt._turn
            assert turn is not None
            self.uncertain |= {s.row_id for s in turn.steers if s.injected}
        self.driver.ended()  # the driver died with the daemon
        self.driver.lanes.clear()
        # Idempotency keys live in their rows' meta: a discarded row's key is forgotten.
        self.client_ids = {k: r for k, r in self.client_ids.items() if r not in self.discarded}
        self.stored = {
            i: msgspec.structs.replace(r, status="error", error="the daemon restarted")
            if r.status == "pending"
            else r
            for i, r in self.stored.items()
        }
        self.rt = self.make_runtime(rows, list(self.stored_approvals.values()), snap.seq)
        self.windows = [Transcript(self.rt.snapshot())]
        self.events = []
        self.apply(self.rt.resume_queue(self.now))

    def _any_row(self, data: st.DataObject) -> str:
        rows = [r.id for r in self.rt.snapshot(10_000).rows]
        return data.draw(st.sampled_from([*rows[-6:], "bogus"]), label="row")

    def _cut(self, effects: list[Effect]) -> set[str]:
        return {
            r for e in effects if isinstance(e, Emit) and isinstance(e.event, RowsRemoved)
            for r in e.event.row_ids
        }

    def _after_cut(self) -> None:
        self.discarded |= {r for r in self.superseded if r in self.accepted}
        self.client_ids = {k: r for k, r in self.client_ids.items() if r not in self.superseded}

    def client_rewind(self, data: st.DataObject) -> None:
        row_id = self._any_row(data)
        include = data.draw(st.booleans(), label="include")
        stop = data.draw(st.booleans(), label="stop")
        row = self.rt.row(row_id)
        busy = self.rt.active_turn_id is not None
        expect = [
            r.id
            for r in self.rt.snapshot(10_000).rows
            if row is not None
            and r.status not in ("queued", "draft")
            and (r.position >= row.position if include else r.position > row.position)
        ]
        try:
            cut, effects = self.rt.rewind(row_id, self.now, include=include, stop=stop)
        except NotFound:
            assert row is None
            return
        except InvalidArgument:
            assert row is not None and row.status in ("queued", "draft")
            return
        except TopicBusy:
            assert busy and not stop
            return
        assert row is not None and row.status not in ("queued", "draft")
        assert cut == ([] if busy else expect)
        self.apply(effects)
        assert set(cut) == self._cut(effects)
        self._after_cut()

    def client_regenerate(self, data: st.DataObject) -> None:
        self._resend(data, None)

    def client_edit_resend(self, data: st.DataObject) -> None:
        self._resend(data, self._any_row(data))

    def _resend(self, data: st.DataObject, row_id: str | None) -> None:
        stop = data.draw(st.booleans(), label="stop")
        busy = self.rt.active_turn_id is not None
        self.texts += 1
        try:
            if row_id is None:
                result, effects = self.rt.regenerate(self.now, stop=stop)
            else:
                result, effects = self.rt.resend(row_id, f"e{self.texts}", self.now, stop=stop)
        except (NotFound, InvalidArgument):
            return
        except TopicBusy:
            assert busy and not stop
            return
        assert result.disposition == ("queued" if busy else "started")
        self.accepted[result.row_id] = len(self.accepted)
        self.picked.add(result.row_id)
        self.apply(effects)
        self._after_cut()

    def client_fork(self, data: st.DataObject) -> None:
        row_id = self._any_row(data)
        before = self.rt.snapshot(10_000)
        try:
            rows = self.rt.fork_rows(row_id)
        except (NotFound, InvalidArgument):
            return
        assert self.rt.snapshot(10_000) == before, "a fork leaves the original untouched"
        target = self.rt.row(row_id)
        assert target is not None and rows[-1].id == row_id
        assert rows == [
            r
            for r in before.rows
            if r.position <= target.position and r.status not in ("queued", "draft", "pending")
        ]
        # The fork's runtime shows exactly those rows to a window.
        fork = TopicRuntime(
            TopicInfo(id="F"), rows, [], 0, new_id=self.new_id, wall=lambda: 1.0
        )
        assert Transcript(fork.snapshot(10_000)).rows() == rows
        # A vendor copy is offered only from the row's own checkpoint, or from the resume
        # token when the fork takes the whole history.
        offered = self.rt.fork_source(row_id, "token")
        placed = [
            r for r in before.rows if r.status not in ("queued", "draft") and not r.alternative
        ]
        assert offered in (
            target.meta.get("checkpoint"),
            "token" if placed[-1].id == row_id else None,
            None,
        )

    # --- the fake driver --------------------------------------------------------------------

    @property
    def turn(self) -> str:
        assert self.driver.turn is not None
        return self.driver.turn

    def driver_chunk(self, data: st.DataObject) -> None:
        kind = data.draw(st.sampled_from(["text", "text", "thinking", "tool"]), label="chunk")
        if kind == "text":
            self.feed(ChunkEvent(turn_id=self.turn, chunk=TextDelta(text="a")))
        elif kind == "thinking":
            self.feed(ChunkEvent(turn_id=self.turn, chunk=ThinkingDelta(text="t")))
        else:
            self.feed(ChunkEvent(turn_id=self.turn, chunk=ToolCall(call_id="c", name="ls")))
            self.feed(ChunkEvent(turn_id=self.turn, chunk=ToolResult(call_id="c", output="o")))

    def driver_checkpoint(self, data: st.DataObject) -> None:
        self.feed(Checkpoint(turn_id=self.turn, token=self.new_id("cp")))

    def driver_inject(self, data: st.DataObject) -> None:
        # A well-behaved driver injects in order, and nothing more once interrupted.
        if not self.driver.pending or self.driver.interrupted:
            return self.driver_chunk(data)
        steer = self.driver.pending.pop(0)
        self.driver.injected.append(steer)
        self.driver.injected_ever.append(steer)
        self.feed(SteerInjected(turn_id=self.turn, steer_id=steer))
        return None

    def driver_boundary(self, data: st.DataObject) -> None:
        if not self.driver.injected:
            return self.driver_chunk(data)
        steers, self.driver.injected = self.driver.injected, []
        named = data.draw(st.booleans(), label="named")
        self.feed(SteerBoundary(turn_id=self.turn, steer_ids=steers if named else []))
        return None

    def driver_end_turn(self, data: st.DataObject) -> None:
        turn = self.turn
        status = data.draw(st.sampled_from(["success", "success", "error"]), label="status")
        if self.driver.pending:
            self.feed(SteerUndelivered(turn_id=turn, steer_ids=list(self.driver.pending)))
        final = "stopped" if self.driver.interrupted else status
        if data.draw(st.booleans(), label="checkpoint"):  # a driver declaring rewind_session
            self.feed(Checkpoint(turn_id=turn, token=self.new_id("cp")))
        self.driver.ended()
        self.feed(TurnEnd(turn_id=turn, status=final, error="boom" if final == "error" else ""))

    def driver_crash(self, data: st.DataObject) -> None:
        self.driver.ended()
        err = DriverCrashed("driver exited", driver="fake", exit_code=1, stderr_tail="trace")
        self.apply(self.rt.driver_lost(err, self.now))

    def driver_compaction(self, data: st.DataObject) -> None:
        what = data.draw(st.sampled_from(["start", "complete", "anchor", "error"]), label="what")
        turn = "" if data.draw(st.booleans(), label="blank") else self.turn
        if what == "start":
            self.feed(CompactionStart(turn_id=turn))
        elif what == "complete":
            self.feed(CompactionComplete(turn_id=turn))
        elif what == "anchor":
            self.feed(CompactionComplete(turn_id=turn, anchor=CompactionAnchor(tokens_before=9)))
        else:
            self.feed(CompactionError(turn_id=turn, message="nope"))

    def driver_approval(self, data: st.DataObject) -> None:
        aid = self.new_id("ap")
        self.approval_ids.append(aid)
        self.driver.open_approvals.add(aid)
        self.feed(ApprovalRequest(turn_id=self.turn, approval_id=aid, tool="bash"))

    # --- the extra lanes' fake drivers -------------------------------------------------------

    def _lane(self, data: st.DataObject) -> tuple[int, FakeLane]:
        n = data.draw(st.sampled_from(sorted(self.driver.lanes)), label="lane")
        return n, self.driver.lanes[n]

    def feed_lane(self, lane: int, event: DriverEvent) -> None:
        self.apply(self.rt.lane_event(lane, event, self.now))

    def driver_lane_chunk(self, data: st.DataObject) -> None:
        n, lane = self._lane(data)
        self.feed_lane(n, ChunkEvent(turn_id=lane.turn, chunk=TextDelta(text=f"l{n}")))

    def driver_lane_end(self, data: st.DataObject) -> None:
        n, lane = self._lane(data)
        status = data.draw(st.sampled_from(["success", "error"]), label="status")
        del self.driver.lanes[n]
        final = "stopped" if lane.interrupted else status
        self.feed_lane(n, TurnEnd(turn_id=lane.turn, status=final))

    def driver_lane_lost(self, data: st.DataObject) -> None:
        n, _ = self._lane(data)
        del self.driver.lanes[n]
        if data.draw(st.booleans(), label="fatal"):
            self.feed_lane(n, DriverFatal(code="driver_crashed", message="lane died"))
        else:
            err = DriverCrashed("lane exited", driver="b", exit_code=1)
            self.apply(self.rt.lane_lost(n, err, self.now))

    def driver_lane_approval(self, data: st.DataObject) -> None:
        n, lane = self._lane(data)
        aid = self.new_id("ap")
        self.approval_ids.append(f"{aid}~{n}")  # the id windows see (unique in the topic)
        lane.open_approvals.add(aid)
        self.feed_lane(n, ApprovalRequest(turn_id=lane.turn, approval_id=aid, tool="bash"))

    def driver_lane_usage(self, data: st.DataObject) -> None:
        n, lane = self._lane(data)
        self.feed_lane(n, UsageEvent(turn_id=lane.turn, usage=Usage(input_tokens=n)))

    @rule(data=st.data())
    def stray(self, data: st.DataObject) -> None:
        """Events naming a turn that is not running change nothing."""
        turn = data.draw(st.sampled_from([*self.old_turns[-3:], "bogus"]))
        kind = data.draw(st.integers(0, 7))
        events: list[DriverEvent] = [
            ChunkEvent(turn_id=turn, chunk=TextDelta(text="stray")),
            TurnEnd(turn_id=turn, status="success"),
            SteerInjected(turn_id=turn, steer_id="s?"),
            SteerBoundary(turn_id=turn),
            SteerUndelivered(turn_id=turn, steer_ids=list(self.steer_rows)[:2]),
            CompactionStart(turn_id=turn),
            ApprovalRequest(turn_id=turn, approval_id="stray", tool="x"),
            UsageEvent(turn_id=turn, usage=Usage()),
        ]
        before = self.rt.snapshot()
        assert self.rt.driver_event(events[kind], self.now) == []
        assert self.rt.lane_event(1, events[kind], self.now) == []
        assert self.rt.snapshot() == before

    # --- invariants -------------------------------------------------------------------------

    @invariant()
    def windows_equal_the_snapshot(self) -> None:
        if not hasattr(self, "rt"):
            return
        snap = normalized(self.rt.snapshot(10_000))
        for window in self.windows:
            assert normalized(window.snapshot()) == snap

    @invariant()
    def windows_equal_the_stored_visible_history(self) -> None:
        if not hasattr(self, "rt"):
            return
        visible = {i: r for i, r in self.stored.items() if not r.superseded}
        for window in self.windows:
            rows = window.rows()
            assert {r.id for r in rows} == set(visible)
            for row in rows:
                stored = visible[row.id]
                assert (stored.status, stored.position, stored.role, stored.alternative) == (
                    row.status,
                    row.position,
                    row.role,
                    row.alternative,
                )
            assert not {r.id for r in rows} & self.superseded

    @invariant()
    def every_message_is_exactly_one_row(self) -> None:
        if not hasattr(self, "rt"):
            return
        rows = self.rt.snapshot(10_000).rows
        user_rows = [r for r in rows if r.role == "user"]
        ids = [r.id for r in user_rows]
        assert len(ids) == len(set(ids))
        assert set(ids) == set(self.accepted) - self.discarded
        for row in user_rows:
            assert row.status in ("success", "queued", "draft"), row
            # Never delivered to the model twice (a Send, or an injected steer).
            injected = sum(1 for s in self.driver.injected_ever if self.steer_rows.get(s) == row.id)
            if row.id not in self.uncertain:
                assert self.driver.sends[row.id] + min(injected, 1) <= 1, row
            if row.status == "success":
                assert row.turn_id and row.position < (1 << 40)
            else:
                assert row.position >= (1 << 40)

    @invariant()
    def history_order(self) -> None:
        if not hasattr(self, "rt"):
            return
        rows = self.rt.snapshot(10_000).rows
        positions = [r.position for r in rows]
        assert len(positions) == len(set(positions))
        # Within a turn, its user messages read in acceptance order, and the turn starts with
        # a user message.
        by_turn: dict[str, list[str]] = {}
        for row in rows:
            if row.turn_id:
                by_turn.setdefault(row.turn_id, []).append(row.id)
        for turn_id, row_ids in by_turn.items():
            first = self.rt.row(row_ids[0])
            assert first is not None and first.role == "user", turn_id
            users = [r for r in row_ids if r in self.accepted]
            assert [self.accepted[r] for r in users] == sorted(self.accepted[r] for r in users)

    @invariant()
    def one_turn_end_per_turn(self) -> None:
        if not hasattr(self, "rt"):
            return
        assert len(self.started) == len(set(self.started))
        active = self.rt.active_turn_id
        for turn_id in self.started:
            records = self.turn_records[turn_id]
            assert records[0].status is None
            if turn_id in self.abandoned:  # the store's reconcile ends it, not the runtime
                assert self.ended[turn_id] == 0 and len(records) == 1
                continue
            assert self.ended[turn_id] == (0 if turn_id == active else 1), turn_id
            if turn_id != active:
                assert len(records) == 2
                end = records[1]
                assert (end.resume_text != "") == (end.status != "success")
        assert set(self.ended) <= set(self.started)

    @invariant()
    def state_is_consistent(self) -> None:
        if not hasattr(self, "rt"):
            return
        snap = self.rt.snapshot(10_000)
        active = self.rt.active_turn_id
        if active is None:
            assert self.rt.state == "idle"
            assert snap.approvals == []
        assert all(a.turn_id == active and a.status == "open" for a in snap.approvals)
        pending = [r for r in snap.rows if r.status == "pending"]
        if active is None:
            assert pending == []
        elif active in self.multi:  # one pending answer per lane still running
            assert all(r.turn_id == active for r in pending)
            running = int(self.driver.turn is not None) + len(self.driver.lanes)
            assert len(pending) == running
        else:
            assert len(pending) == 1 and pending[0].turn_id == active
        # The last StateChanged says the current state.
        states = [e for e in self.events if e.__class__.__name__ == "StateChanged"]
        if states:
            assert msgspec.structs.asdict(states[-1])["state"] == self.rt.state
        # The drivers and the runtime agree on the running turn.
        assert (self.driver.turn is None and not self.driver.lanes) == (active is None)

    @invariant()
    def a_stopped_answer_ends_stopped(self) -> None:
        if not hasattr(self, "rt"):
            return
        for row in self.rt.snapshot(10_000).rows:
            if row.id in self.answers_stopped and row.turn_id not in self.abandoned:
                assert row.status in ("pending", "stopped"), row

    @invariant()
    def one_answer_chosen_per_multi_answer_turn(self) -> None:
        if not hasattr(self, "rt"):
            return
        rows = self.rt.snapshot(10_000).rows
        active = self.rt.active_turn_id
        for turn_id, lanes in self.multi.items():
            if turn_id in self.abandoned or turn_id == active:
                continue
            answers = [r for r in rows if r.turn_id == turn_id and r.target is not None]
            chosen = [r for r in answers if not r.alternative]
            assert len(chosen) <= 1, answers
            if len(answers) == lanes:  # none cut by a rewind: exactly one is chosen
                assert len(chosen) == 1, answers
        # History a next turn would get holds no alternative.
        last = rows[-1].id if rows else ""
        for message in self.rt.history_for(last) if last else []:
            row = self.rt.row(message.id)
            assert row is not None and not row.alternative


TopicMachine.TestCase.settings = settings(
    max_examples=100,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
test_topic_runtime_stateful = TopicMachine.TestCase
