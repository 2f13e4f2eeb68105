"""Standalone workspaces: a fresh working directory per turn or per topic, and when it goes.

A policy is the `workspace` option of an assistant or a topic: `"turn"` or `"topic"`, or a
table `{scope = "turn" | "topic", seed = "/src", seed_mode = "copy" | "worktree", keep = false}`.
Without it the topic works in its own working directory, as before.

Rules this module guards:

- `scope = "turn"`: each turn gets a new folder `<root>/turn/<topic>/<turn>`, created (and
  seeded) before the driver starts; it is removed after the turn's final status is stored,
  exactly once, on every exit path (success, error, stop, driver crash), unless `keep`. The
  shell calls `release` from the one place that runs after the final status is stored.
- `scope = "topic"`: one folder `<root>/topic/<topic>`, created on the first turn, kept across
  turns and restarts, removed when the topic is deleted (`forget`), never while a turn of
  that topic holds it.
- A folder is never removed while a turn holds it: `release` and `forget` only return a
  `Remove` when no turn of that topic holds the folder any more.
- After a crash of the daemon (kill -9) nothing holds anything: `sweep` says which turn
  folders to remove at the next start (all of them but kept ones).
- A seed is copied, or checked out as a git worktree (`worktree`: the default when the seed
  is a repository; the shell knows, so it passes `seed_is_repo`).
- Pure: effects out (`Create`, `Remove`), the shell does the file work.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any, Literal

from hostd_protocol.errors import InvalidArgument

Scope = Literal["turn", "topic"]
SeedMode = Literal["copy", "worktree", "auto"]
SCOPES: tuple[Scope, ...] = ("turn", "topic")
SEED_MODES: tuple[SeedMode, ...] = ("copy", "worktree", "auto")
#: The option key that holds the policy.
OPTION = "workspace"
#: A kept turn folder has this marker beside it (`<turn>.keep`), so `sweep` leaves it.
KEEP_SUFFIX = ".keep"


@dataclass(frozen=True)
class WorkspacePolicy:
    """A standalone workspace: per turn or per topic, optionally seeded, kept or removed."""

    scope: Scope = "turn"
    seed: str = ""
    seed_mode: SeedMode = "auto"
    keep: bool = False


def parse_workspace(value: object) -> WorkspacePolicy | None:
    """The policy an option value says (None: no standalone workspace). Raises
    `InvalidArgument` naming what is wrong."""
    if value is None or value == "" or value == "none":
        return None
    if isinstance(value, str):
        if value not in SCOPES:
            raise InvalidArgument(
                f"workspace {value!r} is not a policy; use turn, topic, or a table "
                "{scope, seed, seed_mode, keep}"
            )
        return WorkspacePolicy(scope=value)
    if not isinstance(value, Mapping):
        raise InvalidArgument(f"workspace must be a string or a table, not {type(value).__name__}")
    unknown = sorted(set(value) - {"scope", "seed", "seed_mode", "keep"})
    if unknown:
        raise InvalidArgument(
            f"workspace has unknown keys {unknown}; known: scope, seed, seed_mode, keep"
        )
    scope = value.get("scope", "turn")
    seed = value.get("seed", "")
    mode = value.get("seed_mode", "auto")
    keep = value.get("keep", False)
    if scope not in SCOPES:
        raise InvalidArgument(f"workspace scope {scope!r} is not one of {', '.join(SCOPES)}")
    if mode not in SEED_MODES:
        raise InvalidArgument(
            f"workspace seed_mode {mode!r} is not one of {', '.join(SEED_MODES)}"
        )
    if not isinstance(seed, str) or (seed and not seed.startswith(("/", "~"))):
        raise InvalidArgument(f"workspace seed must be an absolute path, not {seed!r}")
    if not isinstance(keep, bool):
        raise InvalidArgument(f"workspace keep must be true or false, not {keep!r}")
    return WorkspacePolicy(scope=scope, seed=seed, seed_mode=mode, keep=keep)


def workspace_of(options: Mapping[str, Any]) -> WorkspacePolicy | None:
    return parse_workspace(options.get(OPTION))


@dataclass(frozen=True)
class Create:
    """Make `path` (parents too); seed it from `seed` by `mode` ("copy" or "worktree")."""

    path: str
    seed: str = ""
    mode: Literal["copy", "worktree"] = "copy"
    #: Leave a `KEEP_SUFFIX` marker beside it (a kept turn folder survives `sweep`).
    keep: bool = False


@dataclass(frozen=True)
class Remove:
    """Remove `path` (and its git worktree registration when it was seeded as one)."""

    path: str
    seed: str = ""
    worktree: bool = False


_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


def _name(text: str) -> str:
    out = "".join(c if c in _SAFE else "_" for c in text).lstrip(".")
    return out or "_"


@dataclass
class _Held:
    path: str
    policy: WorkspacePolicy
    remove: Remove
    turns: set[str] = field(default_factory=set)
    #: The topic was deleted while a turn held the folder: the last release removes it.
    forgotten: bool = False


class WorkspaceBook:
    """Which standalone folders exist and which turns hold them (one per daemon)."""

    def __init__(self, root: str) -> None:
        self.root = root
        self._turn: dict[str, _Held] = {}  # turn id -> its own folder
        self._topic: dict[str, _Held] = {}  # topic id -> the topic's folder
        self._removed: set[str] = set()

    def acquire(
        self, topic_id: str, turn_id: str, policy: WorkspacePolicy, *, seed_is_repo: bool = False
    ) -> tuple[str, list[Create]]:
        """The folder turn `turn_id` works in, and what to create first (nothing when the
        topic's folder is already there)."""
        mode: Literal["copy", "worktree"] = "copy"
        if policy.seed and (
            policy.seed_mode == "worktree" or (policy.seed_mode == "auto" and seed_is_repo)
        ):
            mode = "worktree"
        if policy.scope == "topic":
            held = self._topic.get(topic_id)
            if held is not None:
                held.turns.add(turn_id)
                return held.path, []
            path = str(PurePosixPath(self.root, "topic", _name(topic_id)))
            held = _Held(path, policy, Remove(path, policy.seed, mode == "worktree"), {turn_id})
            self._topic[topic_id] = held
            # Created if missing: after a restart the topic's folder is still there.
            return path, [Create(path, policy.seed, mode)]
        if turn_id in self._turn:
            return self._turn[turn_id].path, []
        path = str(PurePosixPath(self.root, "turn", _name(topic_id), _name(turn_id)))
        held = _Held(path, policy, Remove(path, policy.seed, mode == "worktree"), {turn_id})
        self._turn[turn_id] = held
        return path, [Create(path, policy.seed, mode, keep=policy.keep)]

    def release(self, topic_id: str, turn_id: str) -> list[Remove]:
        """Turn `turn_id` ended and its final status is stored: what to remove now. Called
        once per turn; a second call (or a turn that held nothing) returns nothing."""
        out: list[Remove] = []
        held = self._turn.pop(turn_id, None)
        if held is not None and not held.policy.keep:
            out.append(held.remove)
        topic = self._topic.get(topic_id)
        if topic is not None:
            topic.turns.discard(turn_id)
            if topic.forgotten and not topic.turns:
                del self._topic[topic_id]
                if not topic.policy.keep:
                    out.append(topic.remove)
        return self._once(out)

    def forget(self, topic_id: str) -> list[Remove]:
        """The topic is deleted: its folder goes now, or, while a turn still holds it, at
        that turn's `release`."""
        held = self._topic.get(topic_id)
        if held is None:
            return []
        if held.turns:
            held.forgotten = True
            return []
        del self._topic[topic_id]
        return [] if held.policy.keep else self._once([held.remove])

    def holds(self, path: str) -> bool:
        return any(h.path == path for h in (*self._turn.values(), *self._topic.values()))

    def _once(self, removes: Iterable[Remove]) -> list[Remove]:
        out = [r for r in removes if r.path not in self._removed]
        self._removed.update(r.path for r in out)
        return out


def sweep(root: str, listing: Mapping[str, Iterable[str]]) -> list[Remove]:
    """At start, before any turn: the turn folders a crash left behind. `listing` maps each
    topic folder name under `<root>/turn` to the names in it (folders and markers)."""
    out: list[Remove] = []
    for topic, names in sorted(listing.items()):
        names = set(names)
        for name in sorted(names):
            if name.endswith(KEEP_SUFFIX) or f"{name}{KEEP_SUFFIX}" in names:
                continue
            out.append(Remove(str(PurePosixPath(root, "turn", topic, name))))
    return out


__all__ = [
    "KEEP_SUFFIX",
    "OPTION",
    "Create",
    "Remove",
    "WorkspaceBook",
    "WorkspacePolicy",
    "parse_workspace",
    "sweep",
    "workspace_of",
]
