"""The daemon freezes its start-up heap out of the cyclic GC when it owns the process."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest
import trio

from hostd.shell.daemon import DaemonConfig
from hostd.shell.heap import freeze_startup_heap
from hostd.shell.paths import Paths

from .conftest import start_daemon


@pytest.fixture
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()  # the test process keeps its own collector afterwards


def test_freeze_moves_live_objects_out_of_collection(unfrozen: None) -> None:
    kept = [[i] for i in range(100)]
    frozen = freeze_startup_heap()
    assert frozen >= len(kept)
    assert gc.get_freeze_count() == frozen
    # Nothing left for the collector to walk but what was made after the freeze.
    assert len(gc.get_objects()) < frozen


def test_freeze_does_not_keep_startup_garbage(unfrozen: None) -> None:
    class Node:
        ref: object = None

    a, b = Node(), Node()
    a.ref, b.ref = b, a  # a cycle only the cyclic GC can free
    gone = weakref.ref(a)
    del a, b
    freeze_startup_heap()
    assert gone() is None


async def test_daemon_freezes_once_serving(
    nursery: trio.Nursery, paths: Paths, unfrozen: None
) -> None:
    r = await start_daemon(
        nursery, paths, config=DaemonConfig(default_driver="fake", freeze_startup_heap=True)
    )
    try:
        assert gc.get_freeze_count() > 0
    finally:
        await r.stop()


async def test_embedded_daemon_leaves_the_collector_alone(
    nursery: trio.Nursery, paths: Paths, unfrozen: None
) -> None:
    r = await start_daemon(nursery, paths)
    try:
        assert gc.get_freeze_count() == 0
    finally:
        await r.stop()
