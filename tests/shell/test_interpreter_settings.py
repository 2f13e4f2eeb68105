"""The interpreter settings of a process that is the daemon: `hostd serve` applies them (the
start-up heap frozen out of the cyclic GC, full passes at quiet moments, a short GIL switch
interval); a daemon embedded in another process (the tests) leaves the process's settings
alone."""

from __future__ import annotations

import gc
import sys
import weakref
from collections.abc import Iterator

import pytest
import trio
import trio.testing

from hostd.cli.daemon_cmds import serve_config
from hostd.cli.main import build_parser
from hostd.shell.daemon import DaemonConfig
from hostd.shell.interpreter import (
    FULL_PASS_AFTER,
    SERVE_SWITCH_INTERVAL,
    QuietCollector,
    collect_when_quiet,
    freeze_startup_heap,
    set_switch_interval,
)
from hostd.shell.paths import Paths

from .conftest import start_daemon


@pytest.fixture
def unfrozen() -> Iterator[tuple[int, ...]]:
    thresholds = gc.get_threshold()
    gc.unfreeze()
    yield thresholds
    gc.unfreeze()  # the test process keeps its own collector afterwards
    gc.set_threshold(*thresholds)


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
    nursery: trio.Nursery, paths: Paths, unfrozen: tuple[int, ...]
) -> None:
    r = await start_daemon(
        nursery, paths, config=DaemonConfig(default_driver="fake", freeze_startup_heap=True)
    )
    try:
        await trio.testing.wait_all_tasks_blocked()
        assert gc.get_freeze_count() > 0
        # Full passes wait for quiet moments; the young generations keep their thresholds.
        assert gc.get_threshold() == (*unfrozen[:2], FULL_PASS_AFTER)
    finally:
        await r.stop()


async def test_embedded_daemon_leaves_the_collector_alone(
    nursery: trio.Nursery, paths: Paths, unfrozen: tuple[int, ...]
) -> None:
    r = await start_daemon(nursery, paths)
    try:
        await trio.testing.wait_all_tasks_blocked()
        assert gc.get_freeze_count() == 0
        assert gc.get_threshold() == unfrozen
    finally:
        await r.stop()


def test_a_full_pass_is_due_only_when_quiet_and_something_was_promoted() -> None:
    pacer = QuietCollector(share=0.05, looks=2)
    assert not pacer.due(10.0, 1.0, 5)  # the first look only sets the baseline
    assert not pacer.due(11.0, 1.5, 5)  # half a core over the last second: busy
    assert not pacer.due(12.0, 1.51, 5)  # 1 % of a core: quiet once, not yet twice
    assert pacer.due(13.0, 1.52, 5)  # quiet twice in a row, and a young pass promoted
    assert not pacer.due(14.0, 1.53, 5)  # counting starts again after a collection
    assert not pacer.due(15.0, 1.54, 0)  # quiet twice, but nothing reached generation 2
    assert not pacer.due(15.0, 1.54, 3)  # no time passed: no share to judge
    assert not pacer.due(16.0, 2.0, 3)  # busy again: the quiet run is broken
    assert not pacer.due(17.0, 2.01, 3)


async def test_collect_when_quiet_waits_for_the_stream_to_stop(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A process busy until t=5 s, then quiet: full passes only after that, never before."""
    collected: list[float] = []

    def cpu() -> float:  # 0.6 of a core until 5 s, then nothing
        return 0.6 * min(trio.current_time(), 5.0)

    with trio.move_on_after(9.5):
        await collect_when_quiet(
            1.0,
            full_pass_after=None,
            collect=lambda: collected.append(trio.current_time()),
            cpu=cpu,
            young_passes=lambda: 1,
        )
    assert collected and min(collected) > 5.0
    assert collected == sorted(collected)


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
