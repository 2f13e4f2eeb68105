"""The file work of standalone workspaces (`hostd.core.workspaces` decides; this does).

Blocking functions, run off the trio thread by `Workspaces` (the daemon's one instance). Each
is safe to repeat (creating what exists, removing what is gone), so a retry after a crash is
harmless.

Rules this module guards:

- Host-side git runs no repository-controlled code (`git_argv`): the seed repository may be
  a confined topic's writable working directory, and git runs here outside the sandbox with
  the daemon's rights. No hooks (`core.hooksPath=/dev/null`: post-checkout, and a hooks path
  the repository's config names), no fsmonitor command, no submodule recursion, and every
  filter driver the repository's config defines is switched off (smudge, clean, process).
- A worktree's registration in its seed repository goes with its folder, also when a crash
  left the folder behind: the start-up sweep removes it and prunes the seed's registrations
  (`git worktree prune`), found through the folder's own `.git` link and checked against
  the seed's record of it; a seed that was moved or deleted is skipped, never an error.
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
from hostd_protocol import child_process
from hostd_protocol.errors import ConfigError

if TYPE_CHECKING:
    from hostd.shell.drivers.supervisor import SessionOptions

log = logging.getLogger(__name__)

GIT_TIMEOUT = 60.0


#: Options of every host-side git command (see the module rules).
GIT_SAFE = (
    "-c", "core.hooksPath=/dev/null",
    "-c", "core.fsmonitor=false",
    "-c", "submodule.recurse=false",
    "-c", "core.untrackedCache=false",
)


def _git(repo: str, *args: str, git_dir: bool = False) -> subprocess.CompletedProcess[bytes]:
    """Run git on `repo` (a work tree, or with `git_dir` a repository folder) with the safe
    options and every filter driver its config names switched off (module rules)."""
    where = ["--git-dir", repo] if git_dir else ["-C", repo]
    base = ["git", *GIT_SAFE, *where]
    filters: list[str] = []
    listed = child_process.run(
        [*base, "config", "--name-only", "--get-regexp", r"^filter\."], timeout=GIT_TIMEOUT
    )
    for name in sorted({n.rsplit(".", 1)[0] for n in listed.stdout.decode().split()}):
        for key in ("smudge", "clean", "process"):
            filters += ["-c", f"{name}.{key}="]
        filters += ["-c", f"{name}.required=false"]
    return child_process.run([*base[:1], *filters, *base[1:], *args], timeout=GIT_TIMEOUT)


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
            run = _git(seed, "worktree", "add", "--detach", str(path))
            if run.returncode != 0:
                raise ConfigError(
                    f"workspace seed {seed!r}: git worktree add failed: "
                    f"{run.stderr.decode(errors='replace').strip().splitlines()[-1:] or run.returncode}"
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
    """Remove the folder, and its worktree registration in its seed repository if it was
    checked out as one (known from `r`, or from the folder's own `.git` link after a crash)."""
    repo = _worktree_repo(r.path)
    shutil.rmtree(r.path, ignore_errors=True)
    if os.path.lexists(r.path):
        log.warning("workspace %s could not be removed", r.path)
        return
    if repo:
        try:
            run = _git(repo, "worktree", "prune", git_dir=True)
            if run.returncode != 0:
                log.warning("git worktree prune in %s failed: %s", repo,
                            run.stderr.decode(errors="replace").strip()[-200:])
        except (OSError, subprocess.SubprocessError) as exc:
            log.warning("git worktree prune in %s failed: %s", repo, exc)


def _worktree_repo(path: str) -> str:
    """The repository folder (`<seed>/.git`) `path` is a registered worktree of, or "".

    Read from `path/.git` ("gitdir: <repo>/worktrees/<name>"), which a tool in the workspace
    could rewrite: it counts only if the repository's record of that worktree points back at
    `path`. A seed that was moved or deleted has no such record: nothing to prune there.
    """
    try:
        link = Path(path, ".git").read_text(errors="replace").strip()
    except OSError:
        return ""
    if not link.startswith("gitdir:"):
        return ""
    admin = Path(link.removeprefix("gitdir:").strip())
    try:
        back = (admin / "gitdir").read_text(errors="replace").strip()
    except OSError:
        return ""
    if admin.parent.name != "worktrees" or Path(back) != Path(path, ".git"):
        return ""
    return str(admin.parent.parent)


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
