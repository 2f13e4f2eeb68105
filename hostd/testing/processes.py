"""Child-process accounting for tests: no driver may outlive the test that started it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager


def child_pids(parent: int | None = None) -> set[int]:
    """Pids whose parent is `parent` (default: this process), zombies included.

    Reads /proc (Linux); elsewhere returns an empty set, so the check is a no-op there.
    """
    parent = os.getpid() if parent is None else parent
    pids: set[int] = set()
    try:
        entries = os.listdir("/proc")
    except OSError:
        return pids
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue  # it exited while we looked
        # Field 2 (comm) is parenthesised and may contain spaces: split after its last ')'.
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 1 and int(fields[1]) == parent:
            pids.add(int(entry))
    return pids


def marked(marker: str) -> list[int]:
    """Live processes with `marker` as one of their argv words (a zombie's argv is empty):
    how a test finds the processes it started, however deep, by a word it put in their argv.
    Reads /proc (Linux); elsewhere returns an empty list."""
    found: list[int] = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    word = marker.encode()
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                argv = fh.read().split(b"\0")
        except OSError:
            continue  # it exited while we looked
        if word in argv:
            found.append(int(entry))
    return found


def describe(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            cmd = fh.read().replace(b"\0", b" ").decode(errors="replace").strip()
        with open(f"/proc/{pid}/stat", "rb") as fh:
            state = fh.read().rsplit(b")", 1)[1].split()[0].decode()
    except OSError:
        return f"{pid} (gone)"
    return f"{pid} state={state} {cmd}"


@contextmanager
def no_new_children() -> Iterator[None]:
    """Fail if the block leaves a child process behind, running or zombie."""
    before = child_pids()
    yield
    left = child_pids() - before
    if left:
        raise AssertionError(
            "child processes outlived the test: " + "; ".join(describe(p) for p in sorted(left))
        )
