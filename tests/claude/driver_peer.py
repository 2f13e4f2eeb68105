"""Talk to a real driver process over its stdin/stdout frames, from trio tests.

A `DriverProcess` is started with `subprocess.Popen` (so one process can be shared by the
tests of a module: pytest-trio runs each test in its own `trio.run`), and each test attaches
to its pipes with `async with proc.attach() as peer:`. Events the driver wrote but no test
read yet stay buffered in the `DriverProcess`, so nothing is lost between tests.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio

from hostd_protocol.common import PROTOCOL_VERSION, Attachment, TextDelta
from hostd_protocol.driver_messages import (
    ApprovalRequest,
    ApprovalResponse,
    ChunkEvent,
    DriverEvent,
    HostCommand,
    Init,
    Ready,
    Send,
    TurnEnd,
)
from hostd_protocol.errors import InvalidMessage
from hostd_protocol.framing import Codec, MessageReader

REPO = Path(__file__).resolve().parents[2]


def offline_env(base_url: str, **extra: str) -> dict[str, str]:
    """Environment for a driver process that talks to the fake API only."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "LANG": os.environ.get("LANG", "C.UTF-8"),
        "ANTHROPIC_BASE_URL": base_url,
        "ANTHROPIC_API_KEY": "test-key",
        "CLAUDE_CODE_MAX_RETRIES": "2",
        # The driver's own HOME is irrelevant (the CLI gets the topic's), but keep Python's
        # caches and the like out of the real one.
        "HOME": tempfile.gettempdir(),
    }
    env.update(extra)
    return env


class DriverProcess:
    """A driver subprocess and the host's end of its frame channel."""

    def __init__(
        self,
        env: Mapping[str, str],
        *,
        module: str = "hostd_claude_code",
        cwd: str | None = None,
    ) -> None:
        self._stderr_file = tempfile.NamedTemporaryFile(
            prefix="driver-stderr-", suffix=".log", delete=False
        )
        self.proc = subprocess.Popen(
            [sys.executable, "-m", module],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr_file,
            env=dict(env),
            cwd=cwd,
        )
        self.codec: Codec[HostCommand] = Codec(HostCommand)
        self.reader: MessageReader[DriverEvent] = MessageReader(Codec(DriverEvent))
        self.pending: list[Any] = []
        #: Every event received, in order (tests assert on slices of it).
        self.log: list[Any] = []

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stderr_text(self) -> str:
        return Path(self._stderr_file.name).read_text(errors="replace")

    @asynccontextmanager
    async def attach(self) -> AsyncIterator[Peer]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        to_driver = trio.lowlevel.FdStream(os.dup(self.proc.stdin.fileno()))
        from_driver = trio.lowlevel.FdStream(os.dup(self.proc.stdout.fileno()))
        async with to_driver, from_driver:
            yield Peer(self, to_driver, from_driver)

    def close(self, timeout: float = 15.0) -> int | None:
        """Close stdin (the driver exits), wait, kill if it hangs; returns the exit code."""
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._stderr_file.close()
        return code

    def cleanup(self) -> None:
        try:
            os.unlink(self._stderr_file.name)
        except OSError:
            pass


class Peer:
    """The host's side of one attached driver process (valid inside one trio run)."""

    def __init__(
        self,
        proc: DriverProcess,
        to_driver: trio.lowlevel.FdStream,
        from_driver: trio.lowlevel.FdStream,
    ) -> None:
        self.proc = proc
        self.to_driver = to_driver
        self.from_driver = from_driver

    async def send(self, cmd: HostCommand) -> None:
        await self.to_driver.send_all(self.proc.codec.encode_frame(cmd))

    async def recv(self) -> Any:
        proc = self.proc
        while not proc.pending:
            data = await self.from_driver.receive_some(65536)
            if not data:
                raise AssertionError(
                    "driver closed its output; stderr tail:\n" + proc.stderr_text()[-3000:]
                )
            for item in proc.reader.feed(data):
                if isinstance(item, InvalidMessage):
                    raise AssertionError(f"driver sent an invalid message: {item}")
                proc.pending.append(item)
        event = proc.pending.pop(0)
        proc.log.append(event)
        return event

    async def until(self, stop: Callable[[Any], bool] | type[Any]) -> list[Any]:
        """Receive events up to and including the first one matching `stop`."""
        kind = stop if isinstance(stop, type) else None

        def match(event: Any) -> bool:
            return isinstance(event, kind) if kind is not None else bool(stop(event))

        got: list[Any] = []
        while True:
            event = await self.recv()
            got.append(event)
            if match(event):
                return got

    async def handshake(self, init: Init) -> Ready:
        await self.send(init)
        ready = await self.recv()
        assert isinstance(ready, Ready), ready
        return ready

    async def turn(
        self,
        turn_id: str,
        text: str,
        *,
        on_event: Callable[[Any], Any] | None = None,
        options: dict[str, Any] | None = None,
        attachments: list[Attachment] | None = None,
    ) -> list[Any]:
        """Send one turn and receive its events up to its TurnEnd.

        `on_event(event)` is awaited (if it returns an awaitable) for each event, so a test
        can react mid-turn (steer, interrupt, answer an approval).
        """
        await self.send(Send(turn_id=turn_id, text=text, options=options or {}, attachments=attachments or []))
        got: list[Any] = []
        while True:
            event = await self.recv()
            got.append(event)
            if on_event is not None:
                result = on_event(event)
                if hasattr(result, "__await__"):
                    await result
            if isinstance(event, TurnEnd) and event.turn_id == turn_id:
                return got

    async def answer(self, request: ApprovalRequest, allow: bool, reason: str = "") -> None:
        await self.send(
            ApprovalResponse(approval_id=request.approval_id, allow=allow, reason=reason)
        )


def init_for(working_dir: str | Path, **options: Any) -> Init:
    return Init(protocol_version=PROTOCOL_VERSION, working_dir=str(working_dir), options=options)


def text_of(events: list[Any]) -> str:
    """The concatenated answer text of a list of events."""
    return "".join(
        e.chunk.text for e in events if isinstance(e, ChunkEvent) and isinstance(e.chunk, TextDelta)
    )


def kinds(events: list[Any]) -> list[str]:
    """Event tags (chunks as `chunk:<chunk tag>`), for readable order assertions."""
    out = []
    for e in events:
        tag = type(e).__struct_config__.tag
        if isinstance(e, ChunkEvent):
            tag = f"chunk:{type(e.chunk).__struct_config__.tag}"
        out.append(str(tag))
    return out
