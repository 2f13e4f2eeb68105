"""The shell side of turns (`hostd.shell.turns`): configuration read once per change, session
options, the working directory, continue, usage; and the daemon running assistant turns."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio

from hostd.shell.turns import (
    CONTINUE_PROMPT,
    ConfigCache,
    TurnServices,
    continue_text,
    ensure_workdir,
)
from hostd_protocol.client_messages import TopicInfo
from hostd_protocol.common import Capabilities, HistoryMessage, Usage
from hostd_protocol.errors import ConfigError, PermissionDenied


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


class Writer:
    """Collects what the services queue for the store."""

    def __init__(self) -> None:
        self.ops: list[Any] = []

    def put(self, op: Any, durable: bool = False) -> int:
        self.ops.append(op)
        return len(self.ops)


def services(tmp_path: Path) -> TurnServices:
    return TurnServices(tmp_path / "cfg", tmp_path / "ws", None, Writer())  # type: ignore[arg-type]


async def test_session_options_from_assistant_and_role(tmp_path: Path) -> None:
    write_config(tmp_path / "cfg")
    svc = services(tmp_path)
    topic = TopicInfo(id="T1", assistant="coder", options={"mode": "topic"})
    opts = await svc.session_options(topic)
    assert (opts.driver, opts.model, opts.system_prompt) == ("fake", "big", "be terse")
    assert dict(opts.options) == {"mode": "topic", "keep": 1}
    assert opts.working_dir == str(tmp_path / "ws" / "T1")
    # A topic's own driver wins and needs no roles file.
    plain = await svc.session_options(TopicInfo(id="T2", driver="scripted", model="m"))
    assert (plain.driver, plain.model) == ("scripted", "m")


def test_config_is_read_once_per_change(tmp_path: Path) -> None:
    write_config(tmp_path / "cfg")
    cache = ConfigCache(tmp_path / "cfg")
    assert cache.assistant_sync("coder").system_prompt == "be terse"
    cache.assistant_sync("coder")
    cache.assistant_sync("")
    assert cache.reads == 1
    file = tmp_path / "cfg" / "assistants" / "coder.toml"
    file.write_text('system_prompt = "changed, and longer"\n')
    assert cache.assistant_sync("coder").system_prompt == "changed, and longer"
    assert cache.reads == 2
    file.write_text("oops = [\n")
    with pytest.raises(ConfigError, match=r"coder.toml:"):
        cache.assistant_sync("coder")


def test_a_stale_look_at_unchanged_files_is_answered_without_parsing(tmp_path: Path) -> None:
    write_config(tmp_path / "cfg")
    cache = ConfigCache(tmp_path / "cfg")
    cache.FRESH_FOR = -1.0  # every look is stale: the stamps are taken again each time
    assert cache.cached("coder") is None  # nothing parsed yet: `load` goes to a thread
    cache.load_sync()
    hit = cache.cached("coder")
    assert hit is not None and hit[0].system_prompt == "be terse"
    (tmp_path / "cfg" / "assistants" / "coder.toml").write_text('system_prompt = "new one"\n')
    assert cache.cached("coder") is None  # changed: parse again
    assert cache.reads == 1


def test_a_working_dir_in_the_way_is_a_config_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    topic = TopicInfo(id="T1")
    root = str(tmp_path)  # hostd's own folders: created
    assert ensure_workdir(str(tmp_path / "new" / "dir"), topic, root) == str(tmp_path / "new" / "dir")
    assert (tmp_path / "new" / "dir").is_dir()
    with pytest.raises(ConfigError, match=r"^working directory '.*/file' cannot be used: "):
        ensure_workdir(str(blocker), topic, root)


def test_a_working_dir_outside_hostd_s_folders_is_never_created(tmp_path: Path) -> None:
    """A topic's (or an assistant's) own directory that does not exist, or no longer does,
    fails the turn saying so: the agent never starts in an empty folder made up from a typo.
    A `..` cannot climb out of hostd's root into a path it would create."""
    topic = TopicInfo(id="T1")
    root = tmp_path / "workspaces"
    for path in (tmp_path / "gone", root / ".." / "escaped"):
        with pytest.raises(ConfigError, match=(
            r"^working directory '.*' of topic T1 does not exist \(hostd creates only its own "
            r"folders\); create it, or use another working directory$"
        )):
            ensure_workdir(str(path), topic, str(root))
        assert not os.path.exists(path)
    assert ensure_workdir(str(tmp_path), topic, str(root)) == str(tmp_path)  # exists: used


def test_permission(tmp_path: Path) -> None:
    svc = TurnServices(tmp_path, tmp_path, None, None, daemon_uid=1000)  # type: ignore[arg-type]
    topic = TopicInfo(id="T1", options={"profile": "work"})
    svc.check(1000, topic)
    svc.check(1000, topic, "work")
    with pytest.raises(PermissionDenied, match=r"^uid 1001 may not use topic T1 "):
        svc.check(1001, topic)
    with pytest.raises(PermissionDenied, match=r"^topic T1 belongs to profile 'work', not 'home'$"):
        svc.check(1000, topic, "home")
    assert os.getuid() >= 0


def test_continue_text() -> None:
    from hostd.shell.store.store import TurnRecord as StoredTurn
    from hostd_protocol.client_messages import MessageRow
    from hostd_protocol.common import TextDelta
    from hostd_protocol.errors import NotFound

    failed = StoredTurn("t1", "T", "error", "boom", "driver_turn_error", "write a poem")
    assert continue_text([failed], []) == "write a poem"
    answered = MessageRow(
        id="a",
        topic_id="T",
        role="assistant",
        status="error",
        position=2,
        turn_id="t1",
        parts=[TextDelta(text="Roses")],
    )
    assert continue_text([failed], [answered]) == CONTINUE_PROMPT
    ok_turn = StoredTurn("t2", "T", "success", "", "", "")
    with pytest.raises(NotFound, match=r"^nothing to continue: its last turn succeeded \("):
        continue_text([failed, ok_turn], [])
    with pytest.raises(NotFound, match=r"^nothing to continue: the topic has no turn yet"):
        continue_text([], [])
    # A turn cut by a crash has no resume data: its input is sent again, or if it answered
    # part of it, it is asked to go on.
    crashed = StoredTurn("t3", "T", "error", "daemon died", "driver_crashed", "")
    asked = MessageRow(
        id="u", topic_id="T", role="user", status="success", position=3, turn_id="t3",
        parts=[TextDelta(text="tell me more")],
    )
    assert continue_text([crashed], [asked]) == "tell me more"
    partial = msgspec.structs.replace(answered, turn_id="t3")
    assert continue_text([crashed], [asked, partial]) == CONTINUE_PROMPT
    with pytest.raises(NotFound, match=r"^nothing to continue: the last turn ended error and "):
        continue_text([crashed], [])


def test_usage_is_counted_from_events(tmp_path: Path) -> None:
    from hostd_protocol.client_messages import UsageUpdated

    svc = services(tmp_path)
    for seq, (turn, tokens) in enumerate([("t1", 3), ("t1", 5), ("t2", 1)], 1):
        svc.observe(
            "T", UsageUpdated(topic_id="T", seq=seq, turn_id=turn, usage=Usage(input_tokens=tokens))
        )
    assert svc.usage.topic_usage("T") == Usage(input_tokens=6)  # per turn: the latest
    assert len(svc.writer.ops) == 3  # each figure stored per turn (`hostd usage` survives)


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
            self, topic_id: str, opts: Any, resume_token: str | None = None, **kw: Any
        ) -> FakeSession:
            self.opts.append(opts)
            session = await super().open(topic_id, opts, resume_token, **kw)
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
