"""The turn pipeline's hooks, delegation, steps and observers, for the daemon's turns.

In the daemon the topic runtime owns each turn's start and end (one `TurnStarted`, one
`TurnEnded`, `SaveTurn`). `DaemonTurns` adds the pipeline's remaining steps around it through
three seams of `TopicHost`:

| seam | when | step |
|---|---|---|
| `start_turn(host, send)` | `StartTurn` reaches the host's driver loop, before the session opens | 9: create hook (options merged into `Send.options`, or a delegation, or a failure) |
| `hold_end(host, end)` | a driver's `TurnEnd` of the running turn, before the runtime sees it | 11: next hook (continue, delegate, finish), run as a task; the end is fed after it |
| `observe(topic_id, event)` | every emitted event | steps (`llm`, `tool`), the steps record at `TurnEnded`, plugin observers |

Rules this module guards:

- The runtime stays the only place a turn ends: this module never emits `TurnEnded`. It ends
  a turn by feeding the runtime a `TurnEnd` (a hook failed, the user stopped during a hook, a
  next hook finished or let the driver's end pass), so every turn still has exactly one
  `TurnEnded`, and a hook's failure is that turn's `error` with the hook's message.
- A delegation runs the delegate assistant as a child inside the root turn: its own driver
  session (supervisor key `<topic>/delegate<depth>`, closed when the turn ends) is sent the
  root's turn id, so its chunks land in the root turn's answer row; commands (stop,
  approvals, steers) go to it (`TopicHost.delegate_session`); its resume token is dropped
  (it is not the topic's); it never starts or ends the stream. Its `TurnEnd` (after its own
  next hook) ends the root turn: a delegation is the last step of the turn that made it.
- A stop during a hook takes effect when the hook returns (hooks are not cancelled): the
  turn then ends `stopped` without calling the driver (again).
- Steps (`hook_create`, `llm`, `tool`, `hook_next`, `delegate`, with depth) are kept in a
  `TurnRecord` and written once, at `TurnEnded`; a step still running gets the turn's status.
  A daemon killed mid-turn leaves that turn without steps (its record says `error`).
- Plugin observers (`hostd.hooks` entry points) never slow the stream: their calls are queued
  in order and awaited by `serve`. Usage accounting stays the bridge's built-in, synchronous.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import msgspec
import trio

from hostd.shell.store import store as st
from hostd_protocol.client_messages import (
    RowAppended,
    TopicEvent,
    TopicInfo,
    TurnEnded,
    TurnStarted,
    UsageUpdated,
)
from hostd_protocol.common import HistoryMessage, TextDelta, ToolCall, ToolResult
from hostd_protocol.driver_messages import ChunkEvent, DriverEvent, ResumeToken, Send, TurnEnd
from hostd_protocol.errors import DriverCrashed, DriverError, HookError, HostdError

# The pipeline's modules (assistants, hooks, turn_pipeline) load at the first turn, not at
# import: the daemon needs none of them before its socket is ready (docs/benchmarks.md "cli").
if TYPE_CHECKING:
    from hostd.core.assistants import AssistantConfig
    from hostd.core.turn_record import StepRecord, TurnOutcome, TurnRecord
    from hostd.shell.drivers.supervisor import DriverSession, SessionOptions, Supervisor
    from hostd.shell.hooks import Delegate, ObserverChain, TurnInfo
    from hostd.shell.topic_host import TopicHost
    from hostd.shell.turn_bridge import TurnBridge

log = logging.getLogger(__name__)


@dataclass
class _Frame:
    """The root assistant (depth 0) or a delegated child of one running turn."""

    assistant: AssistantConfig
    depth: int
    text: str
    options: dict[str, Any]
    history: list[HistoryMessage]
    #: The child's own session; None for the root (the topic's session).
    session: DriverSession | None = None
    session_key: str = ""
    continues: int = 0


@dataclass
class _Live:
    """What this module keeps about a topic's running turn."""

    turn_id: str
    record: TurnRecord
    info: TurnInfo
    #: Per-send options of the user's message (a delegate starts from these).
    send_options: dict[str, Any] = field(default_factory=dict)
    host: TopicHost | None = None
    frames: list[_Frame] = field(default_factory=list)
    llm: StepRecord | None = None
    tools: dict[str, StepRecord] = field(default_factory=dict)
    #: The answer text of the current driver step, kept only when a next hook will read it.
    collect: bool = False
    answer: list[str] = field(default_factory=list)
    over: bool = False

    @property
    def depth(self) -> int:
        return self.frames[-1].depth if self.frames else 0


class DaemonTurns:
    """Hooks, delegation, steps and observers around the runtime's turns (see module doc).

    Args:
        bridge: Loads assistants and session options; its `observe` (usage) is called first.
        supervisor: Opens and closes delegated children's sessions.
        writer: Where the steps of ended turns go.
        observers: Plugin observers, without usage; None: the `hostd.hooks` entry points,
            discovered at the first turn.
    """

    def __init__(
        self,
        bridge: TurnBridge,
        supervisor: Supervisor,
        writer: st.StoreWriter,
        *,
        observers: ObserverChain | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.bridge = bridge
        self.supervisor = supervisor
        self.writer = writer
        self._observers = observers
        self._clock = clock
        self._live: dict[str, _Live] = {}
        self._calls_send, self._calls_recv = trio.open_memory_channel[
            tuple[Callable[..., Any], tuple[Any, ...]]
        ](math.inf)
        self._nursery: trio.Nursery | None = None

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run observer calls in order, and own the tasks of next hooks and children."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            async for fn, args in self._calls_recv:
                try:
                    await fn(*args)
                except Exception:  # ObserverChain already isolates observers; belt and braces
                    log.exception("hook observer call %s failed", getattr(fn, "__name__", fn))

    @property
    def observers(self) -> ObserverChain:
        if self._observers is None:
            from hostd.shell.hooks import ObserverChain, discover_observers

            self._observers = ObserverChain(discover_observers())
        return self._observers

    @observers.setter
    def observers(self, chain: ObserverChain) -> None:
        self._observers = chain

    def _notify(self, method: str, *args: Any) -> None:
        if self.observers.observers:
            self._calls_send.send_nowait((getattr(self.observers, method), args))

    def _step_done(self, live: _Live, step: StepRecord) -> None:
        self._notify("step", live.info, step)

    # --- seam: every emitted event (synchronous, inside TopicHost.apply) ---------------------

    def observe(self, topic_id: str, event: TopicEvent) -> None:
        self.bridge.observe(topic_id, event)
        if isinstance(event, RowAppended):
            live = self._live.get(topic_id)
            if live is None:
                return
            chunk = event.chunk
            if isinstance(chunk, TextDelta):
                if live.collect:
                    live.answer.append(chunk.text)
            elif isinstance(chunk, ToolCall):
                live.tools[chunk.call_id] = live.record.begin_step(
                    "tool", self._clock(), chunk.name, depth=live.depth
                )
                self._notify("tool", live.info, chunk)
            elif isinstance(chunk, ToolResult):
                step = live.tools.pop(chunk.call_id, None)
                if step is not None:
                    if chunk.is_error:
                        live.record.end_step(step, self._clock(), "error", chunk.output[:200])
                    else:
                        live.record.end_step(step, self._clock())
                    self._step_done(live, step)
                self._notify("tool", live.info, chunk)
        elif isinstance(event, TurnStarted):
            from hostd.core.turn_record import TurnRecord
            from hostd.shell.hooks import TurnInfo

            self._live[topic_id] = _Live(
                turn_id=event.turn_id,
                record=TurnRecord(turn_id=event.turn_id, started=self._clock()),
                info=TurnInfo(
                    topic_id=topic_id,
                    turn_id=event.turn_id,
                    assistant="",
                    driver=event.driver,
                    model=event.model,
                ),
            )
        elif isinstance(event, UsageUpdated):
            # Kept per turn, so `hostd usage` survives a restart (batched, not durable: a
            # later figure of the same turn replaces it anyway).
            self.writer.put(st.PutTurnUsage(topic_id, event.turn_id, event.usage))
            live = self._live.get(topic_id)
            if live is not None and live.turn_id == event.turn_id:
                self._notify("usage", live.info, event.usage)
        elif isinstance(event, TurnEnded):
            live = self._live.get(topic_id)
            if live is not None and live.turn_id == event.turn_id:
                del self._live[topic_id]
                self._finish(topic_id, live, event)

    def _finish(self, topic_id: str, live: _Live, end: TurnEnded) -> None:
        live.over = True
        record = live.record
        record.set_status(end.status, end.error, end.error_code)
        outcome: TurnOutcome = record.finish(self._clock())
        self.writer.put(
            st.PutSteps(
                topic_id,
                live.turn_id,
                tuple(
                    st.StepRow(
                        kind=s.kind,
                        status=s.status,
                        started_at=s.started,
                        ended_at=s.ended,
                        data=_step_data(s),
                    )
                    for s in outcome.steps
                ),
            )
        )
        self._notify("turn_finish", live.info, outcome)
        if live.host is not None:
            live.host.delegate_session = None
        for frame in live.frames:
            if frame.session is not None and self._nursery is not None:
                self._nursery.start_soon(self._close_child, frame.session_key)

    async def _close_child(self, key: str) -> None:
        try:
            await self.supervisor.close(key)
        except HostdError as exc:
            log.info("closing delegated session %s: %s", key, exc)

    # --- seam: StartTurn, before the topic's session opens -----------------------------------

    async def start_turn(self, host: TopicHost, send: Send) -> Send | None:
        """The `Send` to write to the topic's driver, or None when this turn needs no driver
        call here (it was delegated, failed in its create hook, or was stopped meanwhile)."""
        live = self._live.get(host.topic_id)
        if live is None or live.turn_id != send.turn_id:
            return send
        live.host = host
        live.send_options = dict(send.options)
        try:
            assistant = self.bridge.assistant(host.info.assistant)
        except HostdError:
            # Opening the session reports the broken config as this turn's error.
            live.llm = live.record.begin_step("llm", self._clock(), live.info.driver)
            return send
        live.info = replace(live.info, assistant=assistant.name)
        live.record.assistant = assistant.name
        self._notify("turn_start", live.info)
        frame = _Frame(assistant, 0, send.text, dict(send.options), list(send.history))
        live.frames.append(frame)
        try:
            return await self._enter(host, live, frame, send)
        except Exception as exc:  # a bug here must end the turn, not take the topic down
            log.exception("turn %s: the create step failed", live.turn_id)
            self._end(host, live, "error", f"{type(exc).__name__}: {exc}", "internal_error")
            return None

    async def _enter(self, host: TopicHost, live: _Live, frame: _Frame, send: Send) -> Send | None:
        """A frame's create hook, then its `llm` step begins; returns the Send (see above)."""
        from hostd.shell.hooks import Delegate, HookContext, UpdateOptions, run_create_hook
        from hostd.shell.turn_pipeline import merge_options

        record = live.record
        hook = frame.assistant.create_hook
        if hook:
            step = record.begin_step("hook_create", self._clock(), hook, depth=frame.depth)
            ctx = HookContext(
                topic_id=host.topic_id,
                turn_id=live.turn_id,
                assistant=frame.assistant.name,
                text=frame.text,
                options=merge_options(
                    frame.assistant.options,
                    host.info.options if frame.depth == 0 else {},
                    frame.options,
                ),
                history=frame.history,
                depth=frame.depth,
            )
            try:
                created = await run_create_hook(hook, ctx)
            except HostdError as exc:
                record.end_step(step, self._clock(), "error", exc.message, exc.code)
                self._step_done(live, step)
                self._end(host, live, "error", exc.message, exc.code)
                return None
            record.end_step(step, self._clock())
            self._step_done(live, step)
            if self._gone(host, live):
                return None
            if isinstance(created, Delegate):
                await self._delegate(host, live, frame, created)
                return None
            if isinstance(created, UpdateOptions):
                frame.options = merge_options(frame.options, created.options)
                send = msgspec.structs.replace(send, options=frame.options)
        self._begin_llm(live, frame)
        return send

    def _begin_llm(self, live: _Live, frame: _Frame) -> None:
        live.collect = bool(frame.assistant.next_hook)
        live.answer.clear()
        detail = frame.session.driver if frame.session is not None else live.info.driver
        live.llm = live.record.begin_step("llm", self._clock(), detail, depth=frame.depth)

    # --- seam: the driver's TurnEnd, before the runtime sees it ------------------------------

    def hold_end(self, host: TopicHost, end: TurnEnd) -> bool:
        """True when `end` is held (a next hook decides what follows; it is fed later)."""
        live = self._live.get(host.topic_id)
        if live is None or end.turn_id != live.turn_id or not live.frames:
            return False
        frame = live.frames[-1]
        if live.llm is not None:
            live.record.end_step(live.llm, self._clock(), end.status, end.error, end.error_code)
            self._step_done(live, live.llm)
            live.llm = None
        if end.status != "success" or not frame.assistant.next_hook or self._nursery is None:
            return False
        self._nursery.start_soon(self._next, host, live, frame, end)
        return True

    async def _next(self, host: TopicHost, live: _Live, frame: _Frame, end: TurnEnd) -> None:
        try:
            await self._next_step(host, live, frame, end)
        except Exception as exc:
            log.exception("turn %s: the next step failed", live.turn_id)
            self._end(host, live, "error", f"{type(exc).__name__}: {exc}", "internal_error")

    async def _next_step(self, host: TopicHost, live: _Live, frame: _Frame, end: TurnEnd) -> None:
        from hostd.core.effects import ToDriver
        from hostd.shell.hooks import Continue, Delegate, Finish, HookContext, run_next_hook
        from hostd.shell.turn_pipeline import MAX_CONTINUES

        record = live.record
        hook = frame.assistant.next_hook
        step = record.begin_step("hook_next", self._clock(), hook, depth=frame.depth)
        ctx = HookContext(
            topic_id=host.topic_id,
            turn_id=live.turn_id,
            assistant=frame.assistant.name,
            text=frame.text,
            options=frame.options,
            history=frame.history,
            depth=frame.depth,
            answer="".join(live.answer),
            status=end.status,
        )
        try:
            nxt = await run_next_hook(hook, ctx)
        except HostdError as exc:
            record.end_step(step, self._clock(), "error", exc.message, exc.code)
            self._step_done(live, step)
            self._end(host, live, "error", exc.message, exc.code)
            return
        record.end_step(step, self._clock())
        self._step_done(live, step)
        if self._gone(host, live):
            return
        if nxt is None:
            self._feed(host, end)
        elif isinstance(nxt, Finish):
            if nxt.response:
                chunk = ChunkEvent(turn_id=live.turn_id, chunk=TextDelta(text=nxt.response))
                host.apply(host.runtime.driver_event(chunk, trio.current_time()))
            self._feed(host, end)
        elif isinstance(nxt, Delegate):
            await self._delegate(host, live, frame, nxt)
        else:
            assert isinstance(nxt, Continue)
            frame.continues += 1
            if frame.continues > MAX_CONTINUES:
                error = HookError(
                    f"next hook {hook!r} continued turn {live.turn_id} more than "
                    f"{MAX_CONTINUES} times; it must return None or Finish at some point",
                    details={"hook": hook},
                )
                self._end(host, live, "error", error.message, error.code)
                return
            caps = frame.session.capabilities if frame.session else host.runtime.capabilities
            if caps.needs_history:
                # A stateless driver must see the round it just answered.
                frame.history = [
                    *frame.history,
                    HistoryMessage(role="user", text=frame.text),
                    HistoryMessage(role="assistant", text=ctx.answer),
                ]
            frame.text = nxt.text
            self._begin_llm(live, frame)
            send = Send(
                turn_id=live.turn_id,
                text=nxt.text,
                history=frame.history if caps.needs_history else [],
                options=frame.options,
            )
            host.apply([ToDriver(send)])  # to the frame's session (the host routes it)

    # --- delegation ---------------------------------------------------------------------------

    async def _delegate(
        self, host: TopicHost, live: _Live, parent: _Frame, delegate: Delegate
    ) -> None:
        """Run `delegate.assistant` as a child of the turn; its end ends the root turn."""
        from hostd.core.turn_record import MAX_DEPTH
        from hostd.shell.turn_pipeline import merge_options

        record = live.record
        step = record.begin_step("delegate", self._clock(), delegate.assistant, depth=parent.depth)
        try:
            if len(live.frames) > MAX_DEPTH:
                chain = " -> ".join(f.assistant.name or "default" for f in live.frames)
                raise HookError(
                    f"delegation nested deeper than {MAX_DEPTH} levels ({chain} -> "
                    f"{delegate.assistant}); a create/next hook probably delegates in a loop",
                    details={"depth": len(live.frames)},
                )
            assistant = self.bridge.assistant(delegate.assistant)
            depth = parent.depth + 1
            child = _Frame(
                assistant,
                depth,
                text=delegate.text or parent.text,
                options=merge_options(live.send_options, delegate.options),
                history=parent.history,
                session_key=f"{host.topic_id}/delegate{depth}",
            )
            live.frames.append(child)
            send = Send(turn_id=live.turn_id, text=child.text, options=child.options)
            prepared = await self._enter(host, live, child, send)
            if prepared is None:
                return
            opts = _delegate_session_options(self.bridge, host.info, assistant)
            session = await self.supervisor.open(child.session_key, opts)
            child.session = session  # closed at the turn's end, whatever happens next
            if live.over:
                await self._close_child(child.session_key)
                return
            if self._gone(host, live):
                return
            host.delegate_session = session
            if live.llm is not None:
                live.llm.detail = session.driver
            if session.capabilities.needs_history:
                prepared = msgspec.structs.replace(prepared, history=child.history)
            assert self._nursery is not None
            self._nursery.start_soon(self._pump_child, host, live, session)
            await session.send(prepared)
        except HostdError as exc:
            record.end_step(step, self._clock(), "error", exc.message, exc.code)
            self._step_done(live, step)
            self._end(host, live, "error", exc.message, exc.code)

    async def _pump_child(self, host: TopicHost, live: _Live, session: DriverSession) -> None:
        """A child session's events into the host, like the topic's own pump."""
        from hostd.shell.drivers.supervisor import SessionEnded

        error: DriverError | None = None
        async for item in session.events:
            if isinstance(item, SessionEnded):
                error = item.error
                break
            batch: list[DriverEvent] = [e for e in item if not isinstance(e, ResumeToken)]
            if batch:
                host.feed(batch, trio.current_time())
        if live.over or host.closed or host.runtime.active_turn_id != live.turn_id:
            return
        lost = error or DriverCrashed(
            "the delegated driver session ended during a turn", driver=session.driver
        )
        host.apply(host.runtime.driver_lost(lost, trio.current_time()))

    # --- ending a turn through the runtime ----------------------------------------------------

    def _gone(self, host: TopicHost, live: _Live) -> bool:
        """After an await: True when the turn is over, or was stopped (then it is ended)."""
        if live.over or host.closed or host.runtime.active_turn_id != live.turn_id:
            return True
        if getattr(host.runtime, "stopping", False):
            self._end(host, live, "stopped", "", "")
            return True
        return False

    def _end(self, host: TopicHost, live: _Live, status: Any, error: str, code: str) -> None:
        self._feed(host, TurnEnd(turn_id=live.turn_id, status=status, error=error, error_code=code))

    def _feed(self, host: TopicHost, end: TurnEnd) -> None:
        if host.closed or host.runtime.active_turn_id != end.turn_id:
            return
        host.apply(host.runtime.driver_event(end, trio.current_time()))
        if host.runtime.active_turn_id is None:
            self.supervisor.mark_idle(host.topic_id)


def _delegate_session_options(
    bridge: TurnBridge, topic: TopicInfo, assistant: AssistantConfig
) -> SessionOptions:
    """A delegated child's session: like `TurnBridge.session_options`, but with the delegate
    assistant's own connector (the topic's explicit driver/model are for its own assistant)."""
    from hostd.core.connector import resolve_connector
    from hostd.shell.config import load_roles
    from hostd.shell.drivers.supervisor import SessionOptions
    from hostd.shell.turn_pipeline import merge_options, plan_workdir
    from hostd.shell.turn_workdir import ensure_workdir

    connector = resolve_connector(assistant, load_roles(bridge.config_dir))
    path, ephemeral = plan_workdir(assistant, topic, bridge.workspaces)
    if ephemeral or path is None:
        path = bridge.workspaces / "ephemeral" / f"{topic.id}-{assistant.name}"
    ensure_workdir(path, topic, assistant)
    return SessionOptions(
        driver=connector.driver,
        model=connector.model,
        working_dir=str(path),
        system_prompt=assistant.system_prompt,
        options=merge_options(assistant.options, topic.options),
    )


def _step_data(step: StepRecord) -> dict[str, Any]:
    data: dict[str, Any] = {"index": step.index, "depth": step.depth}
    if step.detail:
        data["detail"] = step.detail
    if step.error:
        data["error"] = step.error
    if step.error_code:
        data["error_code"] = step.error_code
    return data


__all__ = ["DaemonTurns"]
