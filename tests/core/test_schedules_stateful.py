"""ScheduleBook under random sequences of time, requests, outcomes and restarts (hypothesis).

The model keeps what a store would hold (every `SaveSchedule`; a kill -9 loses the sends in
flight, possibly after their row was stored) and what the topic holds (the keys of stored
runs). Invariants: within one daemon life a due time is started at most once; across a
restart a due time whose row is stored is started again only when the kill came between
the row and the schedule's save (and then the runtime returns the first row: one row per
due time); runs of one schedule never overlap; an enabled schedule's next due time is after
the last handled one; after `collect(now)` nothing enabled is due at or before `now`.
"""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from hostd.core.schedules import (
    DropSchedule,
    SaveSchedule,
    ScheduleBook,
    ScheduleEffect,
    StartRun,
)
from hostd_protocol.client_messages import (
    MessageRow,
    RowOpened,
    ScheduleInfo,
    SendResult,
    TurnEnded,
)

T0 = 1_800_000_000.0
IDS = ("a", "b")


class Books(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = T0
        self.book = ScheduleBook([], booted_at=T0)
        self.saved: dict[str, ScheduleInfo] = {}
        self.stored_keys: set[str] = set()
        self.key_rows: dict[str, str] = {}
        self.active: dict[str, str] = {}  # schedule -> row of its run still going
        self.unsent: list[StartRun] = []  # StartRuns not yet answered (in the order issued)
        self.rows = 0
        self.life_keys: set[str] = set()  # keys started in this daemon life
        self.resendable: set[str] = set()  # stored rows whose schedule save a kill lost
        for sid, every, missed in (("a", 7.0, "run-once"), ("b", 11.0, "skip")):
            info = ScheduleInfo(id=sid, topic_id="tp", text="x", every_s=every, missed=missed)  # type: ignore[arg-type]
            self._apply(self.book.add(info, self.now)[1])

    def _apply(self, effects: list[ScheduleEffect]) -> None:
        for eff in effects:
            if isinstance(eff, SaveSchedule):
                self.saved[eff.schedule.id] = eff.schedule
            elif isinstance(eff, DropSchedule):
                self.saved.pop(eff.schedule_id, None)
            elif isinstance(eff, StartRun):
                assert eff.schedule_id not in self.active, "a run started over a running one"
                key = eff.client_msg_id
                assert key not in self.life_keys, f"{key} started twice in one life"
                if key in self.stored_keys:
                    assert key in self.resendable, f"{key} was handled and saved, yet rerun"
                self.life_keys.add(key)
                self.unsent.append(eff)

    def _running(self) -> set[str]:
        return set(self.active)

    @rule(dt=st.floats(min_value=0.5, max_value=40))
    def advance_and_collect(self, dt: float) -> None:
        self.now += dt
        self._apply(self.book.collect(self.now, self._running()))
        for info in self.book.schedules():
            if info.enabled and info.id not in {r.schedule_id for r in self.unsent}:
                assert info.next_due is not None and info.next_due > self.now

    @precondition(lambda self: self.unsent)
    @rule(busy=st.booleans())
    def answer_the_oldest_send(self, busy: bool) -> None:
        run = self.unsent.pop(0)
        if busy and run.intent == "start":
            self._apply(self.book.run_refused(run.schedule_id, "topic_busy", "busy", self.now))
            return
        if run.client_msg_id in self.stored_keys:  # the runtime returns the first row
            result = SendResult(row_id=self.key_rows[run.client_msg_id], disposition="started")
        else:
            self.rows += 1
            row_id = f"r{self.rows}"
            self.stored_keys.add(run.client_msg_id)
            self.key_rows[run.client_msg_id] = row_id
            row = MessageRow(
                id=row_id, topic_id="tp", role="user", status="success", position=self.rows,
                turn_id=f"t{row_id}", meta={"client_msg_id": run.client_msg_id},
            )
            self.book.observe("tp", RowOpened(topic_id="tp", seq=self.rows, row=row))
            self.active[run.schedule_id] = row_id
            result = SendResult(row_id=row_id, disposition="started", turn_id=f"t{row_id}")
        self._apply(self.book.run_sent(run.schedule_id, result, self.now))

    @precondition(lambda self: self.active)
    @rule(status=st.sampled_from(["success", "error", "stopped"]), data=st.data())
    def a_run_ends(self, status: str, data: st.DataObject) -> None:
        sid = data.draw(st.sampled_from(sorted(self.active)))
        row_id = self.active.pop(sid)
        self._apply(self.book.observe("tp", TurnEnded(topic_id="tp", seq=0, turn_id=f"t{row_id}", status=status)))  # type: ignore[arg-type]

    @rule(sid=st.sampled_from(IDS), enabled=st.booleans())
    def pause_or_resume(self, sid: str, enabled: bool) -> None:
        self._apply(self.book.set_enabled(sid, enabled, self.now)[1])

    @rule(row_stored=st.booleans(), down=st.floats(min_value=0, max_value=100))
    def kill9_and_restart(self, row_stored: bool, down: float) -> None:
        # The oldest send in flight may have had its row committed before the kill; its
        # schedule's save (which follows the send) never happened.
        if row_stored and self.unsent:
            key = self.unsent[0].client_msg_id
            self.stored_keys.add(key)
            self.key_rows[key] = f"r-lost-{key}"
            self.resendable.add(key)
        self.unsent = []
        self.active = {}  # a restart fails what was running (the store reconciles it)
        self.life_keys = set()
        self.now += down
        self.book = ScheduleBook(self.saved.values(), booted_at=self.now)

    @invariant()
    def handled_due_times_move_forward(self) -> None:
        for info in self.book.schedules():
            if info.last_due is not None and info.next_due is not None:
                assert info.next_due > info.last_due

    @invariant()
    def saved_state_matches_the_book(self) -> None:
        for info in self.book.schedules():
            if info.id not in {r.schedule_id for r in self.unsent}:
                saved = self.saved[info.id]
                assert (saved.last_due, saved.enabled) == (info.last_due, info.enabled)


Books.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
TestBooks = Books.TestCase
