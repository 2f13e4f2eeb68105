"""Processes the benchmarks drive: the real daemon, a bare scripted driver (the baseline), the
windows process (their CPU and memory readings are in cpu_stats).

Everything here is synchronous and blocking: a scenario that needs trio starts its own
`trio.run`. The baseline in particular reads the driver's pipe with plain blocking reads, the
cheapest way Python has, so it is the physical limit the host is compared against.
"""

from __future__ import annotations

import hashlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hostd.shell.paths import Paths
from hostd_dev.bench.cpu_stats import rss_mib

PYTHON = sys.executable
#: `scripts/bench ab` sets this to the "before" tree's interpreter for one side of a run.
PRODUCT_PYTHON_ENV = "HOSTD_BENCH_PYTHON"


def product_python() -> str:
    """The interpreter of what is measured: the daemon (and so the drivers it spawns, with its
    own `sys.executable`) and the bare drivers of the baselines. `HOSTD_BENCH_PYTHON` names
    another tree's venv (`scripts/bench ab --before REV`); the bench itself, its windows
    process and its clients stay this tree's, so both sides are measured by the same
    instrument."""
    return os.environ.get(PRODUCT_PYTHON_ENV) or PYTHON
#: One pipe read, as the supervisor does it (the kernel pipe buffer is 64 KiB).
READ_SIZE = 65536


def short_home(prefix: str = "hb") -> Path:
    """A fresh HOSTD_HOME short enough for the AF_UNIX path limit."""
    return Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))


class DaemonProc:
    """`python -m hostd serve` in a temporary HOSTD_HOME, started and stopped synchronously."""

    def __init__(
        self,
        *,
        flush_interval: float | None = None,
        home: Path | None = None,
        python_args: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
    ) -> None:
        self.python_args = python_args
        #: Variables added to this process's environment for the daemon (e.g. OTEL_*).
        self.env = env
        self.home = home or short_home()
        self.own_home = home is None
        self.paths = Paths.under(self.home)
        self.flush_interval = flush_interval
        self.proc: subprocess.Popen[bytes] | None = None
        #: Seconds from spawning the process to its "ready" line.
        self.ready_s = 0.0

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def socket(self) -> str:
        return str(self.paths.socket_path)

    def start(self, timeout: float = 30.0) -> DaemonProc:
        read_fd, write_fd = os.pipe()
        # HOSTD_BENCH_DAEMON=<script.py>: run that instead of `-m hostd` (same arguments), to
        # compare a patched daemon (a fix switched off, say) in the same harness.
        entry = os.environ.get("HOSTD_BENCH_DAEMON")
        argv = [
            product_python(),
            *self.python_args,
            # -P: not the working directory first on sys.path, so `-m hostd` is the
            # interpreter's own hostd even when the bench runs in another tree's checkout.
            *([entry] if entry else ["-P", "-m", "hostd"]),
            "--home",
            str(self.home),
            "serve",
            "--default-driver",
            "scripted",
            "--log-level",
            "WARNING",
            "--ready-fd",
            str(write_fd),
        ]
        if self.flush_interval is not None:
            argv += ["--flush-interval", str(self.flush_interval)]
        log = open(self.home / "bench-daemon.log", "ab")
        t0 = time.perf_counter()
        try:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                pass_fds=(write_fd,),
                start_new_session=True,
                env={**os.environ, **self.env} if self.env else None,
            )
        finally:
            os.close(write_fd)
            log.close()
        try:
            line = _read_line(read_fd, timeout)
        finally:
            os.close(read_fd)
        self.ready_s = time.perf_counter() - t0
        if not line.startswith("ready"):
            tail = self.log_tail()
            self.stop()
            raise RuntimeError(f"the daemon did not start ({line or 'no answer'}): {tail}")
        return self

    def rss_mib(self) -> float:
        return rss_mib(self.pid)

    def log_text(self) -> str:
        """The daemon's stdout and stderr so far."""
        try:
            return (self.home / "bench-daemon.log").read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, n: int = 2000) -> str:
        return self.log_text()[-n:]

    def stop(self, timeout: float = 20.0) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        if self.own_home:
            shutil.rmtree(self.home, ignore_errors=True)

    def __enter__(self) -> DaemonProc:
        return self if self.proc is not None else self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _read_line(fd: int, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    buf = b""
    while b"\n" not in buf:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            break
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        buf += chunk
    return buf.decode(errors="replace").strip()


class WindowsProc:
    """The windows process (`hostd_dev.bench.windows`): start, wait until attached, read rounds."""

    def __init__(
        self,
        socket: str,
        topics: list[str],
        windows_per_topic: int,
        rounds: int,
        *,
        mode: str = "text",
        stamp_size: int = 64,
        trace_path: str = "",
    ) -> None:
        conf = {
            "trace_path": trace_path,
            "socket": socket,
            "topics": topics,
            "windows_per_topic": windows_per_topic,
            "rounds": rounds,
            "mode": mode,
            "stamp_size": stamp_size,
        }
        self.proc = subprocess.Popen(
            [PYTHON, "-m", "hostd_dev.bench.windows", json.dumps(conf)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
        )
        assert self.proc.stdout is not None
        self._out = self.proc.stdout

    def read(self, timeout: float = 120.0) -> dict[str, Any]:
        """The next report line (raises on timeout or when the process ended)."""
        fd = self._out.fileno()
        ready, _, _ = select.select([fd], [], [], timeout)
        if not ready:
            raise TimeoutError(f"the windows process did not report within {timeout:g}s")
        line = self._out.readline()
        if not line:
            raise RuntimeError(f"the windows process exited (code {self.proc.wait()})")
        report: dict[str, Any] = json.loads(line)
        if "fatal" in report:
            raise RuntimeError(f"windows failed: {report['fatal']}")
        return report

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._out.close()


@dataclass
class BareTurn:
    """What a bare reader saw of one turn."""

    chars: int = 0
    frames: int = 0
    reads: int = 0
    first_ns: int = 0
    last_ns: int = 0
    sha256: str = ""
    latencies_us: list[float] = field(default_factory=list)
    #: monotonic ns when the Send was written, and the first chunk's receipt
    sent_ns: int = 0
    first_chunk_text: str = ""


class BareDriver:
    """A driver (the scripted one unless `module` says) spawned directly and read with
    blocking reads: the baseline."""

    def __init__(
        self, options: dict[str, Any] | None = None, module: str = "hostd_scripted"
    ) -> None:
        from hostd.shell.drivers.session import driver_env
        from hostd_protocol.driver_messages import DriverEvent, HostCommand
        from hostd_protocol.framing import Codec, FrameDecoder

        self._cwd = tempfile.mkdtemp(prefix="hostd-bench-bare-")
        self._events: Codec[Any] = Codec(DriverEvent, "msgpack")
        self._commands: Codec[Any] = Codec(HostCommand, "msgpack")
        self._frames = FrameDecoder()
        self.spawned_ns = time.monotonic_ns()
        self.proc = subprocess.Popen(
            [product_python(), "-m", module],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            cwd=self._cwd,
            env=driver_env((), os.environ, {}),
            start_new_session=True,
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._in = self.proc.stdin.fileno()
        self._out = self.proc.stdout.fileno()
        self._options = options or {}
        self._turns = 0

    def _write(self, msg: Any) -> None:
        os.write(self._in, self._commands.encode_frame(msg))

    def _read(self) -> tuple[int, list[Any]]:
        data = os.read(self._out, READ_SIZE)
        now = time.monotonic_ns()
        if not data:
            raise RuntimeError("the scripted driver closed its stdout")
        return now, [self._events.decode(b) for b in self._frames.feed(data)]

    def handshake(self) -> None:
        from hostd_protocol.common import PROTOCOL_VERSION
        from hostd_protocol.driver_messages import DriverFatal, Init, Ready

        self._write(
            Init(protocol_version=PROTOCOL_VERSION, working_dir=self._cwd, options=self._options)
        )
        while True:
            _, events = self._read()
            for ev in events:
                if isinstance(ev, Ready):
                    return
                if isinstance(ev, DriverFatal):
                    raise RuntimeError(f"scripted driver refused: {ev}")

    def prewarm(self) -> None:
        from hostd_protocol.driver_messages import Prewarm, Warmed

        self._write(Prewarm())
        while True:
            _, events = self._read()
            if any(isinstance(ev, Warmed) for ev in events):
                return

    def turn(self, text: str, *, mode: str = "text", stamp_size: int = 64) -> BareTurn:
        """Send one turn; read and decode every frame until its `TurnEnd`."""
        from hostd_protocol.common import TextDelta
        from hostd_protocol.driver_messages import ChunkEvent, Send, TurnEnd

        self._turns += 1
        out = BareTurn()
        parts: list[str] = []
        pending = ""
        out.sent_ns = time.monotonic_ns()
        self._write(Send(turn_id=f"b{self._turns}", text=text))
        while True:
            now, events = self._read()
            out.reads += 1
            for ev in events:
                if isinstance(ev, ChunkEvent) and isinstance(ev.chunk, TextDelta):
                    t = ev.chunk.text
                    if not out.first_ns:
                        out.first_ns = now
                        out.first_chunk_text = t
                    out.last_ns = now
                    out.chars += len(t)
                    out.frames += 1
                    if mode == "text":
                        parts.append(t)
                    else:
                        buf = pending + t
                        i = 0
                        while len(buf) - i >= stamp_size:
                            stamp = buf[i : i + stamp_size].partition(":")[0]
                            out.latencies_us.append((now - int(stamp)) / 1000.0)
                            i += stamp_size
                        pending = buf[i:]
                elif isinstance(ev, TurnEnd):
                    if ev.status != "success":
                        raise RuntimeError(f"bare turn ended {ev.status}: {ev.error}")
                    if mode == "text":
                        out.sha256 = hashlib.sha256("".join(parts).encode()).hexdigest()
                    return out

    def close(self) -> None:
        from hostd_protocol.driver_messages import Close

        try:
            self._write(Close())
        except OSError:
            pass
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout):
            if f is not None:
                f.close()
        shutil.rmtree(self._cwd, ignore_errors=True)

    def __enter__(self) -> BareDriver:
        self.handshake()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def bare_fleet_turn(drivers: list[BareDriver], text: str, stamp_size: int) -> list[float]:
    """One stamped turn on every driver at once, read by one bare `select` loop.

    The baseline of the latency scenarios: the same drivers at the same rate, but nothing
    between their pipes and the reader. Returns driver -> reader latencies (microseconds).
    """
    import selectors

    from hostd_protocol.common import TextDelta
    from hostd_protocol.driver_messages import ChunkEvent, Send, TurnEnd

    sel = selectors.DefaultSelector()
    pending: dict[int, str] = {}
    lat: list[float] = []
    for i, d in enumerate(drivers):
        d._turns += 1
        d._write(Send(turn_id=f"f{d._turns}", text=text))
        sel.register(d._out, selectors.EVENT_READ, d)
        pending[i] = ""
    index = {id(d): i for i, d in enumerate(drivers)}
    running = len(drivers)
    try:
        while running:
            for key, _ in sel.select(timeout=60):
                d = key.data
                now, events = d._read()
                i = index[id(d)]
                for ev in events:
                    if isinstance(ev, ChunkEvent) and isinstance(ev.chunk, TextDelta):
                        buf = pending[i] + ev.chunk.text
                        j = 0
                        while len(buf) - j >= stamp_size:
                            stamp = buf[j : j + stamp_size].partition(":")[0]
                            lat.append((now - int(stamp)) / 1000.0)
                            j += stamp_size
                        pending[i] = buf[j:]
                    elif isinstance(ev, TurnEnd):
                        running -= 1
                        sel.unregister(d._out)
    finally:
        sel.close()
    return lat


def spawn_fleet(
    n: int, options: dict[str, Any] | None = None, module: str = "hostd_scripted"
) -> list[BareDriver]:
    """`n` bare drivers (of `module`), spawned at once, then handshaken."""
    drivers = [BareDriver(options, module) for _ in range(n)]
    try:
        for d in drivers:
            d.handshake()
    except BaseException:
        for d in drivers:
            d.close()
        raise
    return drivers
