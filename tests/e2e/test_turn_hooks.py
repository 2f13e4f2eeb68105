"""Assistant hooks, delegation, steps and observers through the daemon: `serve_daemon` in this
process (real socket, store, supervisor and scripted driver processes), so the hooks can live
in this module."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import trio

from hostd.client import open_client
from hostd.shell.daemon import Daemon, DaemonConfig, serve_daemon
from hostd.shell.drivers.registry import DriverRegistry
from hostd.shell.hooks import (
    Continue,
    Delegate,
    Finish,
    HookContext,
    ObserverChain,
    StepPrep,
    TurnObserver,
)
from hostd.shell.paths import Paths
from hostd_protocol.client_messages import Snapshot, TopicEvent, TurnEnded
from hostd_protocol.common import TextDelta
from hostd_scripted.spec import SPEC as SCRIPTED

pytestmark = pytest.mark.e2e

HERE = "tests.e2e.test_turn_hooks"

ASSISTANTS = {
    "picker": f"""
driver = "scripted"
[options]
scenario = "/error the hook did not pick"
[hooks]
create = "{HERE}:pick_scenario"
""",
    "boss": f"""
driver = "scripted"
[options]
scenario = "/error the boss's own driver must not run"
[hooks]
create = "{HERE}:delegate_to_worker"
""",
    "worker": """
driver = "scripted"
[options]
scenario = "/text the worker answered"
""",
    "closer": f"""
driver = "scripted"
[options]
scenario = "/text draft"
[hooks]
next = "{HERE}:finish"
""",
    "broken": f"""
driver = "scripted"
[options]
scenario = "/text never"
[hooks]
create = "{HERE}:explode"
""",
    "two_steps": f"""
driver = "scripted"
[hooks]
next = "{HERE}:continue_once"
""",
    "broken_next": f"""
driver = "scripted"
[options]
scenario = "/text first"
[hooks]
next = "{HERE}:explode"
""",
}


def pick_scenario(ctx: HookContext) -> dict[str, Any]:
    return {"scenario": f"/text picked for {ctx.text}"}


async def delegate_to_worker(ctx: HookContext) -> Delegate:
    await trio.lowlevel.checkpoint()
    return Delegate(assistant="worker")


def finish(ctx: HookContext) -> Finish:
    return Finish(response=f" and finished after {ctx.answer!r}")


def continue_once(ctx: HookContext) -> Continue | None:
    return Continue("second") if ctx.text != "second" else None


def explode(ctx: HookContext) -> None:
    raise RuntimeError("the hook exploded")


class Recorder(TurnObserver):
    name = "recorder"

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.finished = trio.Event()

    def turn_start(self, info: Any) -> None:
        self.calls.append(f"start:{info.assistant}")

    def step(self, info: Any, step: Any) -> None:
        self.calls.append(f"step:{step.kind}:{step.status}")

    async def turn_finish(self, info: Any, outcome: Any) -> None:
        self.calls.append(f"finish:{outcome.status}")
        self.finished.set()


@pytest.fixture
async def daemon(home: Path, nursery: trio.Nursery) -> AsyncIterator[Daemon]:
    paths = Paths.under(home)
    folder = paths.config_dir / "assistants"
    folder.mkdir(parents=True)
    for name, text in ASSISTANTS.items():
        (folder / f"{name}.toml").write_text(text)
    done = trio.Event()

    async def run(task_status: trio.TaskStatus[Daemon] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            await serve_daemon(
                paths,
                config=DaemonConfig(default_driver="scripted"),
                registry=DriverRegistry.from_specs(SCRIPTED),
                task_status=task_status,
            )
        finally:
            done.set()

    with trio.fail_after(20):
        d: Daemon = await nursery.start(run)
    yield d
    d.request_shutdown()
    with trio.fail_after(20):
        await done.wait()


async def one_turn(d: Daemon, assistant: str, text: str = "hello") -> tuple[TurnEnded, str]:
    """Create a topic with `assistant`, send `text`, follow it to its end; the turn's end
    and the answer text. Asserts the turn ended exactly once."""
    async with open_client(d.paths) as c:
        topic = await c.create_topic(title=assistant, assistant=assistant)
        async with c.attach(topic.id) as sub:
            sent = await c.send(topic.id, text)
            end: TurnEnded | None = None
            async for item in sub:
                if isinstance(item, TurnEnded) and item.turn_id == sent.turn_id:
                    end = item
                    break
            assert end is not None
            rows = sub.transcript.rows()
        host = d.hosts[topic.id]
        await host.wait_idle()
        await d.writer.wait_committed()
        events: list[TopicEvent | Snapshot] = list(host.stream.replay_since(0) or [])
        ends = [e for e in events if isinstance(e, TurnEnded)]
        assert [e.turn_id for e in ends] == [sent.turn_id]
        answer = "".join(
            p.text for r in rows if r.role == "assistant" for p in r.parts
            if isinstance(p, TextDelta)
        )
        stored = await d.reader.run(d.reader.sync.load_turns, topic.id)
        assert [(t.id, t.status) for t in stored] == [(sent.turn_id, end.status)]
        return end, answer


async def steps_of(d: Daemon, turn_id: str) -> list[tuple[str, str, int]]:
    rows = await d.reader.run(d.reader.sync.load_steps, turn_id)
    return [(s.kind, s.status, s.data["depth"]) for s in rows]


async def test_create_hook_changes_options(daemon: Daemon) -> None:
    recorder = Recorder()
    daemon.turns.observers = ObserverChain([recorder])
    with trio.fail_after(30):
        end, answer = await one_turn(daemon, "picker", "hello")
        assert end.status == "success", end.error
        assert answer == "picked for hello"
        assert await steps_of(daemon, end.turn_id) == [
            ("hook_create", "success", 0),
            ("llm", "success", 0),
        ]
        await recorder.finished.wait()
    assert recorder.calls == [
        "start:picker",
        "step:hook_create:success",
        "step:llm:success",
        "finish:success",
    ]


async def test_create_hook_delegates_to_a_child(daemon: Daemon) -> None:
    with trio.fail_after(30):
        end, answer = await one_turn(daemon, "boss")
        assert end.status == "success", end.error
        assert answer == "the worker answered"
        assert await steps_of(daemon, end.turn_id) == [
            ("hook_create", "success", 0),
            ("delegate", "success", 0),
            ("llm", "success", 1),
        ]
        # The boss's own driver never ran: its topic has no session.
        (topic_id,) = daemon.hosts
        assert daemon.supervisor.session(topic_id) is None


async def test_next_hook_finishes_with_a_custom_response(daemon: Daemon) -> None:
    with trio.fail_after(30):
        end, answer = await one_turn(daemon, "closer")
        assert end.status == "success", end.error
        assert answer == "draft and finished after 'draft'"
        assert await steps_of(daemon, end.turn_id) == [
            ("llm", "success", 0),
            ("hook_next", "success", 0),
        ]


@pytest.mark.parametrize(
    ("assistant", "steps"),
    [
        ("broken", [("hook_create", "error", 0)]),
        ("broken_next", [("llm", "success", 0), ("hook_next", "error", 0)]),
    ],
)
async def test_a_hook_that_raises_ends_the_turn_as_error(
    daemon: Daemon, assistant: str, steps: list[tuple[str, str, int]]
) -> None:
    with trio.fail_after(30):
        end, _answer = await one_turn(daemon, assistant)
        assert end.status == "error"
        assert end.error_code == "hook_error"
        assert end.error == (
            f"create hook '{HERE}:explode' raised RuntimeError: the hook exploded"
            if assistant == "broken"
            else f"next hook '{HERE}:explode' raised RuntimeError: the hook exploded"
        )
        assert await steps_of(daemon, end.turn_id) == steps


async def test_a_working_dir_that_is_a_file_fails_the_turn_not_the_topic(
    daemon: Daemon, home: Path
) -> None:
    """An OSError while a turn is set up (here: the working directory is a file) ends that
    turn as `error` with a message naming the directory, and the topic stays usable.
    (create-topic refuses a path that is a file already; here it becomes one afterwards.)"""
    not_a_dir = home / "not-a-dir"
    with trio.fail_after(30):
        async with open_client(daemon.paths) as c:
            not_a_dir.mkdir()  # a directory when the topic is made (a missing one is refused)
            topic = await c.create_topic(title="t", working_dir=str(not_a_dir))
            not_a_dir.rmdir()
            not_a_dir.write_text("a file")
            async with c.attach(topic.id) as sub:
                ends: list[TurnEnded] = []
                for _ in range(2):  # the second send proves the topic is still usable
                    sent = await c.send(topic.id, "hello")
                    async for item in sub:
                        if isinstance(item, TurnEnded) and item.turn_id == sent.turn_id:
                            ends.append(item)
                            break
            for end in ends:
                assert end.status == "error"
                assert end.error_code == "config_error"
                assert end.error.startswith(f"working directory {str(not_a_dir)!r} ")
            await c.rename_topic(topic.id, "still usable")
            rows = sub.transcript.rows()
        assert [r.status for r in rows if r.role == "assistant"] == ["error", "error"]
        host = daemon.hosts[topic.id]
        assert host.runtime.active_turn_id is None


class Shouter(TurnObserver):
    """Rewrites the text each step sends."""

    name = "shouter"

    def __init__(self) -> None:
        self.seen: list[StepPrep] = []

    def prepare_step(self, prep: StepPrep) -> StepPrep:
        self.seen.append(prep)
        return replace(prep, text=prep.text.upper())


class Scenarist(TurnObserver):
    """Sets a per-step option (the scripted driver plays `scenario` with the step's text)."""

    name = "scenarist"

    async def prepare_step(self, prep: StepPrep) -> StepPrep:
        await trio.lowlevel.checkpoint()
        return prep.with_options(scenario=f"/text [{prep.text}]")


async def test_observers_prepare_every_step_the_driver_gets(daemon: Daemon) -> None:
    """`prepare_step` runs before each step (the first and a continue), in chain order, and
    what it returns is what the driver answers; the stored user row keeps the user's text."""
    shouter = Shouter()
    daemon.turns.observers = ObserverChain([shouter, Scenarist()])
    with trio.fail_after(30):
        end, answer = await one_turn(daemon, "two_steps", "hello")
        assert end.status == "success", end.error
        assert answer == "[HELLO][SECOND]"
        async with open_client(daemon.paths) as c:
            (topic_id,) = daemon.hosts
            rows = (await c.history(topic_id)).rows
    assert [(p.text, p.assistant, p.depth) for p in shouter.seen] == [
        ("hello", "two_steps", 0),
        ("second", "two_steps", 0),
    ]
    assert [p.text for r in rows if r.role == "user" for p in r.parts] == ["hello"]
    assert await steps_of(daemon, end.turn_id) == [
        ("llm", "success", 0),
        ("hook_next", "success", 0),
        ("llm", "success", 0),
        ("hook_next", "success", 0),
    ]


class Hanger(TurnObserver):
    """A `prepare_step` that never returns."""

    def __init__(self) -> None:
        self.started = trio.Event()

    async def prepare_step(self, prep: StepPrep) -> StepPrep:
        self.started.set()
        await trio.sleep_forever()
        raise AssertionError("unreachable")


async def test_a_hanging_prepare_step_never_wedges_a_turn(
    daemon: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stop cancels it; past `PREPARE_STEP_TIMEOUT` the step goes unprepared."""
    import hostd.shell.turns

    hanger = Hanger()
    daemon.turns.observers = ObserverChain([hanger])
    with trio.fail_after(30):
        async with open_client(daemon.paths) as c:
            topic = await c.create_topic(title="t")
            async with c.attach(topic.id) as sub:
                sent = await c.send(topic.id, "/text never sent")
                await hanger.started.wait()
                await c.stop(topic.id)
                async for item in sub:
                    if isinstance(item, TurnEnded) and item.turn_id == sent.turn_id:
                        assert item.status == "stopped"
                        break
                monkeypatch.setattr(hostd.shell.turns, "PREPARE_STEP_TIMEOUT", 0.2)
                sent = await c.send(topic.id, "/text sent as it was")
                async for item in sub:
                    if isinstance(item, TurnEnded) and item.turn_id == sent.turn_id:
                        assert item.status == "success", item.error
                        break
                rows = sub.transcript.rows()
    answers = [(r.status, [p.text for p in r.parts]) for r in rows if r.role == "assistant"]
    assert answers == [("stopped", []), ("success", ["sent as it was"])]
