"""The scripted driver: plays `hostd_scripted.script` steps through the driver harness.

Deterministic by construction: every text comes from the script or a fixed generator, ids
are counters, and timing comes only from explicit rates and pauses. Options (from `Init`,
overridden per turn by `Send.options`) are listed in README.md. What each script step does,
and the text it generates, is `hostd_scripted.player`.
"""

from __future__ import annotations

import atexit
import base64
import binascii
import itertools
import os
import sys
import time
import uuid
from typing import Any

import trio

from hostd_protocol.common import (
    Attachment,
    Capabilities,
    TextDelta,
    TurnStatus,
)
from hostd_protocol.driver_harness import DriverBase, TurnContext, TurnFailed
from hostd_protocol.driver_messages import (
    Init,
    ResumeToken,
)
from hostd_protocol.errors import DriverUnavailable
from hostd_scripted import __version__
from hostd_scripted.player import Player, _opt_bool, _opt_float, bench_text, split_words, words_text
from hostd_scripted.script import ScriptError, resolve

__all__ = ["ScriptedDriver", "bench_text", "split_words", "words_text"]


class ScriptedDriver(DriverBase):
    name = "scripted"
    version = __version__

    def __init__(self, frames_fd: int | None = None) -> None:
        self.frames_fd = frames_fd
        self.init_options: dict[str, Any] = {}
        self.session_token = ""
        self.model = ""
        self.resumed_from: str | None = None
        self.connected = False
        self.turns = 0
        self.children: list[trio.Process] = []
        #: Left running on purpose when the driver exits (`/orphan`).
        self.orphans: list[trio.Process] = []
        self._ids = itertools.count(1)

    # --- lifecycle ----------------------------------------------------------------------------

    async def init(self, init: Init) -> Capabilities:
        opts = dict(init.options)
        self.model = init.model
        self.init_options = opts
        for line in opts.get("stderr_lines", []) or []:
            print(str(line), file=sys.stderr, flush=True)
        if _opt_bool(opts, "hang_at_handshake", False):
            print(
                "scripted: hanging at the handshake (hang_at_handshake)",
                file=sys.stderr,
                flush=True,
            )
            with trio.CancelScope(shield=True):
                await trio.sleep_forever()
        if _opt_bool(opts, "crash_at_handshake", False):
            self._crash(4, "crash_at_handshake")
        if _opt_bool(opts, "garbage_at_handshake", False):
            self._write_raw(b"garbage before ready\n")
        delay = _opt_float(opts, "start_delay", 0.0)
        if delay > 0:
            print(f"scripted: slow start, {delay:g}s", file=sys.stderr, flush=True)
            await trio.sleep(delay)
        fatal = opts.get("fatal")
        if isinstance(fatal, str) and fatal:
            raise DriverUnavailable(fatal, driver=self.name)
        fatal_env = opts.get("fatal_env")
        if isinstance(fatal_env, str) and fatal_env:
            # A vendor SDK that quotes the bad credential in its refusal (redaction tests).
            raise DriverUnavailable(
                f"credential {os.environ.get(fatal_env, '')} was refused", driver=self.name
            )
        required = opts.get("require_env")
        if isinstance(required, str) and required and required not in os.environ:
            raise DriverUnavailable(
                f"environment variable {required} is not set; the scripted driver was told "
                "to require it",
                driver=self.name,
            )
        if init.resume_token:
            self.session_token = init.resume_token
            self.resumed_from = init.resume_token
        else:
            self.session_token = f"scripted-{uuid.uuid4().hex[:12]}"
        # Option `fork_session`: a vendor that copies sessions (`/whoami` names the source).
        forks = _opt_bool(opts, "fork_session", False)
        if forks and init.fork_from is not None and not init.resume_token:
            self.resumed_from = f"a copy of {init.fork_from.token}"
        return Capabilities(
            fork_session=forks,
            inject_steering=_opt_bool(opts, "inject_steering", True),
            compaction=_opt_bool(opts, "compaction", True),
            resume=_opt_bool(opts, "resume", True),
            approvals=_opt_bool(opts, "approvals", True),
            warm=_opt_bool(opts, "warm", True),
        )

    async def close(self) -> None:
        # `close_delay`: a driver slow to release its session (as any driver is on a loaded
        # machine), so tests can tell a slow clean close from a hung one.
        delay = _opt_float(self.init_options, "close_delay", 0.0)
        if delay > 0:
            await trio.sleep(delay)
        # `exit_delay`: slow to exit after its output is closed, as an interpreter's teardown
        # is on a loaded machine (atexit runs after the harness closed the frames).
        linger = _opt_float(self.init_options, "exit_delay", 0.0)
        if linger > 0:
            atexit.register(time.sleep, linger)

    async def prewarm(self) -> None:
        await self._connect()

    async def _connect(self) -> None:
        """What a real driver does to reach its vendor (import an SDK, start a CLI).

        `connect_delay` makes it cost time, once per process: prewarm pays it ahead of the
        first turn, so cold vs warm differs the way it does for real drivers.
        """
        if self.connected:
            return
        delay = _opt_float(self.init_options, "connect_delay", 0.0)
        if delay > 0:
            await trio.sleep(delay)
        self.connected = True

    async def run_turn(self, turn: TurnContext) -> TurnStatus | None:
        await self._connect()
        self.turns += 1
        if self.turns == 1 and _opt_bool(self.init_options, "resume", True):
            # Like Claude Code's session id: known at the first turn, stable afterwards.
            await turn.emit(ResumeToken(token=self.session_token))
        opts = {**self.init_options, **turn.send.options}
        try:
            script = resolve(turn.send.text, turn.send.options, self.init_options)
        except ScriptError as exc:
            raise TurnFailed(f"bad script: {exc}", driver=self.name) from None
        await turn.message_start()
        player = Player(self, turn, opts, script)
        await player.begin_call()
        if turn.send.attachments:
            await turn.chunk(TextDelta(text=images_line(turn.send.attachments)))
        only: str | None = None  # `/model NAME`: the steps below run for that model only
        try:
            for step in script.steps:
                if step.op == "model":
                    only = step.arg(0, "*")
                    continue
                if only not in (None, "*") and only != self.model:
                    continue
                await player.play(step)
        except Exception as exc:
            await player.end_call(error=str(exc) or type(exc).__name__)
            raise
        await player.end_call("stop")
        return None

    # --- raw failure modes --------------------------------------------------------------------

    def _crash(self, code: int, why: str) -> None:
        print(
            f"scripted: crashing on purpose ({why}), exit code {code}, "
            f"at monotonic_ns={time.monotonic_ns()}",
            file=sys.stderr,
            flush=True,
        )
        os._exit(code)

    def _write_raw(self, data: bytes) -> None:
        fd = self.frames_fd if self.frames_fd is not None else 1
        os.write(fd, data)


def images_line(attachments: list[Attachment]) -> str:
    """What the scripted driver says of a message's images, before its answer (a model
    would look at them): `(images: dot.png image/png 68 bytes) `."""
    parts = []
    for a in attachments:
        try:
            size = f"{len(base64.b64decode(a.data, validate=True))} bytes"
        except (binascii.Error, ValueError):
            size = "not base64"
        parts.append(f"{a.name or 'image'} {a.media_type} {size}")
    return f"(images: {', '.join(parts)}) "
