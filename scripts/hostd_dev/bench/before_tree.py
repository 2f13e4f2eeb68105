"""The "before" side of `scripts/bench ab`: a git worktree at a revision with its own venv.

`prepare(rev)` checks out REV as a detached git worktree under `.cache/bench-ab/<sha>` of
this checkout and gives it its own `.venv` the way that tree's own `scripts/setup` builds
one: `scripts/uv sync --locked --all-packages --all-extras` with that tree's uv.lock (every
workspace package editable from that tree, so the daemon, the protocol and the drivers it
spawns are all REV's). The rest of the set-up (Debian packages, the web page, the npm peers,
Phoenix) is not needed to run a daemon and is left out. REV's bench load driver, when it has
one, is built once. A finished tree carries a stamp and is reused by later runs; an
unfinished one (an interrupted set-up) is made again.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

#: Where the before trees live, under the checkout running the bench (gitignored).
CACHE = Path(".cache") / "bench-ab"
STAMP = ".bench-ab-ready"


#: The bench's load driver: part of the instrument, like the windows process. `scripts/bench
#: ab` runs this checkout's on both sides unless asked for each tree's own (`use_load_driver`).
LOAD_DRIVER = ("scripts/hostd_dev/bench/load_driver.py", "scripts/hostd_dev/bench/load_stream.c")


class BeforeTreeError(RuntimeError):
    """The before tree could not be made (one line: what failed and what to do)."""


def repo_root() -> Path:
    """The checkout this bench runs from (scripts/hostd_dev/bench/ is three levels down)."""
    return Path(__file__).resolve().parents[3]


def resolve(rev: str, repo: Path) -> str:
    """REV's full commit id, or BeforeTreeError naming the revision git does not know."""
    proc = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"],
        capture_output=True,
        text=True,
        check=False,
    )
    sha = proc.stdout.strip()
    if proc.returncode != 0 or not sha:
        raise BeforeTreeError(f"ab: no commit {rev!r} in {repo}; name a commit of `git log`")
    return sha


def tree_dir(sha: str, repo: Path, cache: Path | None = None) -> Path:
    return (cache or repo / CACHE) / sha[:12]


def python_of(tree: Path) -> Path:
    return tree / ".venv" / "bin" / "python"


def is_ready(tree: Path, sha: str) -> bool:
    stamp = tree / ".venv" / STAMP
    try:
        return stamp.read_text().strip() == sha and python_of(tree).exists()
    except OSError:
        return False


def prepare(
    rev: str,
    *,
    repo: Path | None = None,
    cache: Path | None = None,
    log: Callable[[str], None] = print,
) -> Path:
    """The before tree's interpreter for REV, making the tree first when it is not cached."""
    repo = repo or repo_root()
    sha = resolve(rev, repo)
    tree = tree_dir(sha, repo, cache)
    if is_ready(tree, sha):
        return python_of(tree)
    log(f"ab: making the before tree {tree} at {sha[:12]} (once; later runs reuse it)")
    _remove(tree, repo)
    tree.parent.mkdir(parents=True, exist_ok=True)
    _run(
        ["git", "-C", str(repo), "worktree", "add", "--detach", str(tree), sha], "git worktree add"
    )
    base = Path(sys.base_prefix) / "bin" / "python3"
    uv = tree / "scripts" / "uv"
    if not uv.exists():
        raise BeforeTreeError(f"ab: {sha[:12]} has no scripts/uv; pick a later commit")
    _run(
        [str(uv), "sync", "--locked", "--all-packages", "--all-extras", "--python", str(base)],
        "uv sync of the before tree",
        cwd=tree,
    )
    python = python_of(tree)
    # The daemon must import REV's hostd, not this checkout's (`-P`: no cwd on sys.path).
    found = _run(
        [str(python), "-P", "-c", "import hostd; print(hostd.__file__)"],
        "importing hostd in the before tree",
        cwd=tree,
    )
    if not Path(found.strip()).resolve().is_relative_to(tree.resolve()):
        raise BeforeTreeError(f"ab: the before tree's python imports hostd from {found.strip()}")
    # REV's bench load driver (if it has one) built before 100 drivers would each build it.
    subprocess.run(
        [str(python), "-P", "-c", "from hostd_dev.bench import load_driver as m; m.build()"],
        cwd=tree,
        capture_output=True,
        check=False,
    )
    (tree / ".venv" / STAMP).write_text(sha + "\n")
    return python


def _remove(tree: Path, repo: Path) -> None:
    if tree.exists():
        subprocess.run(
            ["git", "-C", str(repo), "worktree", "remove", "--force", str(tree)],
            capture_output=True,
            check=False,
        )
        shutil.rmtree(tree, ignore_errors=True)
    subprocess.run(["git", "-C", str(repo), "worktree", "prune"], capture_output=True, check=False)


def _run(argv: list[str], what: str, cwd: Path | None = None) -> str:
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=cwd, check=False)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise BeforeTreeError(f"ab: {what} failed: {tail[0]}")
    return proc.stdout


def use_load_driver(tree: Path, python: Path, *, mine: bool, repo: Path | None = None) -> str:
    """Put this checkout's load driver into the before tree (`mine`), or REV's own back; build
    its C loop. Returns which one the before side runs, for the record."""
    repo = repo or repo_root()
    if not (tree / LOAD_DRIVER[0]).exists() and not mine:
        return "none at that commit"
    if mine:
        for rel in LOAD_DRIVER:
            shutil.copy2(repo / rel, tree / rel)
    else:
        _run(
            ["git", "-C", str(tree), "checkout", "--", *LOAD_DRIVER], "restoring REV's load driver"
        )
    proc = subprocess.run(
        [
            str(python),
            "-P",
            "-c",
            "from hostd_dev.bench import load_driver as m; print(m.VERSION, m.build() is not None)",
        ],
        cwd=tree,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise BeforeTreeError(
            f"ab: the load driver does not load in the before tree: "
            f"{(proc.stderr.strip().splitlines() or ['?'])[-1]}"
        )
    version, built = proc.stdout.split()
    return f"{'this checkout' if mine else 'REV'}'s {version}" + (
        "" if built == "True" else " (Python loop)"
    )
