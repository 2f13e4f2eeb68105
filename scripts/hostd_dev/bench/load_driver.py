"""`bench-load`: the bench's load driver, a real driver process that costs next to nothing
per chunk (issue 35).

The latency bench needs 100 drivers streaming 50 chunks/s each. The scripted driver, a trio
program with the full harness, costs 135-252 us of CPU per chunk on this machine (most of it
trio's run loop waking up cold), so 100 of them took 0.7-1.3 of the 2 cores and the bench
measured its own load generator. This driver speaks the same protocol on the same pipes
(length-prefixed msgpack frames on stdin/stdout, `Init` -> `Ready`, `Send` -> chunks ->
`TurnEnd`) but does the least a process can per chunk:

- no event loop: blocking reads of commands between turns; during a turn a command raises
  SIGIO (O_ASYNC on stdin), which ends the chunk loop's sleep, so a `Close` or `Interrupt`
  is seen before the next chunk;
- pacing by absolute deadlines (`start + i / rate`), so the rate holds however late a
  wake-up is;
- the chunk frame encoded once per turn; per chunk only the emit stamp (fixed width, zero
  padded: the windows parse it with `int`) is written into that buffer, then one `write`;
- that loop in C (`load_stream.c`, built with the machine's `cc` into a cache file on first
  use, loaded with ctypes): a Python process woken cold 50 times a second still costs ~40-60
  us per wake-up on this VM in the interpreter alone. Where no compiler exists the same loop
  runs in Python (`Ready.version` says which: `+c` or `+py`);
- per chunk (session 9): one `clock_nanosleep(TIMER_ABSTIME)`, one clock read, one `write`,
  with a 1 ms timer slack (`prctl(PR_SET_TIMERSLACK)`) so drivers' wake-ups can share a timer
  interrupt (0.1.0: a `ppoll` on stdin with a relative timeout and three clock reads).

It plays only `/bench n=N size=S rate=R` (the scripted driver's bench step, same text and
stamp format); anything else ends the turn with a clear error. Registered through the
`hostd.drivers` entry point of hostd-dev, so it exists only where the developer tools are
installed, never for users; the scripted driver stays the functional default.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from hostd_protocol.common import PROTOCOL_VERSION, TextDelta, TurnStatus
from hostd_protocol.driver_messages import (
    ChunkEvent,
    Close,
    DriverEvent,
    HostCommand,
    Init,
    Interrupt,
    Prewarm,
    Ready,
    Send,
    TurnEnd,
    Warmed,
)
from hostd_protocol.framing import Codec, FrameDecoder

NAME = "bench-load"
VERSION = "0.2.0"
#: How late a chunk's wake-up may come (ns), so the kernel can serve several drivers' sleeps
#: with one timer interrupt (load_stream.c says why; the stamp is read after the wake-up).
TIMER_SLACK_NS = 1_000_000
#: Digits of the emit stamp: CLOCK_MONOTONIC ns, zero padded so the frame's layout is fixed.
STAMP_DIGITS = 20
USAGE = "the bench-load driver plays only `/bench n=N size=S rate=R`"
SOURCE = Path(__file__).with_name("load_stream.c")


def library_path() -> Path:
    """Where the built loop lives: named by the source's hash, so an edit rebuilds it; next
    to the source (its `__pycache__`, ignored by git), not in a /tmp others can write to."""
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]
    return SOURCE.parent / "__pycache__" / f"load_stream-{digest}.so"


def build() -> Path | None:
    """Build the C loop once (the bench calls this before spawning 100 drivers; a driver
    that finds no library builds it itself). None when it cannot be built."""
    path = library_path()
    if path.exists():
        return path
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(exist_ok=True)
        subprocess.run(
            ["cc", "-O2", "-shared", "-fPIC", "-o", str(tmp), str(SOURCE)],
            check=True,
            capture_output=True,
            timeout=60,
        )
        os.replace(tmp, path)  # atomic: a concurrent builder's result is as good
    except (OSError, subprocess.SubprocessError):
        tmp.unlink(missing_ok=True)
        return None
    return path


def load_stream(cmd_fd: int) -> Any:
    """The C `stream` function, set up for this process (`watch`: SIGIO on a command, the
    timer slack), or None (then the Python loop runs)."""
    path = build()
    if path is None:
        return None
    try:
        lib = ctypes.CDLL(str(path), use_errno=True)
    except OSError:
        return None
    fn = lib.stream
    c_long, i64 = ctypes.c_long, ctypes.c_int64
    fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, c_long, c_long, c_long, c_long]
    fn.argtypes += [i64, i64]
    fn.restype = c_long
    lib.watch.argtypes = [ctypes.c_int, c_long]
    lib.watch.restype = ctypes.c_int
    if lib.watch(cmd_fd, TIMER_SLACK_NS) != 0:
        return None  # without SIGIO a command would wait for the turn's end
    return fn


def parse_bench(text: str) -> tuple[int, int, float] | None:
    """(chunks, chunk size, rate) of a `/bench` script, or None when `text` is not one.
    Same words as the scripted driver's step: `n` may also be the first bare number."""
    words = text.split()
    if not words or words[0] != "/bench":
        return None
    n, size, rate = 1000, 64, 0.0
    try:
        for i, word in enumerate(words[1:]):
            key, eq, value = word.partition("=")
            if not eq:
                if i:
                    return None
                n = int(float(key))
            elif key == "n":
                n = int(float(value))
            elif key == "size":
                size = int(float(value))
            elif key == "rate":
                rate = float(value)
            else:
                return None
    except ValueError:
        return None
    if n < 0 or size < STAMP_DIGITS + 1 or rate < 0:
        return None
    return n, size, rate


class LoadDriver:
    def __init__(self, cmd_fd: int = 0, out_fd: int = 1) -> None:
        self.cmd_fd = cmd_fd
        self.out_fd = out_fd
        self.events: Codec[Any] = Codec(DriverEvent, "msgpack")
        self.commands: Codec[Any] = Codec(HostCommand, "msgpack")
        self.frames = FrameDecoder()
        self.pending: list[Any] = []
        self.closed = False
        self.c_stream = load_stream(cmd_fd)

    def emit(self, msg: Any) -> None:
        self._write(self.events.encode_frame(msg))

    def _write(self, data: bytes | bytearray) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self.out_fd, view) :]

    def _read_commands(self) -> None:
        data = os.read(self.cmd_fd, 65536)
        if not data:
            self.closed = True  # the host is gone: nothing to say it
            return
        for body in self.frames.feed(data):
            self.pending.append(self.commands.decode(body))

    def next_command(self) -> Any:
        while not self.pending and not self.closed:
            self._read_commands()
        return self.pending.pop(0) if self.pending else None

    def run(self) -> None:
        while (cmd := self.next_command()) is not None:
            if isinstance(cmd, Init):
                loop = "+c" if self.c_stream is not None else "+py"
                self.emit(
                    Ready(protocol_version=PROTOCOL_VERSION, driver=NAME, version=VERSION + loop)
                )
            elif isinstance(cmd, Prewarm):
                self.emit(Warmed())
            elif isinstance(cmd, Send):
                self.turn(cmd)
            elif isinstance(cmd, Close):
                return
            # Anything else (an Interrupt of a turn already ended, a steer with no turn):
            # nothing to do.

    def turn(self, send: Send) -> None:
        spec = parse_bench(send.text)
        if spec is None:
            self.emit(TurnEnd(turn_id=send.turn_id, status="error", error=USAGE))
            return
        n, size, rate = spec
        # The frame of one chunk, encoded once; `off` is where its stamp's digits are.
        holder = "0" * STAMP_DIGITS + ":" + "x" * (size - STAMP_DIGITS - 1)
        frame = bytearray(
            self.events.encode_frame(ChunkEvent(turn_id=send.turn_id, chunk=TextDelta(text=holder)))
        )
        off = frame.index(holder.encode())
        end = off + STAMP_DIGITS
        if self.c_stream is not None:
            self.emit(TurnEnd(turn_id=send.turn_id, status=self._c_turn(send, n, rate, frame, off)))
            return
        period = 1.0 / rate if rate > 0 else 0.0
        out, wait, clock, now_s = self.out_fd, select.select, time.monotonic_ns, time.monotonic
        watch = [self.cmd_fd]
        start = now_s()
        status: TurnStatus = "success"
        for i in range(n):
            if period:
                # Sleep until this chunk's deadline, waking early only for a command.
                while (left := start + i * period - now_s()) > 0:
                    if wait(watch, (), (), left)[0]:
                        self._read_commands()
                        if self._stop_requested(send.turn_id):
                            status = "stopped"
                            break
                if status != "success":
                    break
            frame[off:end] = b"%020d" % clock()
            if os.write(out, frame) != len(frame):  # a pipe write this small is atomic
                raise OSError("short write of a bench chunk")
        self.emit(TurnEnd(turn_id=send.turn_id, status=status))

    def _c_turn(self, send: Send, n: int, rate: float, frame: bytearray, off: int) -> TurnStatus:
        buf = (ctypes.c_char * len(frame)).from_buffer(frame)
        period_ns = round(1e9 / rate) if rate > 0 else 0
        start_ns = time.monotonic_ns()
        i = 0
        while i < n:
            i = self.c_stream(self.out_fd, self.cmd_fd, buf, len(frame), off, i, n, start_ns, period_ns)
            if i < 0:
                err = ctypes.get_errno()
                raise OSError(err, os.strerror(err))
            if i < n:  # a command came while waiting for chunk i
                self._read_commands()
                if self._stop_requested(send.turn_id):
                    return "stopped"
        return "success"

    def _stop_requested(self, turn_id: str) -> bool:
        """True for an Interrupt of this turn, a Close or a host that is gone (the turn then
        ends stopped; a Close stays pending for the main loop). Other commands wait."""
        for cmd in self.pending:
            if isinstance(cmd, Interrupt) and cmd.turn_id == turn_id:
                self.pending.remove(cmd)
                return True
        return self.closed or any(isinstance(c, Close) for c in self.pending)


def main() -> None:
    # Frames own fd 1; anything printed by accident goes to stderr (the daemon logs it).
    out_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    try:
        LoadDriver(0, out_fd).run()
    except BrokenPipeError:
        pass  # the host went away: there is no one left to tell


if __name__ == "__main__":
    main()
