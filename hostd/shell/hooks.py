"""Hooks: an assistant's create/next callables, and plugin observers of every turn.

Two kinds, with different error policies on purpose:

- **Assistant hooks** (`[hooks] create = "module:function"` in an assistant file) are part of
  the assistant's behaviour: the create hook may change the options or delegate the turn to
  another assistant; the next hook may continue with another message, delegate, or finish
  with a custom response. A hook that cannot be loaded, raises, or returns something that is
  not a hook result fails the turn with `HookError` (the user must see it).
- **Observers** (entry point group `hostd.hooks`) watch turns: usage accounting, logging,
  metrics. They must never break a turn, so they are composed in a fixed order (built-ins
  first, then entry points sorted by name) with these rules:
    * `turn_start` / `turn_finish` / `step` / `tool` / `usage`: every observer in order; one
      that raises is logged and skipped, the rest still run;
    * `prepare_step`: before each driver step is sent (the turn's first, each continue, a
      delegated child's first; not a retry), a chain: each observer gets the previous one's
      `StepPrep` and returns what to send; one that raises (or returns the wrong type) is
      logged and skipped, its input passed on unchanged. A stop cancels it; a chain slower
      than `turns.PREPARE_STEP_TIMEOUT` is given up (the step goes unprepared). Only when an
      observer overrides it does a turn wait for it at all (`ObserverChain.prepares`);
    * `error`: every observer runs; any one may ask for a retry; retries are bounded by
      `max_retries`.

A hook or observer method may be a plain function or a coroutine function; results that are
awaitable are awaited, so no async library is imported here.
"""

from __future__ import annotations

import importlib
import inspect
import logging
from collections.abc import Iterable
from importlib.metadata import entry_points
from typing import Any

# The values hooks see and return live in the core (the turn machine reads them).
from hostd.core.hook_api import (
    Continue,
    CreateResult,
    Delegate,
    ErrorInfo,
    Finish,
    HookContext,
    NextResult,
    StepPrep,
    TurnInfo,
    UpdateOptions,
)
from hostd.core.turn_record import StepRecord, TurnOutcome
from hostd_protocol.common import ToolCall, ToolResult, Usage, sum_usage
from hostd_protocol.errors import HookError

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "hostd.hooks"


# --- assistant hooks: what they see and what they may return ------------------------------------


def load_callable(spec: str, *, what: str = "hook") -> Any:
    """Import "module:function" (dotted attribute paths allowed); raises `HookError`."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise HookError(f"{what} {spec!r} must be 'module:function'", details={"hook": spec})
    try:
        obj: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except Exception as exc:
        raise HookError(
            f"cannot load {what} {spec!r}: {type(exc).__name__}: {exc}", details={"hook": spec}
        ) from exc
    if not callable(obj):
        raise HookError(f"{what} {spec!r} is not callable", details={"hook": spec})
    return obj


async def _call(fn: Any, *args: Any) -> Any:
    result = fn(*args)
    if inspect.isawaitable(result):
        result = await result
    return result


async def run_create_hook(spec: str, ctx: HookContext) -> CreateResult:
    """Call an assistant's create hook. A plain dict means `UpdateOptions(dict)`."""
    fn = load_callable(spec, what="create hook")
    try:
        result = await _call(fn, ctx)
    except HookError:
        raise
    except Exception as exc:
        raise HookError(
            f"create hook {spec!r} raised {type(exc).__name__}: {exc}", details={"hook": spec}
        ) from exc
    if isinstance(result, dict):
        return UpdateOptions(result)
    if result is None or isinstance(result, UpdateOptions | Delegate):
        return result
    raise HookError(
        f"create hook {spec!r} returned a {type(result).__name__}; expected None, a dict, "
        f"UpdateOptions or Delegate",
        details={"hook": spec},
    )


async def run_next_hook(spec: str, ctx: HookContext) -> NextResult:
    """Call an assistant's next hook."""
    fn = load_callable(spec, what="next hook")
    try:
        result = await _call(fn, ctx)
    except HookError:
        raise
    except Exception as exc:
        raise HookError(
            f"next hook {spec!r} raised {type(exc).__name__}: {exc}", details={"hook": spec}
        ) from exc
    if result is None or isinstance(result, Continue | Delegate | Finish):
        return result
    raise HookError(
        f"next hook {spec!r} returned a {type(result).__name__}; expected None, Continue, "
        f"Delegate or Finish",
        details={"hook": spec},
    )


# --- observers ----------------------------------------------------------------------------------


class TurnObserver:
    """Base class for observers: override what you need; every method is a no-op here.

    Methods may be `async def`. Register a subclass (or a factory returning an instance)
    under the `hostd.hooks` entry point group.
    """

    name: str = ""

    def turn_start(self, info: TurnInfo) -> Any:
        return None

    def turn_finish(self, info: TurnInfo, outcome: TurnOutcome) -> Any:
        return None

    def step(self, info: TurnInfo, step: StepRecord) -> Any:
        return None

    def tool(self, info: TurnInfo, event: ToolCall | ToolResult) -> Any:
        return None

    def usage(self, info: TurnInfo, usage: Usage) -> Any:
        return None

    def prepare_step(self, prep: StepPrep) -> Any:
        return prep

    def error(self, info: ErrorInfo) -> Any:
        """Return True to ask for a retry of the failed step."""
        return False


def _name_of(observer: object) -> str:
    return getattr(observer, "name", "") or type(observer).__name__


class ObserverChain:
    """Observers composed in a fixed order with the error policy in the module docstring."""

    def __init__(self, observers: Iterable[object] = (), *, max_retries: int = 2) -> None:
        self.observers: list[object] = list(observers)
        self.max_retries = max_retries

    @property
    def prepares(self) -> bool:
        """Whether an observer prepares steps (one that keeps `TurnObserver`'s no-op does
        not): only then does a turn offer each step to `prepare_step` before sending it."""
        for obs in self.observers:
            fn = getattr(obs, "prepare_step", None)
            if fn is not None and getattr(fn, "__func__", fn) is not TurnObserver.prepare_step:
                return True
        return False

    async def _each(self, method: str, *args: Any) -> None:
        for obs in self.observers:
            fn = getattr(obs, method, None)
            if fn is None:
                continue
            try:
                await _call(fn, *args)
            except Exception:
                log.exception("hook observer %s.%s failed; skipped", _name_of(obs), method)

    async def turn_start(self, info: TurnInfo) -> None:
        await self._each("turn_start", info)

    async def turn_finish(self, info: TurnInfo, outcome: TurnOutcome) -> None:
        await self._each("turn_finish", info, outcome)

    async def step(self, info: TurnInfo, step: StepRecord) -> None:
        await self._each("step", info, step)

    async def tool(self, info: TurnInfo, event: ToolCall | ToolResult) -> None:
        await self._each("tool", info, event)

    async def usage(self, info: TurnInfo, usage: Usage) -> None:
        await self._each("usage", info, usage)

    async def prepare_step(self, prep: StepPrep) -> StepPrep:
        for obs in self.observers:
            fn = getattr(obs, "prepare_step", None)
            if fn is None:
                continue
            try:
                result = await _call(fn, prep)
            except Exception:
                log.exception("hook observer %s.prepare_step failed; skipped", _name_of(obs))
                continue
            if isinstance(result, StepPrep):
                prep = result
            elif result is not None:
                log.warning(
                    "hook observer %s.prepare_step returned a %s, not a StepPrep; ignored",
                    _name_of(obs),
                    type(result).__name__,
                )
        return prep

    async def error(self, info: ErrorInfo) -> bool:
        """Offer the error to every observer; True when one asked for a retry and the bound
        (`max_retries` retries per step) allows it."""
        wants_retry = False
        for obs in self.observers:
            fn = getattr(obs, "error", None)
            if fn is None:
                continue
            try:
                if await _call(fn, info) is True:
                    wants_retry = True
            except Exception:
                log.exception("hook observer %s.error failed; skipped", _name_of(obs))
        return wants_retry and info.attempt < self.max_retries


def discover_observers(group: str = ENTRY_POINT_GROUP) -> list[object]:
    """Observers from the `hostd.hooks` entry points, sorted by name. One that fails to load
    is logged and left out (the pygls plugin rule), never fatal."""
    found: list[object] = []
    for ep in sorted(entry_points(group=group), key=lambda e: e.name):
        try:
            obj = ep.load()
            if inspect.isclass(obj) or (callable(obj) and not hasattr(obj, "turn_start")):
                obj = obj()
        except Exception:
            log.exception("hook observer %s (%s) failed to load; skipped", ep.name, ep.value)
            continue
        found.append(obj)
    return found


# --- the built-in observer: usage and cost accounting -------------------------------------------




class UsageAccounting(TurnObserver):
    """Token and cost totals per turn and per topic, from the drivers' `UsageEvent`s.

    A driver's usage event is cumulative for its turn, so the newest one replaces the turn's
    figure; a topic's total is the sum over its turns (delegated child turns included).
    """

    name = "usage"

    def __init__(self) -> None:
        self._turns: dict[str, Usage] = {}
        self._topic_of: dict[str, str] = {}

    def usage(self, info: TurnInfo, usage: Usage) -> None:
        self._turns[info.turn_id] = usage
        self._topic_of[info.turn_id] = info.topic_id

    def turn_usage(self, turn_id: str) -> Usage:
        return self._turns.get(turn_id, Usage())

    def topic_usage(self, topic_id: str) -> Usage:
        return sum_usage(u for t, u in self._turns.items() if self._topic_of[t] == topic_id)

    def turns_of(self, topic_id: str) -> dict[str, Usage]:
        """Each turn's figure for one topic, in the order the turns first reported usage."""
        return {t: u for t, u in self._turns.items() if self._topic_of[t] == topic_id}

    def topics(self) -> dict[str, Usage]:
        """Every topic's total, for `hostd usage`."""
        return {topic: self.topic_usage(topic) for topic in sorted(set(self._topic_of.values()))}


def default_chain(
    *, discover: bool = True, max_retries: int = 2
) -> tuple[ObserverChain, UsageAccounting]:
    """The daemon's chain: usage accounting first, then the installed observers by name."""
    usage = UsageAccounting()
    observers: list[object] = [usage]
    if discover:
        observers.extend(discover_observers())
    return ObserverChain(observers, max_retries=max_retries), usage


__all__ = [
    "ENTRY_POINT_GROUP",
    "Continue",
    "CreateResult",
    "Delegate",
    "ErrorInfo",
    "Finish",
    "HookContext",
    "NextResult",
    "ObserverChain",
    "StepPrep",
    "TurnInfo",
    "TurnObserver",
    "UpdateOptions",
    "UsageAccounting",
    "discover_observers",
    "load_callable",
    "run_create_hook",
    "run_next_hook",
]
