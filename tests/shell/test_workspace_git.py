"""Host-side git of worktree seeding runs nothing the repository controls, and a worktree a
crash left behind is gone from its seed repository after the start-up sweep (issue 31)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from hostd.core.workspaces import Create
from hostd.shell import workspaces as ws

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
        capture_output=True, text=True, check=True,
    )
    return done.stdout


def hostile_seed(tmp_path: Path) -> tuple[Path, Path]:
    """A repository that runs a planted command at every chance a checkout gives: a
    post-checkout hook, a hooks path in its config, a smudge filter and a long-running
    filter process. Returns it and the folder its commands would leave marks in."""
    repo, marks = tmp_path / "seed", tmp_path / "marks"
    repo.mkdir()
    marks.mkdir()
    git(repo, "init", "-q")
    (repo / "f.txt").write_text("committed\n")
    (repo / ".gitattributes").write_text("* filter=evil\n")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "one")
    for hooks in (repo / ".git" / "hooks", repo / "planted-hooks"):
        hooks.mkdir(exist_ok=True)
        hook = hooks / "post-checkout"
        hook.write_text(f"#!/bin/sh\ntouch {marks}/{hooks.name}\n")
        hook.chmod(0o755)
    git(repo, "config", "core.hooksPath", str(repo / "planted-hooks"))
    git(repo, "config", "filter.evil.smudge", f"sh -c 'touch {marks}/smudge; cat'")
    git(repo, "config", "filter.evil.process", f"sh -c 'touch {marks}/process; exit 1'")
    git(repo, "config", "core.fsmonitor", f"sh -c 'touch {marks}/fsmonitor'")
    return repo, marks


def test_seeding_a_worktree_runs_no_hook_filter_or_fsmonitor(tmp_path: Path) -> None:
    repo, marks = hostile_seed(tmp_path)
    # The attack is real: plain git runs the planted commands.
    subprocess.run(["git", "-C", str(repo), "worktree", "add", "-q", "--detach",
                    str(tmp_path / "plain")], capture_output=True, check=False)
    assert sorted(p.name for p in marks.iterdir())
    for p in marks.iterdir():
        p.unlink()
    target = tmp_path / "w" / "turn" / "t" / "u"
    ws.create(Create(str(target), str(repo), "worktree"))
    assert (target / "f.txt").read_text() == "committed\n"
    assert sorted(p.name for p in marks.iterdir()) == []


def test_the_sweep_prunes_a_worktree_a_crash_left(tmp_path: Path) -> None:
    repo, marks = hostile_seed(tmp_path)
    root = tmp_path / "w"
    target = root / "turn" / "t" / "u"
    ws.create(Create(str(target), str(repo), "worktree"))
    assert str(target) in git(repo, "worktree", "list")
    # A crash: nothing but the folder on disk says what it was.
    assert ws.sweep_left_behind(str(root)) == [str(target)]
    assert not target.exists()
    assert str(target) not in git(repo, "worktree", "list")
    assert sorted(p.name for p in marks.iterdir()) == []


@pytest.mark.parametrize("fate", ["moved", "deleted"])
def test_the_sweep_proceeds_when_the_seed_is_gone(tmp_path: Path, fate: str) -> None:
    repo, _ = hostile_seed(tmp_path)
    root = tmp_path / "w"
    target = root / "turn" / "t" / "u"
    ws.create(Create(str(target), str(repo), "worktree"))
    if fate == "moved":
        repo.rename(tmp_path / "elsewhere")
    else:
        shutil.rmtree(repo)
    assert ws.sweep_left_behind(str(root)) == [str(target)]
    assert not target.exists()


def test_a_forged_git_link_prunes_nothing_elsewhere(tmp_path: Path) -> None:
    """A tool in the workspace may rewrite its `.git` link: the sweep prunes only a
    repository whose own record of the worktree points back at the folder."""
    (tmp_path / "o").mkdir()
    other, _ = hostile_seed(tmp_path / "o")
    root = tmp_path / "w"
    target = root / "turn" / "t" / "u"
    target.mkdir(parents=True)
    (target / ".git").write_text(f"gitdir: {other / '.git' / 'worktrees' / 'x'}\n")
    assert ws._worktree_repo(str(target)) == ""
    assert ws.sweep_left_behind(str(root)) == [str(target)]
