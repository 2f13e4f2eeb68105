"""The driver conformance suite: what every hostd driver must do, checked through the supervisor.

A driver's tests run it through the pytest plugin (`hostd.testing.plugin`), with a profile
saying how to drive that driver:

    from hostd.testing.conformance import ConformanceProfile

    @pytest.fixture
    def hostd_conformance_profile():
        return ConformanceProfile(driver="scripted", turn_text="hello", ...)

    def test_conformance(hostd_conformance):   # one test per check
        hostd_conformance.run()

(or call the checks in `CHECKS` directly: each is `async def check(profile, workdir)`).

Each check starts its own `Supervisor` (real subprocesses), bounds itself with
`trio.fail_after`, and asserts no process outlives it. Checks a profile cannot drive (no way
to make the driver write garbage, no slow-start option) are skipped, not failed.

The checks: handshake, one turn (twice in one session), interrupt, crash mid-turn, garbage on
stdout, slow start (and a handshake timeout), bad input from the host.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import trio

from hostd.shell.drivers.registry import DriverRegistry
from hostd.shell.drivers.supervisor import DriverSession, SessionEnded, SessionOptions, Supervisor
from hostd.testing.processes import no_new_children
from hostd_protocol import child_process
from hostd_protocol.common import PROTOCOL_VERSION, Capabilities, TextDelta
from hostd_protocol.driver_messages import (
    ChunkEvent,
    DriverEvent,
    DriverFatal,
    Init,
    Send,
    TurnEnd,
)
from hostd_protocol.errors import (
    DriverCrashed,
    DriverError,
    DriverProtocolError,
    DriverTimeout,
)
from hostd_protocol.framing import Codec, MessageReader

__all__ = ["CHECKS", "ConformanceProfile", "TurnResult", "collect_turn", "serving"]


@dataclass(frozen=True)
class ConformanceProfile:
    """How to drive one driver through the suite."""

    driver: str
    init_options: Mapping[str, Any] = field(default_factory=dict)
    model: str = ""
    secrets: Mapping[str, str] = field(default_factory=dict, repr=False)
    #: Environment the supervisor passes on from (default: this process's).
    base_env: Mapping[str, str] | None = None
    #: Registry to use (default: entry points of this environment).
    registry: DriverRegistry | None = None
    #: A message that ends in success with at least one text chunk.
    turn_text: str = "Say hello."
    #: A message that streams at least one chunk, then keeps going until interrupted.
    long_turn_text: str = "Count slowly from 1 to 1000, one number per line."
    #: A message that makes the driver exit mid-turn; None: the suite kills it (SIGKILL).
    crash_text: str | None = None
    #: A message that makes the driver write bytes that are not frames; None: skip.
    garbage_text: str | None = None
    #: Init options that delay the handshake by at least `slow_start_seconds`; None: skip.
    slow_start_options: Mapping[str, Any] | None = None
    slow_start_seconds: float = 0.5
    handshake_timeout: float = 15.0
    #: How long the handshake check lets a clean close take before the supervisor kills the
    #: driver (which the check reports as an unclean exit). It only limits a hang: a loaded
    #: machine once made a driver miss the daemon's 2 s default and fail the check.
    close_timeout: float = 20.0
    #: Bound on one turn. It only ends a hang: no check asserts how fast anything was (a
    #: slow machine is not a broken driver); the speeds are `scripts/bench` rows.
    turn_timeout: float = 30.0
    interrupt_grace: float = 5.0

    def options(self, **extra: Any) -> SessionOptions:
        return SessionOptions(
            driver=self.driver,
            model=self.model,
            options={**self.init_options, **extra},
            secrets=dict(self.secrets),
        )


@asynccontextmanager
async def serving(
    profile: ConformanceProfile, workdir: Path, **kwargs: Any
) -> AsyncIterator[Supervisor]:
    """A serving supervisor for `profile`, closed (and every process reaped) on exit."""
    kwargs.setdefault("handshake_timeout", profile.handshake_timeout)
    kwargs.setdefault("idle_ttl", math.inf)
    kwargs.setdefault("max_warm", 0)
    sup = Supervisor(
        profile.registry or DriverRegistry.discover(),
        base_env=profile.base_env,
        workdir_root=str(workdir / "work"),
        **kwargs,
    )
    with no_new_children():
        async with trio.open_nursery() as nursery:
            await nursery.start(sup.serve)
            try:
                yield sup
            finally:
                with trio.CancelScope(shield=True):
                    await sup.aclose()


@dataclass
class TurnResult:
    """What one turn produced, as seen on the session's events."""

    events: list[DriverEvent] = field(default_factory=list)
    batches: int = 0
    end: TurnEnd | None = None
    ended: SessionEnded | None = None

    @property
    def text(self) -> str:
        return "".join(
            e.chunk.text
            for e in self.events
            if isinstance(e, ChunkEvent) and isinstance(e.chunk, TextDelta)
        )

    def chunks(self, turn_id: str) -> list[ChunkEvent]:
        return [e for e in self.events if isinstance(e, ChunkEvent) and e.turn_id == turn_id]


async def collect_turn(
    session: DriverSession,
    turn_id: str,
    *,
    on_first_chunk: Callable[[], Awaitable[None]] | None = None,
) -> TurnResult:
    """Read `session.events` until `TurnEnd(turn_id)` or `SessionEnded`."""
    result = TurnResult()
    first_chunk = True
    async for item in session.events:
        if isinstance(item, SessionEnded):
            result.ended = item
            return result
        result.batches += 1
        for event in item:
            result.events.append(event)
            if first_chunk and isinstance(event, ChunkEvent) and event.turn_id == turn_id:
                first_chunk = False
                if on_first_chunk is not None:
                    await on_first_chunk()
            if isinstance(event, TurnEnd) and event.turn_id == turn_id:
                result.end = event
        if result.end is not None:
            return result
    return result


async def _wait_end(session: DriverSession) -> SessionEnded:
    async for item in session.events:
        if isinstance(item, SessionEnded):
            return item
    raise AssertionError("events closed without SessionEnded")


# --- the checks ---------------------------------------------------------------------------------


async def check_handshake(profile: ConformanceProfile, workdir: Path) -> None:
    """Init -> Ready with capabilities; a clean close exits 0 and ends events with no error."""
    with trio.fail_after(profile.handshake_timeout + profile.close_timeout + 10):
        async with serving(profile, workdir, close_timeout=profile.close_timeout) as sup:
            session = await sup.open("conf-handshake", profile.options())
            assert session.alive
            assert session.pid > 0
            assert isinstance(session.capabilities, Capabilities)
            assert session.driver == profile.driver
            assert await trio.Path(workdir / "work" / "conf-handshake").is_dir()
            await session.aclose()
            ended = await _wait_end(session)
            assert ended.error is None, f"clean close reported {ended.error!r}"
            assert session.exit_code == 0


async def check_one_turn(profile: ConformanceProfile, workdir: Path) -> None:
    """A turn streams chunks tagged with its id and ends with exactly one TurnEnd(success);
    a second turn in the same process works too."""
    with trio.fail_after(profile.handshake_timeout + 2 * profile.turn_timeout):
        async with serving(profile, workdir) as sup:
            session = await sup.open("conf-turn", profile.options())
            for turn_id in ("t1", "t2"):
                await session.send(Send(turn_id=turn_id, text=profile.turn_text))
                with trio.fail_after(profile.turn_timeout):
                    result = await collect_turn(session, turn_id)
                assert result.ended is None, f"session ended during a turn: {result.ended}"
                assert result.end is not None
                assert result.end.status == "success", result.end
                assert result.chunks(turn_id), "a turn must produce at least one chunk"
                ends = [e for e in result.events if isinstance(e, TurnEnd)]
                assert len(ends) == 1, f"expected one TurnEnd, got {ends}"
            assert session.alive


async def check_interrupt(profile: ConformanceProfile, workdir: Path) -> None:
    """Interrupt mid-turn ends it as `stopped` within the grace; the session stays usable."""
    with trio.fail_after(profile.handshake_timeout + 3 * profile.turn_timeout):
        async with serving(profile, workdir) as sup:
            session = await sup.open("conf-interrupt", profile.options())
            await session.send(Send(turn_id="long", text=profile.long_turn_text))
            async with trio.open_nursery() as nursery:

                async def stop() -> None:
                    # In a task: interrupt() returns only after the TurnEnd we are reading.
                    nursery.start_soon(session.interrupt, "long", profile.interrupt_grace)

                with trio.fail_after(profile.turn_timeout):
                    result = await collect_turn(session, "long", on_first_chunk=stop)
            assert result.ended is None, f"interrupt killed the session: {result.ended}"
            assert result.end is not None and result.end.status == "stopped", result.end
            assert session.alive
            await session.send(Send(turn_id="after", text=profile.turn_text))
            with trio.fail_after(profile.turn_timeout):
                after = await collect_turn(session, "after")
            assert after.end is not None and after.end.status == "success", after.end


async def check_crash_mid_turn(profile: ConformanceProfile, workdir: Path) -> None:
    """A driver that dies mid-turn ends events with SessionEnded(DriverCrashed) carrying its
    exit code (not a turn end, not a timer); the next open starts a new process that works."""
    with trio.fail_after(profile.handshake_timeout * 2 + 3 * profile.turn_timeout):
        async with serving(profile, workdir) as sup:
            opts = profile.options()
            session = await sup.open("conf-crash", opts)
            first_pid = session.pid
            killed = False

            async def kill() -> None:
                nonlocal killed
                killed = True
                os.kill(session.pid, signal.SIGKILL)

            # The crash, not the turn, ends it: the session ends (no TurnEnd) within the
            # turn's bound, which only ends a hang; how fast is `scripts/bench failures`.
            if profile.crash_text is not None:
                await session.send(Send(turn_id="doomed", text=profile.crash_text))
                with trio.fail_after(profile.turn_timeout):
                    result = await collect_turn(session, "doomed")
            else:
                await session.send(Send(turn_id="doomed", text=profile.long_turn_text))
                with trio.fail_after(profile.turn_timeout):
                    result = await collect_turn(session, "doomed", on_first_chunk=kill)
                assert killed, "the turn ended before its first chunk"
            assert result.ended is not None, "the turn ended instead of the session"
            error = result.ended.error
            assert isinstance(error, DriverCrashed), repr(error)
            assert error.exit_code is not None and error.exit_code != 0
            assert error.driver == profile.driver
            # The daemon side survives: a new process serves the topic.
            again = await sup.open("conf-crash", opts)
            assert again is not session and again.pid != first_pid
            await again.send(Send(turn_id="t2", text=profile.turn_text))
            with trio.fail_after(profile.turn_timeout):
                after = await collect_turn(again, "t2")
            assert after.end is not None and after.end.status == "success", after.end


async def check_garbage_on_stdout(profile: ConformanceProfile, workdir: Path) -> None:
    """Bytes that are not frames kill the driver: SessionEnded(DriverProtocolError) with the
    tail of its stderr; the supervisor still serves."""
    if profile.garbage_text is None:
        pytest.skip(f"profile for {profile.driver} cannot make it write garbage")
    with trio.fail_after(profile.handshake_timeout * 2 + 2 * profile.turn_timeout):
        async with serving(profile, workdir) as sup:
            session = await sup.open("conf-garbage", profile.options())
            await session.send(Send(turn_id="g", text=profile.garbage_text))
            with trio.fail_after(profile.turn_timeout):
                result = await collect_turn(session, "g")
            assert result.ended is not None
            assert isinstance(result.ended.error, DriverProtocolError), repr(result.ended.error)
            assert result.ended.error.exit_code is not None
            again = await sup.open("conf-garbage", profile.options())
            assert again.alive


async def check_slow_start(profile: ConformanceProfile, workdir: Path) -> None:
    """A slow handshake within the timeout works; beyond it, DriverTimeout and no process."""
    if profile.slow_start_options is None:
        pytest.skip(f"profile for {profile.driver} has no slow-start option")
    slow = profile.options(**profile.slow_start_options)
    with trio.fail_after(profile.handshake_timeout + profile.slow_start_seconds * 2 + 10):
        async with serving(profile, workdir) as sup:
            session = await sup.open("conf-slow", slow)
            assert session.alive
        # No clock here (a check must hold on a slow machine): the same slow start must meet
        # a handshake timer of half its delay and be ended by it.
        async with serving(
            profile, workdir, handshake_timeout=profile.slow_start_seconds / 2
        ) as sup:
            with pytest.raises(DriverTimeout) as info:
                await sup.open("conf-slow", slow)
            assert info.value.driver == profile.driver
            assert "handshake" in info.value.message
            assert sup.statistics().sessions == 0


async def check_bad_input(profile: ConformanceProfile, workdir: Path) -> None:
    """Garbage from the host, or a command before Init, makes the driver exit non-zero
    (after a DriverFatal if it can) instead of hanging or answering."""
    registry = profile.registry or DriverRegistry.discover()
    spec = registry.get(profile.driver)
    env = dict(os.environ if profile.base_env is None else profile.base_env)
    env.update(profile.secrets)
    codec: Codec[Any] = Codec(Init)
    inputs = {
        "garbage": b"\xff\xff\xff\xffnot a frame at all",
        "send-before-init": Codec(Send).encode_frame(Send(turn_id="x", text="hi")),
        "bad-version": codec.encode_frame(Init(protocol_version=(PROTOCOL_VERSION[0] + 1, 0))),
    }

    async def feed(name: str, data: bytes) -> None:
        proc = await child_process.spawn(
            spec.argv(), stderr=subprocess.DEVNULL, env=env, cwd=str(workdir)
        )
        try:
            assert proc.stdin is not None and proc.stdout is not None
            await proc.stdin.send_all(data)
            reader: MessageReader[Any] = MessageReader(Codec(DriverEvent))
            events: list[Any] = []
            with trio.fail_after(profile.handshake_timeout):
                while chunk := await proc.stdout.receive_some(65536):
                    events.extend(reader.feed(chunk))
                code = await proc.wait()
            assert code != 0, f"{name}: driver exited 0 after bad input"
            assert not any(isinstance(e, (ChunkEvent, TurnEnd)) for e in events), (
                f"{name}: driver answered bad input with {events}"
            )
            fatal = [e for e in events if isinstance(e, DriverFatal)]
            assert fatal or not events, f"{name}: expected DriverFatal, got {events}"
        finally:
            with trio.CancelScope(shield=True):
                proc.end_tree()
                await proc.wait()
                for stream in (proc.stdin, proc.stdout):
                    if stream is not None:
                        await stream.aclose()
                for stream in (proc.stdin, proc.stdout):
                    if stream is not None:
                        await stream.aclose()

    with no_new_children(), trio.fail_after(profile.handshake_timeout + 10):
        async with trio.open_nursery() as nursery:
            for name, data in inputs.items():
                nursery.start_soon(feed, name, data)


Check = Callable[[ConformanceProfile, Path], Awaitable[None]]

#: Every check, in a stable order (use as a pytest parametrisation).
CHECKS: tuple[Check, ...] = (
    check_handshake,
    check_one_turn,
    check_interrupt,
    check_crash_mid_turn,
    check_garbage_on_stdout,
    check_slow_start,
    check_bad_input,
)


def describe_error(err: DriverError | None) -> str:
    """One line for assertion messages."""
    return "none" if err is None else f"{type(err).__name__}: {err.message}"
