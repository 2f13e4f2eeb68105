"""The file work of standalone workspaces: seeding by copy and by git worktree, removal, and
the start-up sweep of folders a crash left behind."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from hostd.core.workspaces import Create, Remove, WorkspaceBook, WorkspacePolicy
from hostd.shell import workspaces as ws
from hostd_protocol.errors import ConfigError


def test_copy_seed_and_remove(tmp_path: Path) -> None:
    seed = tmp_path / "src"
    (seed / "pkg").mkdir(parents=True)
    (seed / "pkg" / "a.txt").write_text("a")
    target = tmp_path / "w" / "turn" / "t" / "u"
    ws.create(Create(str(target), str(seed), "copy"))
    assert (target / "pkg" / "a.txt").read_text() == "a"
    ws.remove(Remove(str(target)))
    assert not target.exists()
    ws.remove(Remove(str(target)))  # removing again is harmless


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_worktree_seed_and_remove(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    (repo / "f.txt").write_text("committed")
    subprocess.run([*git, "add", "f.txt"], check=True)
    subprocess.run([*git, "commit", "-qm", "one"], check=True)
    assert ws.is_repo(str(repo))
    book = WorkspaceBook(str(tmp_path / "w"))
    path, fx = book.acquire("t", "u", WorkspacePolicy("turn", str(repo)), seed_is_repo=True)
    for c in fx:
        ws.create(c)
    assert (Path(path) / "f.txt").read_text() == "committed"
    listed = subprocess.run([*git, "worktree", "list"], capture_output=True, text=True).stdout
    assert path in listed
    for r in book.release("t", "u"):
        ws.remove(r)
    assert not Path(path).exists()
    listed = subprocess.run([*git, "worktree", "list"], capture_output=True, text=True).stdout
    assert path not in listed


def test_a_bad_seed_is_a_config_error_and_leaves_nothing(tmp_path: Path) -> None:
    target = tmp_path / "w" / "x"
    with pytest.raises(ConfigError, match=r"^workspace .* cannot be made from"):
        ws.create(Create(str(target), str(tmp_path / "missing"), "copy"))
    assert not target.exists()


def test_sweep_left_behind(tmp_path: Path) -> None:
    root = tmp_path / "w"
    ws.create(Create(str(root / "turn" / "t1" / "u1")))
    ws.create(Create(str(root / "turn" / "t1" / "u2"), keep=True))
    ws.create(Create(str(root / "turn" / "t2" / "u3")))
    ws.create(Create(str(root / "topic" / "t3")))
    removed = ws.sweep_left_behind(str(root))
    assert sorted(removed) == [str(root / "turn" / "t1" / "u1"), str(root / "turn" / "t2" / "u3")]
    assert (root / "turn" / "t1" / "u2").is_dir()
    assert not (root / "turn" / "t2").exists()
    assert (root / "topic" / "t3").is_dir()  # a topic's folder lives with its topic
