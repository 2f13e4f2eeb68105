"""Hooks: assistant create/next hooks, observer composition order and error policy."""

from __future__ import annotations

import logging
import sys
import types
from collections.abc import Iterator
from typing import Any

import pytest

from hostd.core.turn_record import StepRecord, TurnOutcome
from hostd.shell.hooks import (
    Continue,
    Delegate,
    ErrorInfo,
    Finish,
    HookContext,
    ObserverChain,
    StepPrep,
    TurnInfo,
    TurnObserver,
    UpdateOptions,
    UsageAccounting,
    default_chain,
    load_callable,
    run_create_hook,
    run_next_hook,
)
from hostd_protocol.common import ToolCall, Usage
from hostd_protocol.errors import HookError

INFO = TurnInfo(topic_id="T", turn_id="t1", assistant="a")
CTX = HookContext(topic_id="T", turn_id="t1", assistant="a", text="hi", options={})


@pytest.fixture
def hook_module() -> Iterator[types.ModuleType]:
    """A throwaway module the hooks are loaded from by name."""
    mod = types.ModuleType("fake_hooks_mod")

    def returns(value: Any) -> Any:
        return lambda ctx: value

    async def async_delegate(ctx: HookContext) -> Delegate:
        return Delegate("other", text=ctx.text.upper())

    def boom(ctx: HookContext) -> None:
        raise ValueError("bad hook")

    mod.as_dict = returns({"temperature": 0})  # type: ignore[attr-defined]
    mod.update = returns(UpdateOptions({"x": 1}))  # type: ignore[attr-defined]
    mod.none = returns(None)  # type: ignore[attr-defined]
    mod.delegate = async_delegate  # type: ignore[attr-defined]
    mod.boom = boom  # type: ignore[attr-defined]
    mod.wrong = returns(42)  # type: ignore[attr-defined]
    mod.cont = returns(Continue("more"))  # type: ignore[attr-defined]
    mod.finish = returns(Finish("custom"))  # type: ignore[attr-defined]
    mod.not_callable = 3  # type: ignore[attr-defined]
    sys.modules[mod.__name__] = mod
    yield mod
    del sys.modules[mod.__name__]


async def test_create_hook_results(hook_module: types.ModuleType) -> None:
    assert await run_create_hook("fake_hooks_mod:as_dict", CTX) == UpdateOptions({"temperature": 0})
    assert await run_create_hook("fake_hooks_mod:update", CTX) == UpdateOptions({"x": 1})
    assert await run_create_hook("fake_hooks_mod:none", CTX) is None
    assert await run_create_hook("fake_hooks_mod:delegate", CTX) == Delegate("other", text="HI")


async def test_next_hook_results(hook_module: types.ModuleType) -> None:
    assert await run_next_hook("fake_hooks_mod:cont", CTX) == Continue("more")
    assert await run_next_hook("fake_hooks_mod:finish", CTX) == Finish("custom")
    assert await run_next_hook("fake_hooks_mod:none", CTX) is None
    with pytest.raises(HookError, match=r"^next hook 'fake_hooks_mod:as_dict' returned a dict"):
        await run_next_hook("fake_hooks_mod:as_dict", CTX)


async def test_hook_failures_are_hook_errors(hook_module: types.ModuleType) -> None:
    with pytest.raises(
        HookError, match=r"^create hook 'fake_hooks_mod:boom' raised ValueError: bad hook$"
    ):
        await run_create_hook("fake_hooks_mod:boom", CTX)
    with pytest.raises(HookError, match=r"returned a int; expected None, a dict"):
        await run_create_hook("fake_hooks_mod:wrong", CTX)
    with pytest.raises(
        HookError, match=r"^cannot load create hook 'no_such_mod_xyz:f': ModuleNotFoundError"
    ):
        await run_create_hook("no_such_mod_xyz:f", CTX)
    with pytest.raises(HookError, match=r"^hook 'fake_hooks_mod:missing' |^cannot load hook"):
        load_callable("fake_hooks_mod:missing")
    with pytest.raises(HookError, match=r"is not callable$"):
        load_callable("fake_hooks_mod:not_callable")
    with pytest.raises(HookError, match=r"must be 'module:function'$"):
        load_callable("nocolon")


class Recorder(TurnObserver):
    def __init__(
        self, name: str, log: list[str], *, fail: frozenset[str] = frozenset(), retry: bool = False
    ) -> None:
        self.name, self.log, self.fail, self.retry = name, log, fail, retry

    def _hit(self, what: str) -> None:
        self.log.append(f"{self.name}.{what}")
        if what in self.fail:
            raise RuntimeError(f"{self.name} {what} failed")

    def turn_start(self, info: TurnInfo) -> None:
        self._hit("start")

    async def turn_finish(self, info: TurnInfo, outcome: TurnOutcome) -> None:
        self._hit("finish")

    def step(self, info: TurnInfo, step: StepRecord) -> None:
        self._hit("step")

    def tool(self, info: TurnInfo, event: Any) -> None:
        self._hit("tool")

    def prepare_step(self, prep: StepPrep) -> StepPrep:
        self._hit("prepare")
        return prep.with_options(chain=[*prep.options.get("chain", []), self.name])

    def error(self, info: ErrorInfo) -> bool:
        self._hit("error")
        return self.retry


async def test_observers_run_in_order_and_a_raising_one_is_skipped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log: list[str] = []
    chain = ObserverChain(
        [
            Recorder("a", log),
            Recorder("b", log, fail=frozenset({"start", "tool"})),
            Recorder("c", log),
        ]
    )
    with caplog.at_level(logging.ERROR, logger="hostd.shell.hooks"):
        await chain.turn_start(INFO)
        await chain.tool(INFO, ToolCall(call_id="1", name="x"))
        await chain.turn_finish(INFO, TurnOutcome("t1", "success"))
    assert log == [
        "a.start",
        "b.start",
        "c.start",
        "a.tool",
        "b.tool",
        "c.tool",
        "a.finish",
        "b.finish",
        "c.finish",
    ]
    assert [r.getMessage() for r in caplog.records] == [
        "hook observer b.turn_start failed; skipped",
        "hook observer b.tool failed; skipped",
    ]


async def test_prepare_step_chain_passes_results_and_skips_failures() -> None:
    log: list[str] = []
    chain = ObserverChain(
        [Recorder("a", log), Recorder("b", log, fail=frozenset({"prepare"})), Recorder("c", log)]
    )
    prep = await chain.prepare_step(StepPrep(turn_id="t1", text="hi", options={"k": 1}))
    assert prep.options == {"k": 1, "chain": ["a", "c"]}
    assert log == ["a.prepare", "b.prepare", "c.prepare"]


def test_a_chain_prepares_steps_only_when_an_observer_overrides_prepare_step() -> None:
    class Watcher(TurnObserver):
        def turn_start(self, info: TurnInfo) -> None:
            pass

    class Plain:  # no TurnObserver base: only what it defines counts
        def step(self, info: TurnInfo, step: StepRecord) -> None:
            pass

    assert not ObserverChain([]).prepares
    assert not ObserverChain([UsageAccounting(), Watcher(), Plain()]).prepares
    assert ObserverChain([Watcher(), Recorder("r", [])]).prepares


async def test_error_runs_every_observer_and_any_may_retry_bounded() -> None:
    log: list[str] = []
    chain = ObserverChain(
        [
            Recorder("a", log, fail=frozenset({"error"})),
            Recorder("b", log, retry=True),
            Recorder("c", log),
        ],
        max_retries=2,
    )

    def info(attempt: int) -> ErrorInfo:
        return ErrorInfo("T", "t1", "llm", "boom", "driver_turn_error", attempt)

    assert await chain.error(info(0)) is True
    assert log == ["a.error", "b.error", "c.error"]  # all ran although b asked to retry
    assert await chain.error(info(1)) is True
    assert await chain.error(info(2)) is False  # bound reached
    quiet = ObserverChain([Recorder("x", [])])
    assert await quiet.error(info(0)) is False


async def test_usage_accounting_per_turn_and_topic() -> None:
    chain, usage = default_chain(discover=False)
    t1 = TurnInfo(topic_id="T", turn_id="t1", assistant="a")
    t2 = TurnInfo(topic_id="T", turn_id="t2", assistant="a")
    other = TurnInfo(topic_id="U", turn_id="t3", assistant="a")
    await chain.usage(t1, Usage(input_tokens=10, output_tokens=1, cost_usd=0.5))
    await chain.usage(t1, Usage(input_tokens=20, output_tokens=5, cost_usd=1.0))  # cumulative
    await chain.usage(t2, Usage(input_tokens=1, cache_read_tokens=7, cost_usd=0.25))
    await chain.usage(other, Usage(output_tokens=3))
    assert usage.turn_usage("t1") == Usage(input_tokens=20, output_tokens=5, cost_usd=1.0)
    assert usage.topic_usage("T") == Usage(
        input_tokens=21, output_tokens=5, cache_read_tokens=7, cost_usd=1.25
    )
    assert usage.topics() == {"T": usage.topic_usage("T"), "U": Usage(output_tokens=3)}
    assert isinstance(chain.observers[0], UsageAccounting)


class _EP:
    def __init__(self, name: str, obj: Any) -> None:
        self.name, self.value, self._obj = name, f"mod:{name}", obj

    def load(self) -> Any:
        if isinstance(self._obj, Exception):
            raise self._obj
        return self._obj


def test_discover_sorts_by_name_and_skips_broken(monkeypatch: pytest.MonkeyPatch) -> None:
    import hostd.shell.hooks as hooks_mod

    log: list[str] = []
    instance = Recorder("inst", log)
    eps = [
        _EP("zeta", lambda: Recorder("zeta", log)),  # factory
        _EP("alpha", UsageAccounting),  # class
        _EP("broken", ImportError("no module")),
        _EP("mid", instance),  # ready instance
    ]
    monkeypatch.setattr(hooks_mod, "entry_points", lambda group: eps)
    found = hooks_mod.discover_observers()
    assert [type(o).__name__ for o in found] == ["UsageAccounting", "Recorder", "Recorder"]
    assert found[1] is instance and getattr(found[2], "name", "") == "zeta"
