"""The interpreter settings of a process that is the daemon: `hostd serve` applies them (the
start-up heap frozen out of the cyclic GC, a short GIL switch interval); a daemon embedded in
another process (the tests) leaves the process's settings alone."""

from __future__ import annotations

import gc
import sys
import weakref
from collections.abc import Iterator

import pytest
import trio

from hostd.cli.daemon_cmds import serve_config
from hostd.cli.main import build_parser
from hostd.shell.daemon import DaemonConfig
from hostd.shell.interpreter import (
    SERVE_SWITCH_INTERVAL,
    freeze_startup_heap,
    set_switch_interval,
)
from hostd.shell.paths import Paths

from .conftest import start_daemon


@pytest.fixture
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()  # the test process keeps its own collector afterwards


@pytest.fixture
def switch_interval() -> Iterator[float]:
    before = sys.getswitchinterval()
    yield before
    sys.setswitchinterval(before)  # process-wide: give the other tests theirs back


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


def test_hostd_serve_applies_the_interpreter_settings() -> None:
    parser, _ = build_parser("serve")
    config = serve_config(parser.parse_args(["serve"]), None)
    assert config.freeze_startup_heap is True
    assert config.switch_interval == SERVE_SWITCH_INTERVAL
    # Shorter than CPython's 5 ms, or setting it would be pointless.
    assert 0 < SERVE_SWITCH_INTERVAL < 0.005


def test_embedded_default_config_leaves_the_interpreter_alone() -> None:
    config = DaemonConfig()
    assert config.freeze_startup_heap is False
    assert config.switch_interval is None


async def test_daemon_sets_the_switch_interval_once_serving(
    nursery: trio.Nursery, paths: Paths, switch_interval: float
) -> None:
    wanted = 0.0007 if switch_interval != 0.0007 else 0.0009
    r = await start_daemon(
        nursery, paths, config=DaemonConfig(default_driver="fake", switch_interval=wanted)
    )
    try:
        assert sys.getswitchinterval() == pytest.approx(wanted)
    finally:
        await r.stop()


async def test_embedded_daemon_keeps_the_switch_interval(
    nursery: trio.Nursery, paths: Paths, switch_interval: float
) -> None:
    r = await start_daemon(nursery, paths)
    try:
        assert sys.getswitchinterval() == switch_interval
    finally:
        await r.stop()


@pytest.mark.parametrize("seconds", [0.0, -0.001])
def test_switch_interval_must_be_positive(seconds: float, switch_interval: float) -> None:
    with pytest.raises(ValueError, match=r"^switch interval must be > 0 seconds, not "):
        set_switch_interval(seconds)
    assert sys.getswitchinterval() == switch_interval
