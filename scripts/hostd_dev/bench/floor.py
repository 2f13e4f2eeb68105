"""`scripts/bench floor`: what one streamed chunk costs a process that does nothing but the
syscalls the daemon needs for it (issue 35's "daemon CPU per chunk streamed to 4 windows").

100 writer processes (the bench load driver's C loop, `load_stream.c`: absolute deadlines,
1 ms timer slack) each write one 110-byte frame to their own pipe at 50 chunks/s; one
*stand-in* process reads every pipe and, per read, writes a 100-byte frame to each of its 4
window sockets (non-blocking, as `Connection.flush` does; a read that found several chunks
writes once, as the daemon's merged event does); a drain process reads the 400 sockets. The
stand-in's own CPU (getrusage, user + system) divided by the chunks it read is the row. Variants of the stand-in (`floor_loop.py`):

- `bare`: a plain `select.epoll` loop, no trio: the kernel's price plus the least Python.
- `hub`: one trio task waiting on an epoll set of all pipes (what `PipeHub` does), with the
  same per-chunk work: the bare loop plus trio's loop pass per wake-up.
- `tasks`: a trio task per pipe (`wait_readable` + `os.read`: a driver session before the hub).

Nothing of hostd runs: the rows are the floor under the daemon's figure, not a figure of it.
"""

from __future__ import annotations

import ctypes
import json
import os
import socket
import subprocess
import sys
import time

from hostd_dev.bench import load_driver
from hostd_dev.bench.report import Context, Result
from hostd_dev.bench.stats import median

GOAL = "the floor under 'daemon CPU per chunk streamed to 4 windows <= 40 us' (no goal of its own)"
VARIANTS = ("bare", "hub", "tasks")
FRAME = 110


def _writers(lib_path: str, fds: list[int], rate: float, seconds: float) -> list[int]:
    """Fork one writer per pipe fd; each streams `rate * seconds` frames with the C loop."""
    n = int(rate * seconds)
    period = int(1e9 / rate)
    start = time.monotonic_ns() + 300_000_000
    pids = []
    for k, fd in enumerate(fds):
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            code = 1
            try:
                for other in fds:
                    if other != fd:
                        os.close(other)
                lib = ctypes.CDLL(lib_path)
                cmd_r, _cmd_w = os.pipe()  # never written: no command comes
                lib.watch(cmd_r, ctypes.c_long(load_driver.TIMER_SLACK_NS))
                frame = ctypes.create_string_buffer(b"x" * FRAME, FRAME)
                offset = start + (period * k * 73 // (10 * len(fds))) % period
                done = lib.stream(
                    fd, cmd_r, frame, ctypes.c_long(FRAME), ctypes.c_long(10), ctypes.c_long(0),
                    ctypes.c_long(n), ctypes.c_int64(offset), ctypes.c_int64(period),
                )
                code = 0 if done == n else 2
            finally:
                os._exit(code)
        pids.append(pid)
    return pids


def measure(variant: str, topics: int = 100, windows: int = 4, rate: float = 50,
            seconds: float = 5) -> dict[str, float]:
    """One round of `variant`: the stand-in's CPU per chunk, user and system apart (us)."""
    lib_path = load_driver.build()
    if lib_path is None:
        raise RuntimeError("no C compiler: the floor needs the load driver's C loop")
    pipes = [os.pipe() for _ in range(topics)]
    pairs = [socket.socketpair() for _ in range(topics * windows)]
    reads = [r for r, _ in pipes]
    near = [a.fileno() for a, _ in pairs]
    far = [b.fileno() for _, b in pairs]
    drain = subprocess.Popen(
        [sys.executable, "-m", "hostd_dev.bench.floor_loop", "drain", json.dumps(far)],
        pass_fds=far,
    )
    stand_in = subprocess.Popen(
        [sys.executable, "-m", "hostd_dev.bench.floor_loop", variant,
         json.dumps(reads), json.dumps(near), str(windows)],
        pass_fds=reads + near,
        stdout=subprocess.PIPE,
    )
    for _, b in pairs:
        b.close()
    for a, _ in pairs:
        a.close()
    for r in reads:
        os.close(r)
    pids = _writers(str(lib_path), [w for _, w in pipes], rate, seconds)
    for _, w in pipes:
        os.close(w)
    bad = [pid for pid in pids if os.waitpid(pid, 0)[1] != 0]
    out, _ = stand_in.communicate(timeout=seconds + 120)
    drain.wait(timeout=60)
    if bad or stand_in.returncode:
        raise RuntimeError(f"floor {variant}: {len(bad)} writer(s) failed, stand-in {stand_in.returncode}")
    got: dict[str, float] = json.loads(out)
    return got


def run(ctx: Context) -> Result:
    res = Result("floor", GOAL)
    seconds = 1.0 if ctx.quick else 5.0
    res.notes.append(
        f"100 pipes x 50 chunks/s for {seconds:g} s; per chunk 1 pipe read + 4 socket writes; "
        "the stand-in's own CPU (getrusage) per chunk read"
    )
    for _ in range(ctx.runs):
        for variant in VARIANTS:  # interleaved: one round of each per run
            got = measure(variant, seconds=seconds)
            res.add(f"{variant}: CPU per chunk", "us", got["cpu_us"])
            res.add(f"{variant}: of it system (kernel)", "us", got["sys_us"])
            res.add(f"{variant}: chunks per wake-up", "", got["chunks_per_wake"])
    ctx.log(f"  floor: bare {median(res.row('bare: CPU per chunk', 'us').values):.1f} us, "
            f"hub {median(res.row('hub: CPU per chunk', 'us').values):.1f} us")
    return res
