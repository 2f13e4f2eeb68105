"""A real `hostd serve` subprocess for the reliability suite: start, kill -9, stop, measure.

The daemon runs exactly as a user runs it (`python -m hostd --home H serve`), in its own
`HOSTD_HOME`, so every attack goes through the real socket, store and driver processes.

Readiness is the daemon's own `--ready-fd` pipe (it writes `ready <pid>` once it serves), never
a guess. Driver processes are found through /proc (children of the daemon; after a kill -9
they are orphans, found by their working directory under the home folder).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import trio

from hostd.shell.paths import Paths
from hostd.testing.processes import child_pids

__all__ = ["DaemonProcess", "ProcSample", "pids_under", "wait_pids_gone"]


@dataclass(frozen=True)
class ProcSample:
    """One measurement of the daemon process (Linux /proc)."""

    at: float
    rss_kib: int
    fds: int
    threads: int


class DaemonProcess:
    """One daemon subprocess at a time for `home`; `start()` again after `kill9()`/`stop()`.

    Args:
        home: The HOSTD_HOME folder (short: the socket path must fit in 104 bytes).
        env: Extra environment for the daemon (on top of this process's).
        flush_interval: `--flush-interval` (the store's bound on streamed text lost to kill -9).
        umask: Run the daemon with this umask (to check file modes under a permissive one).
    """

    def __init__(
        self,
        home: Path,
        *,
        env: Mapping[str, str] | None = None,
        flush_interval: float | None = None,
        default_driver: str = "scripted",
        log_level: str = "INFO",
        umask: int | None = None,
        python: str = sys.executable,
    ) -> None:
        self.home = Path(home)
        self.paths = Paths.under(self.home)
        self.env = dict(env or {})
        self.flush_interval = flush_interval
        self.default_driver = default_driver
        self.log_level = log_level
        self.umask = umask
        self.python = python
        self.proc: trio.Process | None = None
        self.starts = 0
        #: stdout/stderr of every start, appended (the daemon also writes <home>/log/hostd.log).
        self.output_path = self.home / "daemon-output.log"

    @property
    def pid(self) -> int:
        assert self.proc is not None, "the daemon is not running"
        return self.proc.pid

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    def argv(self) -> list[str]:
        # -X faulthandler: a crash in C code (SQLite, msgspec) leaves a traceback behind.
        argv = [self.python, "-X", "faulthandler", "-m", "hostd", "--home", str(self.home), "serve",
                "--log-level", self.log_level, "--default-driver", self.default_driver]
        if self.flush_interval is not None:
            argv += ["--flush-interval", repr(self.flush_interval)]
        return argv

    async def start(self, timeout: float = 30.0) -> int:
        """Spawn the daemon and return its pid once it serves (its ready pipe says so)."""
        assert not self.running, "the daemon is already running"
        self.home.mkdir(parents=True, exist_ok=True)
        read_fd, write_fd = os.pipe()
        env = {**os.environ, **self.env}
        env.pop("HOSTD_HOME", None)
        umask = self.umask

        def preexec() -> None:  # runs in the child between fork and exec
            if umask is not None:
                os.umask(umask)

        self.starts += 1
        with open(self.output_path, "ab") as out:  # noqa: ASYNC230 - a local log, once
            out.write(f"--- start {self.starts}\n".encode())
            out.flush()
            try:
                self.proc = await trio.lowlevel.open_process(
                    [*self.argv(), "--ready-fd", str(write_fd)],
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=env,
                    pass_fds=(write_fd,),
                    preexec_fn=preexec if umask is not None else None,
                )
            finally:
                os.close(write_fd)
        line = b""
        try:
            async with trio.lowlevel.FdStream(read_fd) as pipe:
                with trio.fail_after(timeout):
                    while not line.endswith(b"\n"):
                        data = await pipe.receive_some(256)
                        if not data:
                            break
                        line += data
        except trio.TooSlowError:
            await self.kill9()
            raise RuntimeError(
                f"hostd did not start within {timeout:g}s; see {self.output_path}"
            ) from None
        word, _, _rest = line.decode(errors="replace").strip().partition(" ")
        if word != "ready":
            code = await self.kill9()
            raise RuntimeError(
                f"hostd did not start ({line.decode(errors='replace').strip() or 'no answer'}, "
                f"exit code {code}); see {self.output_path}"
            )
        return self.pid

    async def kill9(self) -> int | None:
        """SIGKILL the daemon (nothing runs in it after this) and reap it."""
        proc = self.proc
        if proc is None:
            return None
        if proc.returncode is None:
            try:
                os.kill(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        with trio.CancelScope(shield=True):
            await proc.wait()
        self.proc = None
        return proc.returncode

    async def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM (graceful shutdown), then SIGKILL if it takes longer than `timeout`."""
        proc = self.proc
        if proc is None:
            return None
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        with trio.move_on_after(timeout):
            await proc.wait()
        if proc.returncode is None:
            await self.kill9()
            raise RuntimeError(f"hostd did not stop within {timeout:g}s of SIGTERM; killed it")
        self.proc = None
        return proc.returncode

    # --- measurements --------------------------------------------------------------------

    def sample(self) -> ProcSample:
        """RSS, open descriptors and threads of the daemon, from /proc."""
        pid = self.pid
        rss = threads = 0
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1])
                elif line.startswith("Threads:"):
                    threads = int(line.split()[1])
        fds = len(os.listdir(f"/proc/{pid}/fd"))
        return ProcSample(trio.current_time(), rss, fds, threads)

    def driver_pids(self) -> set[int]:
        """The daemon's child processes that are drivers (not its group watchdog)."""
        if not self.running:
            return set()
        return {pid for pid in child_pids(self.pid) if not _is_watchdog(pid)}

    def child_pids(self) -> set[int]:
        """Every child process of the daemon (drivers and the group watchdog)."""
        return child_pids(self.pid) if self.running else set()

    def log_text(self) -> str:
        """Everything the daemon logged so far (its log file and its captured output)."""
        parts = []
        for path in (self.paths.log_path, self.output_path):
            try:
                parts.append(path.read_text(errors="replace"))
            except FileNotFoundError:
                pass
        return "\n".join(parts)


def _is_watchdog(pid: int) -> bool:
    """`hostd.shell.drivers.reaper`'s watchdog: `python <child_process.WATCHDOG_ARGS>`."""
    from hostd_protocol.child_process import WATCHDOG_ARGS

    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return False
    return argv[1 : 1 + len(WATCHDOG_ARGS)] == [a.encode() for a in WATCHDOG_ARGS]


def pids_under(folder: Path) -> set[int]:
    """Processes whose working directory is inside `folder` (drivers run in
    `<home>/data/workspaces/<topic>`), so orphans of a killed daemon can be found."""
    root = str(Path(folder).resolve())
    found: set[int] = set()
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            cwd = os.readlink(f"/proc/{entry}/cwd")
        except OSError:
            continue
        if cwd == root or cwd.startswith(root + os.sep):
            found.add(int(entry))
    return found


async def wait_pids_gone(pids: set[int], timeout: float) -> set[int]:
    """Wait (pidfd, no polling) until every pid has exited; returns the ones still alive."""
    left: set[int] = set()
    with trio.move_on_after(timeout):
        for pid in sorted(pids):
            try:
                fd = os.pidfd_open(pid)
            except ProcessLookupError:
                continue
            try:
                left.add(pid)
                await trio.lowlevel.wait_readable(fd)
                left.discard(pid)
            finally:
                os.close(fd)
        return set()
    # Timed out: report what is still there (zombies of other parents count as gone).
    return {p for p in pids if _alive(p)}


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            state = fh.read().rsplit(b")", 1)[1].split()[0]
    except OSError:
        return False
    return state != b"Z"
