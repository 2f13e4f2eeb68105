"""The Python side of tests/acp_editor/editor.mjs: start the SDK editor (it starts `hostd
acp`), send it commands, read what it saw; and the scaffolding every test here shares (the
daemon, a session on the scripted driver, prompts, update predicates)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from hostd_protocol.common import TextDelta
from tests.e2e import daemon_proc

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
HOSTD = str(Path(sys.executable).parent / "hostd")
#: Only limits a hang: every wait is for an event the editor saw.
TIMEOUT = 60


def require_sdk() -> None:
    if shutil.which("node") is None:
        pytest.skip("Node.js is not installed")
    if not (HERE / "node_modules" / "@agentclientprotocol" / "sdk").is_dir():
        pytest.fail("the ACP SDK is missing: run scripts/setup (npm ci in tests/acp_editor)")


class Editor:
    """One editor process: `call` a method, wait for events."""

    def __init__(self, proc: trio.Process) -> None:
        self.proc = proc
        self.events: list[dict[str, Any]] = []
        self._changed = trio.Event()
        self._tags = 0
        self.agent_pid = 0

    async def read(self) -> None:
        assert self.proc.stdout is not None
        buf = b""
        while True:
            data = await self.proc.stdout.receive_some(65536)
            if not data:
                break
            buf += data
            *lines, buf = buf.split(b"\n")
            for line in lines:
                if line.strip():
                    event = json.loads(line)
                    if event.get("ev") == "spawned":
                        self.agent_pid = event["pid"]
                    self.events.append(event)
            self._changed.set()
            self._changed = trio.Event()
        self.events.append({"ev": "editor-exit"})
        self._changed.set()

    async def command(self, cmd: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        await self.proc.stdin.send_all(json.dumps(cmd).encode() + b"\n")

    async def wait_for(
        self, pred: Callable[[dict[str, Any]], bool], after: int = 0
    ) -> dict[str, Any]:
        """The first event (seen so far or later, from the `after`th on) matching `pred`."""
        seen = after
        while True:
            for event in self.events[seen:]:
                if pred(event):
                    return event
            seen = len(self.events)
            if self.events and self.events[-1].get("ev") == "editor-exit":
                raise AssertionError(f"the editor exited; events: {self.events[-5:]}")
            await self._changed.wait()

    async def start_call(self, method: str, params: dict[str, Any]) -> str:
        self._tags += 1
        tag = f"t{self._tags}"
        await self.command({"op": "call", "tag": tag, "method": method, "params": params})
        return tag

    async def result(self, tag: str) -> dict[str, Any]:
        return await self.wait_for(lambda e: e.get("ev") == "result" and e.get("tag") == tag)

    async def call(self, method: str, params: dict[str, Any]) -> Any:
        """A request; its result (an error fails the test)."""
        got = await self.result(await self.start_call(method, params))
        assert "error" not in got, got
        return got["result"]

    async def new_session(self, cwd: Path) -> str:
        result = await self.call("session/new", {"cwd": str(cwd), "mcpServers": []})
        sid: str = result["sessionId"]
        return sid

    async def prompt_ok(self, sid: str, text: str) -> None:
        """A prompt whose turn must end normally."""
        assert await self.call("session/prompt", prompt(sid, text)) == {"stopReason": "end_turn"}

    async def select(self, asked: dict[str, Any], kind: str) -> None:
        """Answer the permission request `asked` with its option of `kind` (`allow_once`...)."""
        option = next(o["optionId"] for o in asked["params"]["options"] if o["kind"] == kind)
        await self.command({"op": "answer", "key": asked["key"],
                            "outcome": {"outcome": {"outcome": "selected", "optionId": option}}})

    async def initialize(self) -> dict[str, Any]:
        result: dict[str, Any] = await self.call(
            "initialize",
            {"protocolVersion": 1, "clientCapabilities": {"fs": {}, "terminal": False}},
        )
        return result

    def updates(self, session_id: str) -> list[dict[str, Any]]:
        return [
            e["params"]["update"]
            for e in self.events
            if e.get("ev") == "update" and e["params"]["sessionId"] == session_id
        ]

    def text(self, session_id: str, kind: str = "agent_message_chunk") -> str:
        return "".join(
            u["content"]["text"] for u in self.updates(session_id) if u["sessionUpdate"] == kind
        )


@asynccontextmanager
async def editor(home: Path, *acp_args: str) -> AsyncIterator[Editor]:
    """The SDK editor running `hostd --home HOME acp ACP_ARGS`."""
    require_sdk()
    env = {**os.environ, "HOSTD_HOME": str(home)}
    argv = ["node", str(HERE / "editor.mjs"), HOSTD, "--home", str(home), "acp", *acp_args]
    async with trio.open_nursery() as nursery:
        proc = await trio.lowlevel.open_process(
            argv, stdin=-1, stdout=-1, env=env, cwd=str(ROOT)
        )
        ed = Editor(proc)
        nursery.start_soon(ed.read)
        try:
            yield ed
        finally:
            with trio.CancelScope(shield=True):
                if proc.returncode is None:
                    proc.kill()
                await proc.wait()
                nursery.cancel_scope.cancel()


def text_of(parts: Sequence[object]) -> str:
    """The text of a stored row's parts."""
    return "".join(p.text for p in parts if isinstance(p, TextDelta))


def prompt(sid: str, text: str) -> dict[str, object]:
    """`session/prompt` params: one text block."""
    return {"sessionId": sid, "prompt": [{"type": "text", "text": text}]}


def is_update(kind: str, sid: str = "") -> Callable[[dict[str, Any]], bool]:
    """A `wait_for` predicate: a session update of `kind` (of session `sid`, if given)."""

    def pred(e: dict[str, Any]) -> bool:
        if e.get("ev") != "update":
            return False
        params = e["params"]
        return bool(params["update"]["sessionUpdate"] == kind and (
            not sid or params["sessionId"] == sid
        ))

    return pred


def is_note(event: dict[str, Any]) -> bool:
    """The transcript note `hostd acp` writes when it reconnected to a restarted daemon."""
    if event.get("ev") != "update":
        return False
    update = event["params"]["update"]
    return bool(update.get("_meta", {}).get("hostd", {}).get("notice") == "reconnected")


@asynccontextmanager
async def daemon(home: Path) -> AsyncIterator[daemon_proc.DaemonProcess]:
    """The test's daemon, which must stop cleanly at the end."""
    d = await daemon_proc.start(home)
    try:
        yield d
    finally:
        assert await d.terminate() == 0


@asynccontextmanager
async def restarted_daemon(home: Path) -> AsyncIterator[daemon_proc.DaemonProcess]:
    """The test's daemon, for tests that stop or kill it: the one `hostd acp` starts again
    is stopped at the end too."""
    d = await daemon_proc.start(home)
    try:
        yield d
    finally:
        await d.terminate()
        await trio.to_thread.run_sync(lambda: subprocess.run(
            [HOSTD, "--home", str(home), "stop"], capture_output=True, timeout=60, check=False
        ))


@asynccontextmanager
async def scripted_session(
    home: Path, cwd: Path, *acp_args: str
) -> AsyncIterator[tuple[Editor, str]]:
    """The daemon, an initialized editor on `hostd acp --driver scripted ACP_ARGS`, and one
    new session in `cwd`: (editor, session id)."""
    async with daemon(home), editor(home, "--driver", "scripted", *acp_args) as ed:
        await ed.initialize()
        yield ed, await ed.new_session(cwd)
