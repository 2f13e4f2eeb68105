"""The file work of standalone workspaces (`hostd.core.workspaces` decides; this does).

Blocking functions, run off the trio thread by `Workspaces` (the daemon's one instance). Each
is safe to repeat (creating what exists, removing what is gone), so a retry after a crash is
harmless.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import trio

from hostd.core.workspaces import (
    KEEP_SUFFIX,
    Create,
    Remove,
    WorkspaceBook,
    WorkspacePolicy,
    sweep,
)
from hostd_protocol.errors import ConfigError

if TYPE_CHECKING:
    from hostd.shell.drivers.supervisor import SessionOptions

log = logging.getLogger(__name__)

GIT_TIMEOUT = 60.0


def is_repo(seed: str) -> bool:
    return bool(seed) and (Path(seed).expanduser() / ".git").exists()


def create(c: Create) -> str:
    """Make the folder (seeded when asked); an existing one is used as it is. Raises
    `ConfigError` naming the seed and what failed."""
    path = Path(c.path)
    if path.exists():
        return str(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    seed = str(Path(c.seed).expanduser()) if c.seed else ""
    try:
        if not seed:
            path.mkdir()
        elif c.mode == "worktree":
            run = subprocess.run(
                ["git", "-C", seed, "worktree", "add", "--detach", str(path)],
                capture_output=True, text=True, timeout=GIT_TIMEOUT,
            )
            if run.returncode != 0:
                raise ConfigError(
                    f"workspace seed {seed!r}: git worktree add failed: "
                    f"{run.stderr.strip().splitlines()[-1:] or run.returncode}"
                )
        else:
            shutil.copytree(seed, path, symlinks=True)
    except (OSError, subprocess.SubprocessError) as exc:
        shutil.rmtree(path, ignore_errors=True)
        raise ConfigError(f"workspace {str(path)!r} cannot be made from {seed!r}: {exc}") from None
    if c.keep:
        Path(f"{path}{KEEP_SUFFIX}").touch()
    return str(path)


def remove(r: Remove) -> None:
    """Remove the folder (and its worktree registration in the seed repository)."""
    if r.worktree and r.seed:
        seed = str(Path(r.seed).expanduser())
        try:
            subprocess.run(
                ["git", "-C", seed, "worktree", "remove", "--force", r.path],
                capture_output=True, timeout=GIT_TIMEOUT,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            log.warning("git worktree remove %s failed: %s", r.path, exc)
    shutil.rmtree(r.path, ignore_errors=True)
    if os.path.lexists(r.path):
        log.warning("workspace %s could not be removed", r.path)


def sweep_left_behind(root: str) -> list[str]:
    """At daemon start: remove turn folders a crash left (kept ones stay). Returns them."""
    base = Path(root) / "turn"
    if not base.is_dir():
        return []
    listing = {t.name: [n.name for n in t.iterdir()] for t in base.iterdir() if t.is_dir()}
    removed = []
    for r in sweep(root, listing):
        remove(r)
        removed.append(r.path)
    for t in base.iterdir():  # topic folders left empty
        try:
            t.rmdir()
        except OSError:
            pass
    return removed


class Workspaces:
    """The daemon's standalone workspaces: the book (`WorkspaceBook`) plus its file work,
    run off the trio thread. One per daemon; the turn runner calls `enter` when it opens a
    turn's session and `leave` once the turn's final status is stored."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.book = WorkspaceBook(root)

    async def sweep(self) -> list[str]:
        """At start, before any turn: remove what a crash left (see `sweep_left_behind`)."""
        removed = await trio.to_thread.run_sync(sweep_left_behind, self.root)
        for path in removed:
            log.info("removed workspace %s left by an earlier run", path)
        return removed

    async def enter(
        self, topic_id: str, turn_id: str, policy: WorkspacePolicy, opts: SessionOptions
    ) -> SessionOptions:
        """`opts` with the turn's standalone folder as working dir, created (and seeded)."""
        repo = await trio.to_thread.run_sync(is_repo, policy.seed)
        path, creates = self.book.acquire(topic_id, turn_id, policy, seed_is_repo=repo)
        for c in creates:
            await trio.to_thread.run_sync(create, c)
        return replace(opts, working_dir=path)

    async def leave(self, topic_id: str, turn_id: str) -> None:
        """The turn's final status is stored: remove what the policy says, once. Never
        raises (a folder that cannot be removed is logged and swept at the next start)."""
        with trio.CancelScope(shield=True):
            for r in self.book.release(topic_id, turn_id):
                try:
                    await trio.to_thread.run_sync(remove, r)
                except Exception:
                    log.exception("removing workspace %s failed", r.path)

    async def forget(self, topic_id: str) -> None:
        """The topic is deleted: its folder goes (unless a turn still holds it)."""
        with trio.CancelScope(shield=True):
            for r in self.book.forget(topic_id):
                try:
                    await trio.to_thread.run_sync(remove, r)
                except Exception:
                    log.exception("removing workspace %s failed", r.path)


__all__ = ["Workspaces", "create", "is_repo", "remove", "sweep_left_behind"]
