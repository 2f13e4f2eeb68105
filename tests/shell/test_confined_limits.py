"""`hostd.shell.drivers.limits`: which mechanism limits a confined tree, and how it joins."""

from __future__ import annotations

import subprocess
import sys

from hostd.core.sandbox_policy import SandboxPolicy
from hostd.shell.drivers.limits import Leaf, LimitSupport, join_argv, rlimits


def test_without_a_leaf_the_command_is_itself() -> None:
    assert join_argv(None, ["a", "b"]) == ["a", "b"]


def test_the_shell_joins_every_hierarchy_then_execs(tmp_path: object) -> None:
    from pathlib import Path

    base = Path(str(tmp_path))
    procs = (str(base / "p1"), str(base / "p2"))
    argv = join_argv(Leaf((), procs), [sys.executable, "-c", "import os; print(os.getpid())"])
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True)
    pid = done.stdout.strip()
    # The command is the shell itself after exec: the pid written is the command's.
    assert [Path(p).read_text().strip() for p in procs] == [pid, pid]


def test_a_leaf_that_cannot_be_joined_starts_nothing(tmp_path: object) -> None:
    argv = join_argv(Leaf((), (f"{tmp_path}/no/such/dir/cgroup.procs",)), ["true"])
    assert subprocess.run(argv, capture_output=True, timeout=30).returncode == 125


def test_rlimits_with_a_cgroup_limit_cpu_time_only() -> None:
    policy = SandboxPolicy("confined", pids=64, memory_mb=512, cpu_seconds=60)
    limits = rlimits(policy, LimitSupport("cgroup1", ("/x", "/y")))
    assert (limits.cpu_seconds, limits.data, limits.processes) == (60, 0, 0)
    fallback = rlimits(policy, LimitSupport("rlimit", reason="none"))
    assert (fallback.cpu_seconds, fallback.data) == (60, 512 << 20)


def test_the_summary_says_which_applies() -> None:
    assert LimitSupport("cgroup1", ("/a", "/b")).summary() == (
        "cgroup v1 leaf per confined session (pids, memory)"
    )
    assert LimitSupport("rlimit", reason="no writable cgroup hierarchy").summary().startswith(
        "setrlimit per process (processes, data, cpu)"
    )
