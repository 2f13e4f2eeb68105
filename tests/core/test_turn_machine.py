"""The turn machine (`hostd.core.turn`): the seed pipeline's steps as a sans-IO table.

Example tests walk the steps one effect at a time (a tiny synchronous "shell" answers each
effect); a hypothesis state machine drives whole turns with hooks that return, raise or hang,
delegation, continue, retries, stop and driver crashes at every step, and checks that each
turn ends exactly once and stores its steps once.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from hostd.core.assistants import AssistantConfig, RolesConfig, RoleTarget, Workdir
from hostd.core.hook_api import Continue, Delegate, Finish, StepPrep, UpdateOptions
from hostd.core.turn import (
    INPUTS,
    MAX_CONTINUES,
    MAX_RETRIES,
    TABLE,
    AppendText,
    AskRetry,
    CancelHook,
    CloseSession,
    EndTurn,
    LoadConfig,
    Notify,
    OpenSession,
    Phase,
    PrepareStep,
    RunHook,
    SaveSteps,
    SendToDriver,
    TurnEffect,
    TurnMachine,
)
from hostd_protocol.client_messages import TopicInfo
from hostd_protocol.common import Capabilities, HistoryMessage, TextDelta, ToolCall, ToolResult
from hostd_protocol.driver_messages import Send, TurnEnd
from hostd_protocol.errors import ConfigError, DriverCrashed, HookError

TOPIC = TopicInfo(id="tp1", title="t", driver="scripted", created_at=0.0, updated_at=0.0)
ROLES = RolesConfig()


def send(text: str = "hello", **kw: Any) -> Send:
    return Send(turn_id="t1", message_id="r1", text=text, **kw)


def machine(topic: TopicInfo = TOPIC, **kw: Any) -> TurnMachine:
    return TurnMachine(topic=topic, send=kw.pop("send", send()), workspaces="/ws", now=0.0, **kw)


def kinds(effects: list[TurnEffect]) -> list[str]:
    return [type(e).__name__ for e in effects if not isinstance(e, Notify)]


def only(effects: list[TurnEffect], kind: type) -> Any:
    (found,) = [e for e in effects if isinstance(e, kind)]
    return found


def steps(m: TurnMachine) -> list[tuple[str, str, int]]:
    return [(s.kind, s.status, s.depth) for s in m.record.steps]


def end_of(m: TurnMachine, effects: list[TurnEffect]) -> TurnEnd:
    """The EndTurn's end, fed back as the runtime's TurnEnded."""
    end = only(effects, EndTurn).end
    assert m.phase is Phase.ENDING
    after = m.turn_ended(end.status, end.error, end.error_code, 1.0)
    assert m.phase is Phase.ENDED
    assert len([e for e in after if isinstance(e, SaveSteps)]) == 1
    return end


OK = Capabilities()


def test_the_table_is_total() -> None:
    """Every input has an outcome in every phase (h11: the table is the whole truth)."""
    for phase in Phase:
        assert set(TABLE[phase]) == set(INPUTS), phase


def test_a_plain_turn() -> None:
    m = machine()
    assert m.start(0.0) == [LoadConfig("")]
    eff = m.config_loaded(AssistantConfig(name=""), ROLES, 0.0)
    opened = only(eff, OpenSession)
    assert (opened.key, opened.root) == ("tp1", True)
    assert opened.options.driver == "scripted"
    assert opened.options.working_dir == "/ws/tp1"
    eff = m.session_opened("tp1", OK, 0.0)
    assert only(eff, SendToDriver) == SendToDriver("tp1", send())
    assert m.phase is Phase.DRIVING
    m.chunk(ToolCall(call_id="c1", name="grep"), 0.1)
    m.chunk(ToolResult(call_id="c1", output="x"), 0.2)
    end = end_of(m, m.driver_end(TurnEnd(turn_id="t1", status="success"), 0.3))
    assert end.status == "success"
    assert steps(m) == [("llm", "success", 0), ("tool", "success", 0)]


def test_unknown_role_ends_the_turn_with_a_clear_error() -> None:
    m = machine(topic=TopicInfo(id="tp1", title="", created_at=0.0, updated_at=0.0))
    m.start(0.0)
    eff = m.config_loaded(AssistantConfig(name="a", model="use::coding"), ROLES, 0.0)
    end = end_of(m, eff)
    assert (end.status, end.error_code) == ("error", "unresolved_role")
    assert "coding" in end.error


def test_role_resolution_picks_driver_and_model() -> None:
    m = machine(topic=TopicInfo(id="tp1", title="", created_at=0.0, updated_at=0.0))
    m.start(0.0)
    roles = RolesConfig(system={"coding": RoleTarget(driver="openai", model="m1")})
    eff = m.config_loaded(AssistantConfig(name="a", model="use::coding"), roles, 0.0)
    opts = only(eff, OpenSession).options
    assert (opts.driver, opts.model) == ("openai", "m1")


def test_config_failure_ends_the_turn() -> None:
    m = machine()
    m.start(0.0)
    end = end_of(m, m.lost(ConfigError("a.toml:3: bad"), 0.0))
    assert (end.status, end.error, end.error_code) == ("error", "a.toml:3: bad", "config_error")


def test_create_hook_updates_options() -> None:
    m = machine(send=send(options={"a": 1}))
    m.start(0.0)
    eff = m.config_loaded(AssistantConfig(name="x", create_hook="m:f", options={"b": 2}), ROLES, 0)
    hook = only(eff, RunHook)
    assert hook.kind == "create"
    assert dict(hook.context.options) == {"b": 2, "a": 1}
    eff = m.hook_returned(UpdateOptions({"c": 3}), 0.0)
    only(eff, OpenSession)
    eff = m.session_opened("tp1", OK, 0.0)
    assert dict(only(eff, SendToDriver).send.options) == {"a": 1, "c": 3}
    end_of(m, m.driver_end(TurnEnd(turn_id="t1", status="success"), 0.0))
    assert steps(m) == [("hook_create", "success", 0), ("llm", "success", 0)]


def test_a_hook_that_raises_fails_the_turn() -> None:
    m = machine()
    m.start(0.0)
    m.config_loaded(AssistantConfig(name="x", create_hook="m:f"), ROLES, 0.0)
    end = end_of(m, m.hook_failed(HookError("create hook 'm:f' raised X: y"), 0.0))
    assert (end.status, end.error_code) == ("error", "hook_error")
    assert steps(m) == [("hook_create", "error", 0)]


def test_a_hook_returning_the_wrong_type_fails_the_turn() -> None:
    m = machine()
    m.start(0.0)
    m.config_loaded(AssistantConfig(name="x", create_hook="m:f"), ROLES, 0.0)
    end = end_of(m, m.hook_returned(Finish("no"), 0.0))
    assert end.error == "create hook returned a Finish; expected None or UpdateOptions, Delegate"


def test_stop_cancels_a_running_hook_and_ends_the_turn_stopped() -> None:
    m = machine()
    m.start(0.0)
    m.config_loaded(AssistantConfig(name="x", create_hook="m:hang"), ROLES, 0.0)
    eff = m.stop(0.0)
    assert kinds(eff) == ["CancelHook", "EndTurn"]
    assert end_of(m, eff).status == "stopped"
    assert m.hook_returned(None, 0.0) == []  # a late result is ignored
    assert steps(m) == [("hook_create", "stopped", 0)]


def test_stop_while_driving_waits_for_the_drivers_end() -> None:
    m = machine()
    m.start(0.0)
    m.config_loaded(AssistantConfig(name=""), ROLES, 0.0)
    m.session_opened("tp1", OK, 0.0)
    assert m.stop(0.0) == []
    end = end_of(m, m.driver_end(TurnEnd(turn_id="t1", status="stopped"), 0.0))
    assert end.status == "stopped"


def test_driver_crash_while_driving() -> None:
    m = machine()
    m.start(0.0)
    m.config_loaded(AssistantConfig(name=""), ROLES, 0.0)
    m.session_opened("tp1", OK, 0.0)
    end = end_of(m, m.lost(DriverCrashed("driver exited", driver="scripted"), 0.0))
    assert (end.status, end.error_code) == ("error", "driver_crashed")
    assert steps(m) == [("llm", "error", 0)]


def test_create_hook_delegates_to_a_child() -> None:
    m = machine()
    m.start(0.0)
    m.config_loaded(AssistantConfig(name="boss", create_hook="m:f"), ROLES, 0.0)
    assert kinds(m.hook_returned(Delegate("worker"), 0.0)) == ["LoadConfig"]
    eff = m.config_loaded(AssistantConfig(name="worker", driver="openai"), ROLES, 0.0)
    opened = only(eff, OpenSession)
    assert (opened.key, opened.root, opened.options.driver) == ("tp1/delegate1", False, "openai")
    eff = m.session_opened("tp1/delegate1", Capabilities(needs_history=True), 0.0)
    sent = only(eff, SendToDriver)
    assert (sent.key, sent.send.turn_id, sent.send.text) == ("tp1/delegate1", "t1", "hello")
    assert m.session_key == "tp1/delegate1"  # commands go to the child now
    eff = m.driver_end(TurnEnd(turn_id="t1", status="success"), 0.0)
    end = only(eff, EndTurn).end
    after = m.turn_ended(end.status, end.error, end.error_code, 1.0)
    assert CloseSession("tp1/delegate1") in after
    assert steps(m) == [
        ("hook_create", "success", 0),
        ("delegate", "success", 0),
        ("llm", "success", 1),
    ]


def test_delegation_loops_are_bounded() -> None:
    m = machine()
    m.start(0.0)
    loop = AssistantConfig(name="loop", driver="scripted", create_hook="m:f")
    m.config_loaded(loop, ROLES, 0.0)
    eff: list[TurnEffect] = []
    for _ in range(20):
        eff = m.hook_returned(Delegate("loop"), 0.0)
        if any(isinstance(e, EndTurn) for e in eff):
            break
        m.config_loaded(loop, ROLES, 0.0)
    end = end_of(m, eff)
    assert end.error.startswith("delegation nested deeper than 8 levels (")


def test_next_hook_continue_then_finish() -> None:
    m = machine()
    m.start(0.0)
    m.config_loaded(AssistantConfig(name="x", next_hook="m:n"), ROLES, 0.0)
    m.session_opened("tp1", Capabilities(needs_history=True), 0.0)
    m.chunk(TextDelta(text="first"), 0.0)
    eff = m.driver_end(TurnEnd(turn_id="t1", status="success"), 0.0)
    hook = only(eff, RunHook)
    assert (hook.kind, hook.context.answer, hook.context.status) == ("next", "first", "success")
    eff = m.hook_returned(Continue("more"), 0.0)
    again = only(eff, SendToDriver).send
    assert again.text == "more"
    assert again.history[-2:] == [
        HistoryMessage(role="user", text="hello"),
        HistoryMessage(role="assistant", text="first"),
    ]
    m.driver_end(TurnEnd(turn_id="t1", status="success"), 0.0)
    eff = m.hook_returned(Finish(" done"), 0.0)
    assert kinds(eff) == ["AppendText", "EndTurn"]
    assert only(eff, AppendText) == AppendText(" done")
    end_of(m, eff)
    assert [s[0] for s in steps(m)] == ["llm", "hook_next", "llm", "hook_next"]


def test_endless_continue_is_an_error() -> None:
    m = machine()
    m.start(0.0)
    m.config_loaded(AssistantConfig(name="x", next_hook="m:n"), ROLES, 0.0)
    m.session_opened("tp1", OK, 0.0)
    eff: list[TurnEffect] = []
    for _ in range(MAX_CONTINUES + 1):
        m.driver_end(TurnEnd(turn_id="t1", status="success"), 0.0)
        eff = m.hook_returned(Continue("again"), 0.0)
    end = end_of(m, eff)
    assert end.error.startswith("next hook 'm:n' continued turn t1 more than 8 times")


def test_retries_are_bounded() -> None:
    m = machine(ask_retry=True)
    m.start(0.0)
    m.config_loaded(AssistantConfig(name=""), ROLES, 0.0)
    m.session_opened("tp1", OK, 0.0)
    failed = TurnEnd(turn_id="t1", status="error", error="overloaded", error_code="x")
    for attempt in range(MAX_RETRIES):
        ask = only(m.driver_end(failed, 0.0), AskRetry)
        assert ask.info.attempt == attempt
        assert kinds(m.retry_decided(True, 0.0)) == ["SendToDriver"]
    end = end_of(m, m.driver_end(failed, 0.0))  # the 4th failure is not offered again
    assert end.error == "overloaded"
    assert [s[:2] for s in steps(m)] == [("llm", "error")] * (MAX_RETRIES + 1)


def test_observers_prepare_each_step_and_decide_what_is_sent() -> None:
    m = machine(prepare=True, ask_retry=True, send=send(options={"k": 1}))
    m.start(0.0)
    m.config_loaded(AssistantConfig(name="a", next_hook="m:n"), ROLES, 0.0)
    eff = m.session_opened("tp1", OK, 0.0)
    prep = only(eff, PrepareStep).prep
    assert prep == StepPrep(
        turn_id="t1", text="hello", options={"k": 1}, topic_id="tp1", assistant="a", depth=0
    )
    assert (kinds(eff), m.phase) == (["PrepareStep"], Phase.PREPARING)
    # What the chain returns is what the driver gets (the user row keeps its id and text).
    eff = m.step_prepared(replace(prep.with_options(k=2), text="HELLO"), 0.0)
    sent = only(eff, SendToDriver).send
    assert (sent.text, sent.options, sent.message_id) == ("HELLO", {"k": 2}, "r1")
    assert m.phase is Phase.DRIVING
    # A retry resends the prepared step; a continue is a new step, prepared again.
    failed = TurnEnd(turn_id="t1", status="error", error="overloaded")
    m.driver_end(failed, 0.0)
    assert only(m.retry_decided(True, 0.0), SendToDriver).send == sent
    m.driver_end(TurnEnd(turn_id="t1", status="success"), 0.0)
    again = only(m.hook_returned(Continue("again"), 0.0), PrepareStep).prep
    assert (again.text, again.options) == ("again", {"k": 1})
    # A stop while the observers prepare cancels them and ends the turn.
    eff = m.stop(0.0)
    assert kinds(eff) == ["CancelHook", "EndTurn"]
    assert end_of(m, eff).status == "stopped"
    assert m.step_prepared(again, 0.0) == []  # a late result is ignored


def test_history_window_and_client_transcript_overlap() -> None:
    stored = [HistoryMessage(role="user", text=f"u{i}") for i in range(5)]
    m = machine(
        send=send(history=stored),
        transcript=[HistoryMessage(role="user", text="u4"), HistoryMessage(role="user", text="x")],
    )
    m.start(0.0)
    m.config_loaded(AssistantConfig(name="", history_size=2), ROLES, 0.0)
    eff = m.session_opened("tp1", Capabilities(needs_history=True), 0.0)
    texts = [h.text for h in only(eff, SendToDriver).send.history]
    assert texts[:2] == ["u3", "u4"] and "x" in texts and texts.count("u4") == 1


def test_the_runtime_may_end_the_turn_in_any_phase() -> None:
    m = machine()
    m.start(0.0)
    m.config_loaded(AssistantConfig(name="x", create_hook="m:f"), ROLES, 0.0)
    after = m.turn_ended("stopped", "", "", 0.0)
    assert kinds(after) == ["CancelHook", "SaveSteps"]
    assert m.phase is Phase.ENDED
    for name in INPUTS:  # everything after the end is ignored
        assert TABLE[Phase.ENDED][name].__name__ in ("_ignore", "_on_late_session")


def test_workdir_policies() -> None:
    for workdir, expected in [
        (Workdir(policy="fixed", path="~/src"), "~/src"),
        (Workdir(policy="ephemeral"), "/ws/ephemeral/tp1"),
        (Workdir(), "/ws/tp1"),
    ]:
        m = machine()
        m.start(0.0)
        eff = m.config_loaded(AssistantConfig(name="a", workdir=workdir), ROLES, 0.0)
        assert only(eff, OpenSession).options.working_dir == expected


# --- the whole turn, driven by hypothesis --------------------------------------------------------

ASSISTANTS = {
    "plain": AssistantConfig(name="plain"),
    "create": AssistantConfig(name="create", create_hook="m:c"),
    "next": AssistantConfig(name="next", next_hook="m:n"),
    "both": AssistantConfig(name="both", create_hook="m:c", next_hook="m:n"),
}


@dataclass
class Shell:
    """What is outstanding: the effects the machine waits on."""

    config: list[LoadConfig] = field(default_factory=list)
    hook: RunHook | None = None
    opening: list[OpenSession] = field(default_factory=list)
    preparing: PrepareStep | None = None
    driving: bool = False
    ask: bool = False
    ends: list[TurnEnd] = field(default_factory=list)
    saved: int = 0
    fed_end: bool = False


class WholeTurn(RuleBasedStateMachine):
    """Every input at every step; exactly one end, steps saved once."""

    def __init__(self) -> None:
        super().__init__()
        self.m: TurnMachine | None = None
        self.shell = Shell()

    @precondition(lambda self: self.m is None)
    @rule(root=st.sampled_from(sorted(ASSISTANTS)), ask_retry=st.booleans(), prepare=st.booleans())
    def start(self, root: str, ask_retry: bool, prepare: bool) -> None:
        topic = TopicInfo(
            id="tp1", title="", assistant=root, driver="scripted", created_at=0.0, updated_at=0.0
        )
        self.m = TurnMachine(
            topic=topic,
            send=send(),
            workspaces="/ws",
            now=0.0,
            ask_retry=ask_retry,
            prepare=prepare,
        )
        self.run(self.m.start(0.0))

    def run(self, effects: list[TurnEffect]) -> None:
        s = self.shell
        for e in effects:
            if isinstance(e, LoadConfig):
                s.config.append(e)
            elif isinstance(e, RunHook):
                assert s.hook is None, "two hooks at once"
                s.hook = e
            elif isinstance(e, CancelHook):
                s.hook = None
                s.preparing = None
            elif isinstance(e, PrepareStep):
                assert s.preparing is None and s.hook is None, "two user calls at once"
                s.preparing = e
            elif isinstance(e, OpenSession):
                s.opening.append(e)
            elif isinstance(e, SendToDriver):
                s.driving = True
            elif isinstance(e, AskRetry):
                s.ask = True
            elif isinstance(e, EndTurn):
                s.ends.append(e.end)
                s.driving = False
            elif isinstance(e, SaveSteps):
                s.saved += 1
                assert all(step.status != "running" for step in e.outcome.steps)

    def live(self) -> bool:
        return self.m is not None and not self.m.over

    @precondition(lambda self: self.live() and bool(self.shell.config))
    @rule(name=st.sampled_from(sorted(ASSISTANTS)), fail=st.booleans())
    def answer_config(self, name: str, fail: bool) -> None:
        assert self.m is not None
        want = self.shell.config.pop(0)
        if fail:
            self.run(self.m.lost(ConfigError("bad config"), 1.0))
            return
        assistant = ASSISTANTS[want.assistant] if want.assistant in ASSISTANTS else ASSISTANTS[name]
        self.run(self.m.config_loaded(assistant, ROLES, 1.0))

    @precondition(lambda self: self.live() and self.shell.hook is not None)
    @rule(
        result=st.sampled_from([None, "update", "delegate", "continue", "finish", "raise", "wrong"])
    )
    def answer_hook(self, result: str | None) -> None:
        assert self.m is not None and self.shell.hook is not None
        self.shell.hook = None
        value: object = {
            None: None,
            "update": UpdateOptions({"k": 1}),
            "delegate": Delegate(sorted(ASSISTANTS)[len(self.m.frames) % 4]),
            "continue": Continue("again"),
            "finish": Finish("bye"),
            "wrong": 42,
        }.get(result)
        if result == "raise":
            self.run(self.m.hook_failed(HookError("the hook raised"), 1.0))
        else:
            self.run(self.m.hook_returned(value, 1.0))

    @precondition(lambda self: self.live() and bool(self.shell.opening))
    @rule(ok=st.booleans(), needs_history=st.booleans())
    def answer_open(self, ok: bool, needs_history: bool) -> None:
        assert self.m is not None
        opening = self.shell.opening.pop(0)
        if ok:
            caps = Capabilities(needs_history=needs_history)
            self.run(self.m.session_opened(opening.key, caps, 1.0))
        else:
            self.run(self.m.lost(DriverCrashed("cannot start", driver="d"), 1.0))

    @precondition(lambda self: self.live() and self.shell.preparing is not None)
    @rule(rewrite=st.booleans())
    def answer_prepare(self, rewrite: bool) -> None:
        assert self.m is not None and self.shell.preparing is not None
        prep = self.shell.preparing.prep
        self.shell.preparing = None
        self.run(self.m.step_prepared(replace(prep, text="x") if rewrite else prep, 1.0))

    @precondition(lambda self: self.live() and self.shell.driving)
    @rule(status=st.sampled_from(["success", "error", "stopped"]), tool=st.booleans())
    def driver_ends(self, status: str, tool: bool) -> None:
        assert self.m is not None
        if tool:
            self.run(self.m.chunk(ToolCall(call_id="c", name="t"), 1.0))
        self.shell.driving = False
        self.run(self.m.driver_end(TurnEnd(turn_id="t1", status=status), 1.0))  # type: ignore[arg-type]

    @precondition(lambda self: self.live() and self.shell.ask)
    @rule(retry=st.booleans())
    def answer_retry(self, retry: bool) -> None:
        assert self.m is not None
        self.shell.ask = False
        self.run(self.m.retry_decided(retry, 1.0))

    @precondition(lambda self: self.m is not None)
    @rule()
    def stop(self) -> None:
        assert self.m is not None
        self.run(self.m.stop(1.0))

    @precondition(lambda self: self.m is not None)
    @rule()
    def crash(self) -> None:
        assert self.m is not None
        self.run(self.m.lost(DriverCrashed("driver died", driver="d"), 1.0))

    @precondition(
        lambda self: self.m is not None and bool(self.shell.ends) and not self.shell.fed_end
    )
    @rule()
    def runtime_ends(self) -> None:
        assert self.m is not None
        end = self.shell.ends[0]
        self.shell.fed_end = True
        self.run(self.m.turn_ended(end.status, end.error, end.error_code, 2.0))

    @precondition(lambda self: self.live() and not self.shell.ends)
    @rule()
    def runtime_ends_by_itself(self) -> None:
        """The runtime ends the turn on its own (a deleted topic)."""
        assert self.m is not None
        self.shell.ends.append(TurnEnd(turn_id="t1", status="stopped"))
        self.shell.fed_end = True
        self.run(self.m.turn_ended("stopped", "", "", 2.0))

    @invariant()
    def at_most_one_end(self) -> None:
        assert len(self.shell.ends) <= 1
        assert self.shell.saved <= 1

    @invariant()
    def ended_means_stored(self) -> None:
        if self.m is not None and self.m.phase is Phase.ENDED:
            assert self.shell.saved == 1
            assert len(self.shell.ends) == 1

    @invariant()
    def something_is_always_pending(self) -> None:
        """A live turn always waits on something the shell will answer (no silent hang)."""
        if self.live():
            s = self.shell
            waiting = bool(s.config or s.hook or s.opening or s.preparing or s.driving or s.ask)
            assert waiting, self.m.phase if self.m else None

    def teardown(self) -> None:
        """Whatever happened, a stop and a crash always end the turn."""
        if self.m is None:
            return
        self.run(self.m.stop(3.0))
        self.run(self.m.lost(DriverCrashed("gone", driver="d"), 3.0))
        if self.shell.ends and not self.shell.fed_end:
            end = self.shell.ends[0]
            self.run(self.m.turn_ended(end.status, end.error, end.error_code, 3.0))
        assert self.m.phase is Phase.ENDED
        assert self.shell.saved == 1 and len(self.shell.ends) == 1


WholeTurn.TestCase.settings = settings(max_examples=300, stateful_step_count=30, deadline=None)
TestWholeTurn = WholeTurn.TestCase


@pytest.mark.parametrize("phase", list(Phase))
def test_stop_and_crash_have_an_outcome_in_every_phase(phase: Phase) -> None:
    assert "stop" in TABLE[phase] and "lost" in TABLE[phase]
