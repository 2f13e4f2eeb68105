"""Standalone workspaces through the real daemon and the real scripted driver (issue 23).

A turn-scoped workspace exists while its turn runs and is gone after the turn on every exit
path (success, error, stop, driver crash), and after a kill -9 it is swept at the next start.
"Gone after the turn" is checked once the daemon has stopped gracefully: the removal runs in
the topic's own nursery, which a graceful stop waits for (no polling, no sleeps); a kept
workspace shows that the stop itself removes nothing.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import trio

from hostd.client import open_client
from hostd.shell.paths import Paths
from hostd_protocol.client_messages import RowAppended, TurnEnded
from hostd_protocol.common import TextDelta
from tests.e2e import daemon_proc

pytestmark = pytest.mark.e2e


async def turn(
    c: Any, topic_id: str, script: str, on_cwd: Any = None
) -> tuple[TurnEnded, str]:
    """Send `script` (which starts with /pwd); returns the end and the turn's cwd.
    `on_cwd(path)` runs as soon as the cwd is known, while the turn still runs."""
    cwd = ""
    text = ""
    async with c.attach(topic_id) as sub:
        await c.send(topic_id, script)
        async for ev in sub:
            if isinstance(ev, RowAppended) and isinstance(ev.chunk, TextDelta):
                text += ev.chunk.text  # chunks may arrive coalesced: parse the text
                if not cwd and text.startswith("cwd ") and "\n" in text:
                    cwd = text.removeprefix("cwd ").partition("\n")[0]
                    if on_cwd is not None:
                        await on_cwd(Path(cwd))
            if isinstance(ev, TurnEnded):
                assert cwd, text
                return ev, cwd
    raise AssertionError("no turn end")


async def one_turn(home: Path, options: dict[str, Any], script: str, on_cwd: Any = None
                   ) -> tuple[TurnEnded, Path]:
    with trio.fail_after(60):
        d = await daemon_proc.start(home)
        try:
            async with open_client(Paths.under(home)) as c:
                t = await c.create_topic(driver="scripted", options={"chunk_rate": 0, **options})
                end, cwd = await turn(c, t.id, script, on_cwd)
        finally:
            assert await d.terminate() == 0
    return end, Path(cwd)


def isdir(path: object) -> bool:
    return os.path.isdir(path)  # type: ignore[arg-type]


def exists(path: object) -> bool:
    return os.path.lexists(path)  # type: ignore[arg-type]


def standalone(home: Path) -> Path:
    return Paths.under(home).data_dir / "standalone"


@pytest.mark.parametrize(
    ("script", "status"),
    [
        ("/pwd\n/writefile made.txt\n/text done", "success"),
        ("/pwd\n/error scripted failure", "error"),
        ("/pwd\n/crash 3", "error"),
    ],
    ids=["success", "error", "driver-crash"],
)
async def test_a_turn_workspace_is_removed_after_the_turn(
    home: Path, script: str, status: str
) -> None:
    # (That the folder exists while its turn runs is shown by the stop and kill -9 tests,
    # whose turns wait; these end before a window could look.)
    end, cwd = await one_turn(home, {"workspace": "turn"}, script)
    assert end.status == status, end
    assert cwd.is_relative_to(standalone(home) / "turn")
    assert not exists(cwd)


async def test_a_stopped_turns_workspace_is_removed(home: Path) -> None:
    with trio.fail_after(60):
        d = await daemon_proc.start(home)
        try:
            async with open_client(Paths.under(home)) as c:
                t = await c.create_topic(driver="scripted",
                                         options={"chunk_rate": 0, "workspace": "turn"})

                async def stop(cwd: Path) -> None:
                    assert isdir(cwd)
                    await c.stop(t.id)

                end, cwd = await turn(c, t.id, "/pwd\n/wait", stop)
        finally:
            assert await d.terminate() == 0
    assert end.status == "stopped"
    assert not exists(cwd)


async def test_a_kept_workspace_stays(home: Path) -> None:
    end, cwd = await one_turn(
        home, {"workspace": {"scope": "turn", "keep": True}}, "/pwd\n/writefile made.txt"
    )
    assert end.status == "success"
    assert exists(cwd / "made.txt")
    with trio.fail_after(60):  # and the next start's sweep leaves it too
        d = await daemon_proc.start(home)
        assert await d.terminate() == 0
    assert exists(cwd / "made.txt")


@pytest.mark.parametrize("seeded", [False, True], ids=["plain", "git-worktree"])
async def test_a_workspace_left_by_kill9_is_swept_at_the_next_start(
    home: Path, seeded: bool
) -> None:
    workspace: Any = "turn"
    seed = home / "seed"
    if seeded:  # a worktree's registration in its seed repository goes too (issue 31)
        seed.mkdir()
        git = ["git", "-C", str(seed), "-c", "user.name=t", "-c", "user.email=t@t"]
        (seed / "f.txt").write_text("seeded")
        for args in (["init", "-q"], ["add", "f.txt"], ["commit", "-qm", "one"]):
            await trio.run_process([*git, *args], capture_stdout=True)
        workspace = {"scope": "turn", "seed": str(seed)}
    with trio.fail_after(60):
        d = await daemon_proc.start(home)
        cwd = Path()
        async with open_client(Paths.under(home)) as c:
            t = await c.create_topic(driver="scripted",
                                     options={"chunk_rate": 0, "workspace": workspace})
            async with c.attach(t.id) as sub:
                await c.send(t.id, "/pwd\n/wait")
                text = ""
                async for ev in sub:
                    if isinstance(ev, RowAppended) and isinstance(ev.chunk, TextDelta):
                        text += ev.chunk.text
                        if "\n" in text:
                            cwd = Path(text.removeprefix("cwd ").partition("\n")[0])
                            break
                await d.kill9()
        assert isdir(cwd)
        if seeded:
            assert str(cwd) in await worktrees(seed)
        d = await daemon_proc.start(home)
        try:
            assert not exists(cwd)
        finally:
            assert await d.terminate() == 0
        if seeded:
            assert str(cwd) not in await worktrees(seed)


async def worktrees(repo: Path) -> str:
    done = await trio.run_process(["git", "-C", str(repo), "worktree", "list"],
                                  capture_stdout=True)
    return done.stdout.decode()


async def test_a_topic_workspace_lives_across_turns_and_goes_with_the_topic(home: Path) -> None:
    seed = home / "seed"
    await trio.Path(seed).mkdir()
    await trio.Path(seed / "seed.txt").write_text("from the seed")
    with trio.fail_after(60):
        d = await daemon_proc.start(home)
        try:
            async with open_client(Paths.under(home)) as c:
                t = await c.create_topic(
                    driver="scripted",
                    options={"chunk_rate": 0,
                             "workspace": {"scope": "topic", "seed": str(seed)}},
                )
                first, cwd = await turn(c, t.id, "/pwd\n/writefile made.txt\n/readfile seed.txt")
                second, cwd2 = await turn(c, t.id, "/pwd\n/readfile made.txt")
                assert first.status == second.status == "success"
                assert cwd == cwd2 and Path(cwd).is_relative_to(standalone(home) / "topic")
                assert exists(Path(cwd) / "made.txt")
                await c.delete_topic(t.id)
        finally:
            assert await d.terminate() == 0
    assert not exists(cwd)
