"""The turn pipeline over in-memory fakes: every exit path ends the stream exactly once."""

from __future__ import annotations

import argparse
import os
import sys
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio
import trio.lowlevel
import trio.testing

from hostd.core.assistants import (
    AssistantCatalog,
    AssistantConfig,
    RolesConfig,
    RoleTarget,
    Workdir,
)
from hostd.core.turn_record import TurnOutcome, decode_resume
from hostd.shell.hooks import (
    Continue,
    Delegate,
    ErrorInfo,
    Finish,
    ObserverChain,
    TurnObserver,
    UpdateOptions,
)
from hostd.shell.turn_pipeline import (
    CONTINUE_PROMPT,
    DriverCall,
    DriverResult,
    Identity,
    Interrupts,
    PipelineDeps,
    SessionSpec,
    StreamStart,
    TurnRequest,
    continue_request,
    merge_options,
    run_turn,
)
from hostd_protocol.client_messages import TopicInfo
from hostd_protocol.common import Capabilities, HistoryMessage, ToolCall, ToolResult, Usage
from hostd_protocol.errors import DriverCrashed, PermissionDenied

ME = Identity(uid=os.getuid(), profile="work")
HOOKS: dict[str, Callable[..., Any]] = {}


@pytest.fixture(autouse=True)
def hook_module() -> Iterator[None]:
    """Assistant hooks are loaded by name from this module; tests put behaviour in HOOKS."""
    mod = types.ModuleType("pipeline_test_hooks")
    mod.create = lambda ctx: HOOKS["create"](ctx)  # type: ignore[attr-defined]
    mod.next = lambda ctx: HOOKS["next"](ctx)  # type: ignore[attr-defined]
    sys.modules[mod.__name__] = mod
    HOOKS.clear()
    yield
    del sys.modules[mod.__name__]


@dataclass
class Sink:
    """Records everything the pipeline writes, in order."""

    events: list[tuple[str, Any]] = field(default_factory=list)
    history: list[HistoryMessage] | Exception = field(default_factory=list)

    async def start(self, start: StreamStart) -> None:
        self.events.append(("start", start))

    async def end(self, outcome: TurnOutcome) -> None:
        await trio.lowlevel.checkpoint()  # proves the final write is shielded from cancellation
        self.events.append(("end", outcome))

    async def notice(self, turn_id: str, code: str, message: str, level: str) -> None:
        self.events.append(("notice", (code, level)))

    async def store_input(self, turn_id: str, message: HistoryMessage) -> None:
        self.events.append(("store_input", message))

    async def answer(self, turn_id: str, text: str) -> None:
        self.events.append(("answer", text))

    async def load_history(self, topic_id: str, limit: int) -> list[HistoryMessage]:
        if isinstance(self.history, Exception):
            raise self.history
        return list(self.history)

    def kinds(self, *names: str) -> list[str]:
        return [k for k, _ in self.events if not names or k in names]

    @property
    def outcome(self) -> TurnOutcome:
        ends = [v for k, v in self.events if k == "end"]
        assert len(ends) == 1, self.events
        return ends[0]  # type: ignore[no-any-return]


Behaviour = Callable[[DriverCall], Any]


@dataclass
class Driver:
    """A fake driver turn: per driver name, a list of behaviours used in order (last repeats)."""

    script: dict[str, list[Behaviour]] = field(default_factory=dict)
    calls: list[DriverCall] = field(default_factory=list)
    caps: dict[str, Capabilities] = field(default_factory=dict)
    connects: list[SessionSpec] = field(default_factory=list)

    async def connect(self, topic_id: str, spec: SessionSpec) -> Capabilities:
        self.connects.append(spec)
        return self.caps.get(spec.connector.driver, Capabilities())

    async def __call__(self, call: DriverCall) -> DriverResult:
        self.calls.append(call)
        queue = self.script.get(call.session.connector.driver, [ok()])
        behaviour = queue.pop(0) if len(queue) > 1 else queue[0]
        result = behaviour(call)
        if isinstance(result, types.CoroutineType):
            result = await result
        assert isinstance(result, DriverResult)
        return result


def ok(answer: str = "answer") -> Behaviour:
    return lambda call: DriverResult(status="success", answer=answer, output=True)


def fail(error: str = "vendor said no", output: bool = False) -> Behaviour:
    return lambda call: DriverResult(
        status="error", error=error, error_code="driver_turn_error", output=output
    )


def crash(call: DriverCall) -> DriverResult:
    raise DriverCrashed("driver d1 exited", driver="d1", exit_code=1)


def bug(call: DriverCall) -> DriverResult:
    raise RuntimeError("host bug")


async def hang(call: DriverCall) -> DriverResult:
    assert call.report is not None
    await call.report.output()  # some text arrived before the stop
    await trio.sleep_forever()
    raise AssertionError


def assistant(name: str = "main", **kw: Any) -> AssistantConfig:
    kw.setdefault("driver", "d1")
    return AssistantConfig(name=name, **kw)


@dataclass
class Harness:
    tmp: Path
    assistants: dict[str, AssistantConfig] = field(default_factory=lambda: {"main": assistant()})
    roles: RolesConfig = field(default_factory=RolesConfig)
    sink: Sink = field(default_factory=Sink)
    driver: Driver = field(default_factory=Driver)
    observers: ObserverChain = field(default_factory=ObserverChain)
    interrupts: Interrupts = field(default_factory=Interrupts)
    topic: TopicInfo = field(default_factory=lambda: TopicInfo(id="T1", assistant="main"))

    def deps(self) -> PipelineDeps:
        return PipelineDeps(
            sink=self.sink,
            connect=self.driver.connect,
            driver_turn=self.driver,
            assistants=AssistantCatalog(self.assistants),
            roles=self.roles,
            workspaces=self.tmp / "ws",
            observers=self.observers,
            interrupts=self.interrupts,
            clock=trio.current_time,
        )

    def request(self, text: str = "hello", **kw: Any) -> TurnRequest:
        kw.setdefault("message_id", "r1")
        return TurnRequest(topic=self.topic, turn_id="t1", text=text, identity=ME, **kw)

    async def run(self, text: str = "hello", **kw: Any) -> TurnOutcome:
        return await run_turn(self.request(text, **kw), self.deps())


@pytest.fixture
def h(tmp_path: Path) -> Harness:
    return Harness(tmp_path)


def is_dir(path: Path) -> bool:
    return path.is_dir()  # sync helper: async tests must not call blocking pathlib directly


def steps(outcome: TurnOutcome) -> list[tuple[str, str, int]]:
    return [(s.kind, s.status, s.depth) for s in outcome.steps]


# --- exit paths: one start, one end, the right status ------------------------------------------


async def test_success(h: Harness) -> None:
    outcome = await h.run()
    assert h.sink.kinds() == ["start", "end"]
    assert outcome is h.sink.outcome
    assert (outcome.status, outcome.resume, outcome.resume_text) == ("success", None, "")
    assert steps(outcome) == [("llm", "success", 0)]
    start = h.sink.events[0][1]
    assert (start.driver, start.model, start.assistant) == ("d1", "", "main")


async def test_driver_error(h: Harness) -> None:
    h.driver.script["d1"] = [fail()]
    outcome = await h.run()
    assert h.sink.kinds() == ["start", "end"]
    assert (outcome.status, outcome.error, outcome.error_code) == (
        "error",
        "vendor said no",
        "driver_turn_error",
    )
    assert outcome.resume is not None
    assert (outcome.resume.text, outcome.resume.failed_step, outcome.resume.partial) == (
        "hello",
        "llm",
        False,
    )
    assert decode_resume(outcome.resume_text) == outcome.resume


async def test_driver_crash(h: Harness) -> None:
    h.driver.script["d1"] = [crash]
    outcome = await h.run()
    assert h.sink.kinds() == ["start", "end"]
    assert (outcome.status, outcome.error_code) == ("error", "driver_crashed")
    assert outcome.error.startswith("driver d1 exited (exit code 1)")
    assert steps(outcome) == [("llm", "error", 0)]


async def test_stop_through_the_registered_interrupt(h: Harness) -> None:
    h.driver.script["d1"] = [hang]
    result: list[TurnOutcome] = []
    async with trio.open_nursery() as nursery:

        async def go() -> None:
            result.append(await h.run())

        nursery.start_soon(go)
        await trio.testing.wait_all_tasks_blocked()
        assert h.interrupts.interrupt("T1") is True
    (outcome,) = result
    assert h.sink.kinds() == ["start", "end"]
    assert (outcome.status, outcome.error_code) == ("stopped", "")
    assert steps(outcome) == [("llm", "stopped", 0)]
    assert outcome.resume is not None and outcome.resume.partial is True
    assert h.interrupts.interrupt("T1") is False  # unregistered on the way out


async def test_cancellation_is_a_stop_written_before_it_propagates(
    h: Harness, autojump_clock: trio.testing.MockClock
) -> None:
    h.driver.script["d1"] = [hang]
    with trio.move_on_after(1) as scope:
        await h.run()
    assert scope.cancelled_caught
    assert h.sink.kinds() == ["start", "end"]
    assert h.sink.outcome.status == "stopped"
    assert h.sink.outcome.error == "cancelled"


async def test_host_bug_is_written_then_raised(h: Harness) -> None:
    h.driver.script["d1"] = [bug]
    with pytest.raises(RuntimeError, match=r"^host bug$"):
        await h.run()
    assert h.sink.kinds() == ["start", "end"]
    assert (h.sink.outcome.status, h.sink.outcome.error_code) == ("error", "internal_error")
    assert h.sink.outcome.error == "RuntimeError: host bug"


async def test_create_hook_exception(h: Harness) -> None:
    h.assistants["main"] = assistant(create_hook="pipeline_test_hooks:create")
    HOOKS["create"] = lambda ctx: 1 / 0
    outcome = await h.run()
    assert h.sink.kinds() == ["start", "end"]
    assert (outcome.status, outcome.error_code) == ("error", "hook_error")
    assert "ZeroDivisionError" in outcome.error
    assert steps(outcome) == [("hook_create", "error", 0)]
    assert h.driver.calls == []
    assert outcome.resume is not None and outcome.resume.failed_step == "hook_create"


async def test_next_hook_exception_after_a_good_answer(h: Harness) -> None:
    h.assistants["main"] = assistant(next_hook="pipeline_test_hooks:next")
    HOOKS["next"] = lambda ctx: int("not a number")
    outcome = await h.run()
    assert h.sink.kinds() == ["start", "end"]
    assert (outcome.status, outcome.error_code) == ("error", "hook_error")
    assert steps(outcome) == [("llm", "success", 0), ("hook_next", "error", 0)]


async def test_unresolved_role_still_starts_and_ends_the_stream(h: Harness) -> None:
    h.assistants["main"] = AssistantConfig(name="main", model="use::coding")
    outcome = await h.run()
    assert h.sink.kinds() == ["start", "end"]
    assert h.sink.events[0][1] == StreamStart(
        turn_id="t1", driver="", model="", capabilities=Capabilities()
    )
    assert (outcome.status, outcome.error_code) == ("error", "unresolved_role")
    assert "profiles.work.coding" in outcome.error


async def test_permission_refusal_leaves_nothing_behind(h: Harness) -> None:
    intruder = Identity(uid=os.getuid() + 1)
    with pytest.raises(PermissionDenied, match=r"^uid \d+ may not use topic T1"):
        await run_turn(
            TurnRequest(topic=h.topic, turn_id="t1", text="x", identity=intruder), h.deps()
        )
    owned = TopicInfo(id="T2", assistant="main", options={"profile": "home"})
    with pytest.raises(PermissionDenied, match=r"belongs to profile 'home', not 'work'"):
        await run_turn(TurnRequest(topic=owned, turn_id="t1", text="x", identity=ME), h.deps())
    assert h.sink.events == [] and h.driver.connects == [] and not is_dir(h.tmp / "ws")


async def test_final_write_failure_is_logged_not_doubled(
    h: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken_end(outcome: TurnOutcome) -> None:
        h.sink.events.append(("end", outcome))
        raise OSError("disk full")

    h.sink.end = broken_end  # type: ignore[method-assign]
    outcome = await h.run()
    assert outcome.status == "success" and h.sink.kinds("end") == ["end"]
    assert "writing the final state failed" in caplog.text


# --- delegation: children write through the root, never end the stream ------------------------


async def test_create_hook_delegation_runs_a_child_instead_of_the_driver(h: Harness) -> None:
    h.assistants["main"] = assistant(create_hook="pipeline_test_hooks:create")
    h.assistants["helper"] = assistant("helper", driver="d2", options={"who": "helper"})
    HOOKS["create"] = lambda ctx: Delegate("helper", options={"extra": 1})
    outcome = await h.run()
    assert h.sink.kinds() == ["start", "end"]
    assert outcome.status == "success"
    assert [c.session.connector.driver for c in h.driver.calls] == ["d2"]
    assert h.driver.calls[0].depth == 1 and h.driver.calls[0].text == "hello"
    assert h.driver.calls[0].session.options == {"who": "helper", "extra": 1}
    assert steps(outcome) == [
        ("hook_create", "success", 0),
        ("delegate", "success", 0),
        ("llm", "success", 1),
    ]


async def test_failed_child_fails_the_root_once(h: Harness) -> None:
    h.assistants["main"] = assistant(create_hook="pipeline_test_hooks:create")
    h.assistants["helper"] = assistant("helper", driver="d2")
    h.driver.script["d2"] = [fail("child failed")]
    HOOKS["create"] = lambda ctx: Delegate("helper", text="do it")
    outcome = await h.run()
    assert h.sink.kinds() == ["start", "end"]
    assert (outcome.status, outcome.error) == ("error", "child failed")
    assert ("delegate", "error", 0) in steps(outcome)
    assert h.driver.calls[0].text == "do it"


async def test_next_hook_delegation(h: Harness) -> None:
    h.assistants["main"] = assistant(next_hook="pipeline_test_hooks:next")
    h.assistants["reviewer"] = assistant("reviewer", driver="d2")
    HOOKS["next"] = lambda ctx: Delegate("reviewer", text=f"review: {ctx.answer}")
    outcome = await h.run()
    assert h.sink.kinds() == ["start", "end"] and outcome.status == "success"
    assert [(c.session.connector.driver, c.text) for c in h.driver.calls] == [
        ("d1", "hello"),
        ("d2", "review: answer"),
    ]


async def test_delegation_loop_is_bounded(h: Harness) -> None:
    h.assistants["main"] = assistant(create_hook="pipeline_test_hooks:create")
    HOOKS["create"] = lambda ctx: Delegate("main")
    outcome = await h.run()
    assert h.sink.kinds() == ["start", "end"]
    assert (outcome.status, outcome.error_code) == ("error", "hook_error")
    assert "delegation nested deeper than 8 levels" in outcome.error
    assert h.driver.calls == []


# --- next hook: continue and finish -------------------------------------------------------------


async def test_next_hook_continue_then_finish(h: Harness) -> None:
    h.assistants["main"] = assistant(next_hook="pipeline_test_hooks:next")
    h.driver.caps["d1"] = Capabilities(needs_history=True)
    rounds = iter([Continue("and more"), Finish("the end")])
    HOOKS["next"] = lambda ctx: next(rounds)
    outcome = await h.run()
    assert [c.text for c in h.driver.calls] == ["hello", "and more"]
    assert [m.text for m in h.driver.calls[1].history] == ["hello", "answer"]
    assert h.sink.kinds() == ["start", "answer", "end"]
    assert outcome.status == "success"
    assert [s[0] for s in steps(outcome)] == ["llm", "hook_next", "llm", "hook_next"]


async def test_endless_continue_is_an_error(h: Harness) -> None:
    h.assistants["main"] = assistant(next_hook="pipeline_test_hooks:next")
    HOOKS["next"] = lambda ctx: Continue("again")
    outcome = await h.run()
    assert (outcome.status, outcome.error_code) == ("error", "hook_error")
    assert len(h.driver.calls) == 9


# --- options, connector, capabilities -----------------------------------------------------------


def test_merge_options_order_and_metadata() -> None:
    got = merge_options(
        {"mode": "a", "keep": 1, "metadata": {"x": 1, "y": 1}},
        {"mode": "t", "metadata": {"y": 2}},
        {"mode": "s", "keep": None, "metadata": {"z": 3}},
    )
    assert got == {"mode": "s", "metadata": {"x": 1, "y": 2, "z": 3}}


async def test_options_merge_and_create_hook_update(h: Harness) -> None:
    h.assistants["main"] = assistant(
        options={"mode": "assistant", "a": 1}, create_hook="pipeline_test_hooks:create"
    )
    h.topic = TopicInfo(id="T1", assistant="main", options={"mode": "topic", "t": 1})
    seen: list[dict[str, Any]] = []

    def create(ctx: Any) -> UpdateOptions:
        seen.append(dict(ctx.options))
        return UpdateOptions({"hooked": True})

    HOOKS["create"] = create
    await h.run(options={"mode": "send"})
    assert seen == [{"mode": "send", "a": 1, "t": 1}]
    assert h.driver.calls[0].session.options == {"mode": "send", "a": 1, "t": 1, "hooked": True}


async def test_role_connector_and_capabilities_in_stream_start(h: Harness) -> None:
    h.assistants["main"] = AssistantConfig(
        name="main", model="use::coding", system_prompt="be good"
    )
    h.roles = RolesConfig(profiles={"work": {"coding": RoleTarget("d9", "big")}})
    h.driver.caps["d9"] = Capabilities(resume=True, needs_history=True)
    await h.run()
    start = h.sink.events[0][1]
    assert (start.driver, start.model, start.capabilities) == (
        "d9",
        "big",
        Capabilities(resume=True, needs_history=True),
    )
    spec = h.driver.calls[0].session
    assert (spec.connector.tier, spec.system_prompt) == ("profile", "be good")


# --- history ------------------------------------------------------------------------------------


async def test_history_only_for_drivers_that_need_it(h: Harness) -> None:
    h.sink.history = [
        HistoryMessage(role="user", text="q0", id="r0"),
        HistoryMessage(role="assistant", text="a0", id="r0a"),
    ]
    await h.run()
    assert h.driver.calls[0].history == []
    h.driver.caps["d1"] = Capabilities(needs_history=True)
    sent = [
        HistoryMessage(role="system", text="sys"),
        HistoryMessage(role="user", text="q0", id="r0"),
        HistoryMessage(role="assistant", text="a0", id="r0a"),
    ]
    await h.run(history=sent)
    assert h.driver.calls[1].history == sent  # overlap removed, system kept first


async def test_failed_history_load_warns_and_goes_on(h: Harness) -> None:
    h.driver.caps["d1"] = Capabilities(needs_history=True)
    h.sink.history = OSError("database is locked")
    outcome = await h.run(history=[HistoryMessage(role="user", text="from client")])
    assert outcome.status == "success"
    assert h.sink.kinds() == ["start", "notice", "end"]
    assert h.sink.events[1][1] == ("history_unavailable", "warning")
    assert [m.text for m in h.driver.calls[0].history] == ["from client"]


async def test_new_input_is_stored_only_when_not_already_a_row(h: Harness) -> None:
    await h.run()
    assert "store_input" not in h.sink.kinds()
    transcript = [
        HistoryMessage(role="user", text="old"),
        HistoryMessage(role="assistant", text="old answer"),
    ]
    await h.run("new", message_id="", history=transcript)
    stored = [v for k, v in h.sink.events if k == "store_input"]
    assert stored == [HistoryMessage(role="user", text="new")]


# --- working directory --------------------------------------------------------------------------


async def test_per_topic_workdir_is_created(h: Harness) -> None:
    await h.run()
    workdir = Path(h.driver.calls[0].session.working_dir)
    assert workdir == h.tmp / "ws" / "T1" and is_dir(workdir)
    h.topic = TopicInfo(id="T1", assistant="main", working_dir=str(h.tmp / "mine"))
    await h.run()
    assert Path(h.driver.calls[1].session.working_dir) == h.tmp / "mine"
    assert is_dir(h.tmp / "mine")


async def test_fixed_and_ephemeral_workdirs(h: Harness) -> None:
    h.assistants["main"] = assistant(workdir=Workdir("fixed", str(h.tmp / "fixed")))
    await h.run()
    assert h.driver.calls[0].session.working_dir == str(h.tmp / "fixed")
    h.assistants["main"] = assistant(workdir=Workdir("ephemeral"))
    seen: list[bool] = []

    def look(call: DriverCall) -> DriverResult:
        seen.append(is_dir(Path(call.session.working_dir)))
        return DriverResult(status="success")

    h.driver.script["d1"] = [look]
    await h.run()
    ephemeral = Path(h.driver.calls[1].session.working_dir)
    assert seen == [True] and not is_dir(ephemeral)


# --- observers, retries, steps ------------------------------------------------------------------


class Watcher(TurnObserver):
    def __init__(self, retry: bool = False) -> None:
        self.log: list[str] = []
        self.retry = retry

    def turn_start(self, info: Any) -> None:
        self.log.append(f"start {info.driver}")

    def turn_finish(self, info: Any, outcome: TurnOutcome) -> None:
        self.log.append(f"finish {outcome.status}")

    def step(self, info: Any, step: Any) -> None:
        self.log.append(f"step {step.kind} {step.status}")

    def tool(self, info: Any, event: Any) -> None:
        self.log.append(f"tool {type(event).__name__}")

    def usage(self, info: Any, usage: Usage) -> None:
        self.log.append(f"usage {usage.output_tokens}")

    def error(self, info: ErrorInfo) -> bool:
        self.log.append(f"error {info.attempt}")
        return self.retry


async def test_observer_sees_tools_usage_and_a_bounded_retry(h: Harness) -> None:
    watcher = Watcher(retry=True)
    h.observers = ObserverChain([watcher], max_retries=1)

    async def with_tools(call: DriverCall) -> DriverResult:
        assert call.report is not None
        await call.report.tool(ToolCall(call_id="c1", name="Bash"))
        await call.report.tool(ToolResult(call_id="c1", output="ok"))
        await call.report.usage(Usage(output_tokens=7))
        return DriverResult(status="success", output=True)

    h.driver.script["d1"] = [fail(), with_tools]
    outcome = await h.run()
    assert outcome.status == "success"
    assert watcher.log == [
        "start d1",
        "step llm error",
        "error 0",
        "tool ToolCall",
        "step tool success",
        "tool ToolResult",
        "usage 7",
        "step llm success",
        "finish success",
    ]
    # Steps are listed by start: the tool ran inside the second llm step.
    assert [s[:2] for s in steps(outcome)] == [
        ("llm", "error"),
        ("llm", "success"),
        ("tool", "success"),
    ]
    # The retry bound holds: a driver that keeps failing is retried once, then the turn fails.
    h.driver.script["d1"] = [fail()]
    assert (await h.run()).status == "error"


# --- continue -----------------------------------------------------------------------------------


async def test_continue_request_from_resume_data(h: Harness) -> None:
    h.driver.script["d1"] = [fail(output=True)]
    failed = await h.run("write a poem", options={"mode": "x"})
    resume = decode_resume(failed.resume_text)
    assert resume is not None and resume.partial and resume.options == {"mode": "x"}
    again = continue_request(h.topic, "t2", resume, ME)
    assert (again.text, again.options) == (CONTINUE_PROMPT, {"mode": "x"})
    h.driver.script["d1"] = [ok()]
    outcome = await run_turn(again, h.deps())
    assert outcome.status == "success" and outcome.resume is None
    assert "store_input" not in h.sink.kinds()
    # A turn that failed before any output is sent again as it was.
    h.driver.script["d1"] = [fail(output=False)]
    resume2 = decode_resume((await h.run("hi")).resume_text)
    assert resume2 is not None
    assert continue_request(h.topic, "t3", resume2, ME).text == "hi"


# --- the daemon seams (hostd.shell.turn_bridge) -------------------------------------------------------


def cli_run(handler: Callable[..., int], args: argparse.Namespace) -> tuple[int, str]:
    from rich.console import Console

    console = Console(record=True, width=160, color_system=None)
    code = handler(args, console)
    return code, console.export_text()


def write_config(config: Path) -> None:
    (config / "assistants").mkdir(parents=True, exist_ok=True)
    (config / "assistants" / "coder.toml").write_text(
        'model = "use::coding"\nsystem_prompt = "be terse"\nhistory_size = 2\n'
        '[options]\nmode = "assistant"\nkeep = 1\n'
    )
    (config / "roles.toml").write_text('[system]\ncoding = { driver = "fake", model = "big" }\n')


def test_bridge_session_options_from_assistant_and_role(tmp_path: Path) -> None:
    from hostd.shell.turn_bridge import TurnBridge

    write_config(tmp_path / "cfg")
    bridge = TurnBridge(tmp_path / "cfg", tmp_path / "ws")
    topic = TopicInfo(id="T1", assistant="coder", options={"mode": "topic"})
    opts = bridge.session_options(topic)
    assert (opts.driver, opts.model, opts.system_prompt) == ("fake", "big", "be terse")
    assert dict(opts.options) == {"mode": "topic", "keep": 1}
    assert opts.working_dir == str(tmp_path / "ws" / "T1") and is_dir(tmp_path / "ws" / "T1")
    # A topic's own driver wins and needs no roles file.
    plain = bridge.session_options(TopicInfo(id="T2", driver="scripted", model="m"))
    assert (plain.driver, plain.model) == ("scripted", "m")


def test_bridge_prepare_send_windows_and_merges_the_client_transcript(tmp_path: Path) -> None:
    from hostd.shell.turn_bridge import TurnBridge
    from hostd_protocol.client_messages import MessageRow
    from hostd_protocol.driver_messages import Send

    write_config(tmp_path / "cfg")
    bridge = TurnBridge(tmp_path / "cfg", tmp_path / "ws")
    topic = TopicInfo(id="T1", assistant="coder")
    stored = [
        HistoryMessage(role="user", text="q1", id="r1"),
        HistoryMessage(role="assistant", text="a1", id="r2"),
        HistoryMessage(role="user", text="q2", id="r3"),
        HistoryMessage(role="assistant", text="a2", id="r4"),
    ]
    transcript = [HistoryMessage(role="system", text="sys"), *stored]
    bridge.remember_history("T1", "c1", transcript)
    row = MessageRow(
        id="r5",
        topic_id="T1",
        role="user",
        status="success",
        position=5,
        meta={"client_msg_id": "c1"},
    )
    send = Send(turn_id="t", text="q3", message_id="r5", history=stored)
    got = bridge.prepare_send(topic, send, row, Capabilities(needs_history=True))
    # The window (2) would drop q1/a1, but the client sent them: each once, in order.
    assert got.history == transcript
    # Used once; a stateless-less driver gets the Send untouched.
    again = bridge.prepare_send(topic, send, row, Capabilities(needs_history=True))
    assert again.history == stored[2:]
    assert bridge.prepare_send(topic, send, row, Capabilities()) is send


def test_bridge_continue_text() -> None:
    from hostd.shell.store.store import TurnRecord as StoredTurn
    from hostd.shell.turn_bridge import TurnBridge
    from hostd_protocol.client_messages import MessageRow
    from hostd_protocol.common import TextDelta
    from hostd_protocol.errors import NotFound

    bridge = TurnBridge(Path("/nonexistent"), Path("/nonexistent"))
    failed = StoredTurn("t1", "T", "error", "boom", "driver_turn_error", "write a poem")
    assert bridge.continue_text([failed], []) == "write a poem"
    answered = MessageRow(
        id="a",
        topic_id="T",
        role="assistant",
        status="error",
        position=2,
        turn_id="t1",
        parts=[TextDelta(text="Roses")],
    )
    assert bridge.continue_text([failed], [answered]) == CONTINUE_PROMPT
    ok_turn = StoredTurn("t2", "T", "success", "", "", "")
    with pytest.raises(NotFound, match=r"^nothing to continue: its last turn succeeded \("):
        bridge.continue_text([failed, ok_turn], [])
    with pytest.raises(NotFound, match=r"^nothing to continue: the topic has no turn yet"):
        bridge.continue_text([], [])
    # A turn cut by a crash has no resume data: its input is sent again, or if it answered
    # part of it, it is asked to go on.
    crashed = StoredTurn("t3", "T", "error", "daemon died", "driver_crashed", "")
    asked = MessageRow(id="u", topic_id="T", role="user", status="success", position=3,
                       turn_id="t3", parts=[TextDelta(text="tell me more")])
    assert bridge.continue_text([crashed], [asked]) == "tell me more"
    partial = msgspec.structs.replace(answered, turn_id="t3")
    assert bridge.continue_text([crashed], [asked, partial]) == CONTINUE_PROMPT
    with pytest.raises(NotFound, match=r"^nothing to continue: the last turn ended error and "):
        bridge.continue_text([crashed], [])


def test_bridge_counts_usage_from_events(tmp_path: Path) -> None:
    from hostd.shell.turn_bridge import TurnBridge
    from hostd_protocol.client_messages import UsageUpdated

    bridge = TurnBridge(tmp_path, tmp_path)
    bridge.observe(
        "T", UsageUpdated(topic_id="T", seq=1, turn_id="t1", usage=Usage(input_tokens=3))
    )
    bridge.observe(
        "T", UsageUpdated(topic_id="T", seq=2, turn_id="t1", usage=Usage(input_tokens=5))
    )
    bridge.observe(
        "T", UsageUpdated(topic_id="T", seq=3, turn_id="t2", usage=Usage(input_tokens=1))
    )
    assert bridge.usage.topic_usage("T") == Usage(input_tokens=6)


async def test_daemon_runs_assistant_turns_history_and_continue(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """Through the real daemon, socket and runtime (fake driver sessions): an assistant's
    role picks the driver, the client's transcript reaches the driver once, a failed turn is
    continued with ContinueTurn."""
    import shutil
    import tempfile

    from hostd.cli import turn_cmds
    from hostd.client import open_client
    from hostd.shell.paths import Paths
    from hostd_protocol.driver_messages import UsageEvent
    from hostd_protocol.errors import ConfigError, NotFound
    from tests.shell.conftest import start_daemon
    from tests.shell.fakes import FakeSession, FakeSupervisor

    class Recording(FakeSupervisor):
        def __init__(self) -> None:
            super().__init__()
            self.opts: list[Any] = []

        async def open(
            self, topic_id: str, opts: Any, resume_token: str | None = None
        ) -> FakeSession:
            self.opts.append(opts)
            session = await super().open(topic_id, opts, resume_token)
            session.capabilities = Capabilities(needs_history=True)
            return session

    home = Path(tempfile.mkdtemp(prefix="hdp", dir="/tmp"))  # short: AF_UNIX path limit
    try:
        paths = Paths.under(home)
        write_config(paths.config_dir)
        sup = Recording()
        running = await start_daemon(nursery, paths, supervisor=sup)
        with trio.fail_after(10):
            async with open_client(paths) as client:
                with pytest.raises(ConfigError, match=r"no assistant named 'nope'"):
                    await client.create_topic(assistant="nope")
                topic = await client.create_topic(assistant="coder")
                await client.send(topic.id, "auto:1", "start")
                await running.daemon.hosts[topic.id].wait_idle()
                (opts,) = sup.opts
                assert (opts.driver, opts.model, opts.system_prompt) == ("fake", "big", "be terse")

                transcript = [
                    HistoryMessage(role="user", text="from another app"),
                    HistoryMessage(role="assistant", text="its answer"),
                ]
                await client.send(topic.id, "second", "start", history=transcript)
                turn = await sup.turns.receive()
                assert [m.text for m in turn.send.history] == [
                    "auto:1",
                    "auto:1#0 ",
                    "from another app",
                    "its answer",
                ]
                turn.session.emit(
                    UsageEvent(turn_id=turn.turn_id, usage=Usage(input_tokens=5, cost_usd=0.5))
                )
                turn.end("error", "vendor down")
                await running.daemon.hosts[topic.id].wait_idle()
                totals = await client.usage(topic.id)
                assert totals.topics == {topic.id: Usage(input_tokens=5, cost_usd=0.5)}
                assert [t.turn_id for t in totals.turns] == [turn.turn_id]

                result = await client.continue_turn(topic.id)
                assert result.disposition == "started"
                again = await sup.turns.receive()
                assert again.send.text == "second"  # nothing was answered: sent again
                again.end()
                await running.daemon.hosts[topic.id].wait_idle()
                with pytest.raises(NotFound, match=r"^nothing to continue: its last turn succ"):
                    await client.continue_turn(topic.id)

            # The CLI commands, each in a thread with its own trio.run, against this daemon.
            args = argparse.Namespace(home=str(home), topic="")
            code, out = await trio.to_thread.run_sync(cli_run, turn_cmds.run_usage, args)
            assert code == 0 and topic.id in out and "$0.5000" in out
            args = argparse.Namespace(home=str(home), topic=topic.id)
            code, out = await trio.to_thread.run_sync(cli_run, turn_cmds.run_continue, args)
            assert code == 1 and out == ""  # the error is one line on stderr
        await running.stop()
    finally:
        shutil.rmtree(home, ignore_errors=True)


async def test_cancellation_inside_a_driver_nursery_is_still_a_stop(
    h: Harness, autojump_clock: trio.testing.MockClock
) -> None:
    async def nursery_hang(call: DriverCall) -> DriverResult:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.sleep_forever)
            nursery.start_soon(trio.sleep_forever)
        raise AssertionError

    h.driver.script["d1"] = [nursery_hang]
    with trio.move_on_after(1):
        await h.run()
    assert h.sink.kinds() == ["start", "end"] and h.sink.outcome.status == "stopped"
