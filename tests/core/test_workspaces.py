"""Standalone workspaces: policy parsing and the book of who holds which folder (pure)."""

from __future__ import annotations

import pytest

from hostd.core.workspaces import (
    Create,
    Remove,
    WorkspaceBook,
    WorkspacePolicy,
    parse_workspace,
    sweep,
)
from hostd_protocol.errors import InvalidArgument

TURN = WorkspacePolicy("turn")
TOPIC = WorkspacePolicy("topic")


@pytest.mark.parametrize(
    ("value", "policy"),
    [
        (None, None),
        ("none", None),
        ("turn", TURN),
        ("topic", TOPIC),
        ({"scope": "topic", "seed": "/src", "keep": True},
         WorkspacePolicy("topic", "/src", "auto", True)),
        ({"seed": "~/p", "seed_mode": "copy"}, WorkspacePolicy("turn", "~/p", "copy")),
    ],
)
def test_parse(value: object, policy: WorkspacePolicy | None) -> None:
    assert parse_workspace(value) == policy


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("forever", r"^workspace 'forever' is not a policy"),
        ({"scope": "day"}, r"^workspace scope 'day' is not one of turn, topic$"),
        ({"seed": "rel/path"}, r"^workspace seed must be an absolute path, not 'rel/path'$"),
        ({"seed_mode": "rsync"}, r"^workspace seed_mode 'rsync' is not one of"),
        ({"keep": "yes"}, r"^workspace keep must be true or false"),
        ({"where": 1}, r"^workspace has unknown keys \['where'\]"),
    ],
)
def test_bad_policies(value: object, message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        parse_workspace(value)


def test_a_turn_folder_is_fresh_and_removed_once_at_release() -> None:
    book = WorkspaceBook("/w")
    path, fx = book.acquire("t1", "u1", TURN)
    assert path == "/w/turn/t1/u1" and fx == [Create(path)]
    assert book.acquire("t1", "u1", TURN) == (path, [])  # the same turn asks again
    other, _ = book.acquire("t1", "u2", TURN)
    assert other != path
    assert book.release("t1", "u1") == [Remove(path)]
    assert book.release("t1", "u1") == []  # exactly once
    assert book.holds(other) and not book.holds(path)


def test_a_kept_turn_folder_is_not_removed() -> None:
    book = WorkspaceBook("/w")
    path, fx = book.acquire("t1", "u1", WorkspacePolicy("turn", keep=True))
    assert fx == [Create(path, keep=True)]
    assert book.release("t1", "u1") == []


def test_a_topic_folder_outlives_turns_and_goes_with_the_topic() -> None:
    book = WorkspaceBook("/w")
    path, fx = book.acquire("t1", "u1", TOPIC)
    assert path == "/w/topic/t1" and fx == [Create(path)]
    assert book.acquire("t1", "u2", TOPIC) == (path, [])
    assert book.release("t1", "u1") == []
    # Deleting the topic while turn u2 holds the folder removes nothing yet ...
    assert book.forget("t1") == []
    assert book.holds(path)
    # ... its release does, once.
    assert book.release("t1", "u2") == [Remove(path)]
    assert book.forget("t1") == [] and book.release("t1", "u2") == []


def test_a_topic_folder_is_removed_when_the_topic_goes_idle() -> None:
    book = WorkspaceBook("/w")
    path, _ = book.acquire("t1", "u1", TOPIC)
    book.release("t1", "u1")
    assert book.forget("t1") == [Remove(path)]
    assert book.forget("t1") == []


@pytest.mark.parametrize(("is_repo", "mode"), [(True, "worktree"), (False, "copy")])
def test_seed_mode_auto(is_repo: bool, mode: str) -> None:
    book = WorkspaceBook("/w")
    path, fx = book.acquire("t", "u", WorkspacePolicy("turn", "/src"), seed_is_repo=is_repo)
    assert fx == [Create(path, "/src", mode)]  # type: ignore[arg-type]
    assert book.release("t", "u") == [Remove(path, "/src", mode == "worktree")]


def test_sweep_removes_what_a_crash_left_but_kept_folders() -> None:
    listing = {"t1": ["u1", "u2", "u2.keep"], "t2": ["u3"]}
    assert sweep("/w", listing) == [Remove("/w/turn/t1/u1"), Remove("/w/turn/t2/u3")]


def test_odd_ids_stay_inside_the_root() -> None:
    book = WorkspaceBook("/w")
    path, _ = book.acquire("../../etc", "../x", TURN)
    assert path.startswith("/w/turn/") and ".." not in path.split("/")
