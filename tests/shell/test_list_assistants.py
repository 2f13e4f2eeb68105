"""`list-assistants` through the real daemon and socket: each assistant file with what it
resolves to, a broken file listed with its one-line error, no option values on the wire."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
import trio

from hostd.client import open_client
from hostd.shell.daemon import DaemonConfig
from hostd.shell.paths import Paths
from hostd_protocol.client_messages import AssistantInfo
from hostd_protocol.errors import DriverUnavailable
from tests.shell.conftest import Running, start_daemon


def write_config(config_dir: Path) -> None:
    folder = config_dir / "assistants"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "coder.toml").write_text(
        'description = "Writes code"\ndriver = "fake"\nmodel = "m1"\n'
        'system_prompt = "PROMPT-TEXT"\n[options]\napi_key = "sk-SECRET-VALUE"\n'
    )
    (folder / "broken.toml").write_text('description = "oops"\nmodle = "typo"\n')
    (folder / "planner.toml").write_text('model = "use::planning"\n')
    (folder / "ghost.toml").write_text('driver = "nope"\n')
    (config_dir / "roles.toml").write_text(
        '[system]\nplanning = { driver = "fake", model = "big" }\n'
    )


async def test_lists_assistants_with_resolution_and_errors(running: Running) -> None:
    write_config(running.paths.config_dir)
    with trio.fail_after(10):
        async with open_client(running.paths) as c:
            listed = await c.list_assistants()
    by_name = {a.name: a for a in listed}
    assert [a.name for a in listed] == ["broken", "coder", "default", "ghost", "planner"]
    assert by_name["coder"] == AssistantInfo(
        name="coder", description="Writes code", driver="fake", model="m1", available=True
    )
    assert by_name["planner"] == AssistantInfo(
        name="planner", driver="fake", model="big", role="planning", available=True
    )
    broken = by_name["broken"]
    assert not broken.available and broken.driver == ""
    assert broken.error.startswith(f"{running.paths.config_dir / 'assistants' / 'broken.toml'}:2:")
    assert "modle: unknown key" in broken.error and "\n" not in broken.error
    ghost = by_name["ghost"]
    assert (ghost.driver, ghost.available) == ("nope", False)
    assert ghost.error.startswith("no driver named 'nope' is installed")
    wire = msgspec.json.encode(listed)
    assert b"SECRET" not in wire and b"PROMPT-TEXT" not in wire


async def test_a_broken_roles_file_is_each_role_assistants_error(running: Running) -> None:
    write_config(running.paths.config_dir)
    (running.paths.config_dir / "roles.toml").write_text("[system\n")
    with trio.fail_after(10):
        async with open_client(running.paths) as c:
            by_name = {a.name: a for a in await c.list_assistants()}
            assert by_name["planner"].error.startswith(
                f"{running.paths.config_dir / 'roles.toml'}:1"
            )
            assert by_name["coder"].available  # an explicit driver needs no roles file
            # An assistant added while the daemon runs is listed at once.
            (running.paths.config_dir / "assistants" / "new.toml").write_text('driver = "fake"\n')
            assert "new" in {a.name for a in await c.list_assistants()}


BUILTIN = "built-in: the assistant of a topic that names none"


async def test_no_config_dir_lists_the_builtin_default_only(running: Running) -> None:
    with trio.fail_after(10):
        async with open_client(running.paths) as c:
            listed = await c.list_assistants()
            topic = await c.create_topic(assistant="default")
            bare = await c.create_topic()
    # This daemon has a default driver (`fake`): a bare topic runs there, so does `default`.
    assert listed == [
        AssistantInfo(
            name="default", description=BUILTIN, driver="fake", available=True, builtin=True
        )
    ]
    assert (topic.assistant, topic.driver, bare.driver) == ("default", "fake", "fake")


async def test_the_builtin_default_without_a_daemon_default_driver(
    nursery: trio.Nursery, paths: Paths
) -> None:
    running = await start_daemon(nursery, paths, config=DaemonConfig())
    config = paths.config_dir
    write_config(config)
    try:
        with trio.fail_after(10):
            async with open_client(paths) as c:
                # No `default` role and no ready built-in driver (this registry has `fake`
                # only): listed with the reason, the one a topic of it is refused with.
                listed = {a.name: a for a in await c.list_assistants()}
                with pytest.raises(DriverUnavailable) as refused:
                    await c.create_topic(assistant="default")
                assert listed["default"] == AssistantInfo(
                    name="default", description=BUILTIN, error=refused.value.message,
                    builtin=True,
                )
                assert refused.value.message.startswith("no driver is ready for a new topic: ")
                # With a `default` role, it runs on the role.
                (config / "roles.toml").write_text(
                    '[system]\ndefault = { driver = "fake", model = "small" }\n'
                )
                listed = {a.name: a for a in await c.list_assistants()}
                assert listed["default"] == AssistantInfo(
                    name="default", description=BUILTIN, driver="fake", model="small",
                    role="default", available=True, builtin=True,
                )
                assert not any(a.builtin for name, a in listed.items() if name != "default")
                topic = await c.create_topic(assistant="default")
                assert (topic.assistant, topic.driver) == ("default", "")  # the role decides
                # A file named `default` replaces it: listed once, as the file says.
                (config / "assistants" / "default.toml").write_text(
                    'driver = "fake"\nmodel = "mine"\n'
                )
                mine = [a for a in await c.list_assistants() if a.name == "default"]
        assert mine == [
            AssistantInfo(name="default", driver="fake", model="mine", available=True)
        ]
    finally:
        await running.stop()
