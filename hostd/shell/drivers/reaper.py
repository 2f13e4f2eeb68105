"""Driver trees die with the daemon, however the daemon dies (kill -9 included).

A driver notices a dead daemon by the end of its stdin, or by its parent-death signal
(SIGTERM, `hostd_protocol.child_process`), unless it is hung or busy (a blocked event loop, a
vendor CLI it started that never reads anything). So the daemon keeps one tiny watchdog
process (`GroupReaper`, running `hostd_protocol.child_process.watchdog`) and tells it,
through a pipe, the pid of every driver it starts and reaps. When the pipe ends (the daemon
exited or was killed: the kernel closes its descriptors either way) the watchdog ends the
whole tree of every driver still registered (`end_tree`: its process group and every
descendant, `setsid` ones included, which the driver harness keeps under the driver by
being a subreaper) and exits.

Rules this module guards:

- The watchdog runs in its own session (a Ctrl-C in the daemon's terminal does not kill it
  first), has no parent-death signal, and ignores SIGINT/SIGTERM/SIGHUP; it ends only with
  its pipe.
- Only the daemon holds the pipe's write end (close-on-exec; drivers never inherit it).
- A driver is unregistered when it is reaped, so a recycled pid is never killed.
- Registering never blocks the daemon for long: a few bytes per driver into a pipe the
  watchdog drains continuously; if the watchdog is gone, registering is a no-op (logged once).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys

from hostd_protocol import child_process

log = logging.getLogger(__name__)


class GroupReaper:
    """The daemon's side of the watchdog (start once, `add` / `remove` drivers, `close`)."""

    def __init__(self, python: str | None = None) -> None:
        self._python = python or sys.executable
        self._proc: subprocess.Popen[bytes] | None = None
        self._broken = False

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def start(self) -> None:
        """Start the watchdog (quick: an isolated interpreter importing one module)."""
        if self._proc is not None:
            return
        self._proc = child_process.popen(
            [self._python, *child_process.WATCHDOG_ARGS],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            close_fds=True,
        )
        assert self._proc.stdin is not None
        os.set_inheritable(self._proc.stdin.fileno(), False)

    def add(self, pid: int) -> None:
        """End `pid`'s tree if the daemon dies before `remove(pid)`."""
        self._write(f"+{pid}\n")

    def remove(self, pid: int) -> None:
        self._write(f"-{pid}\n")

    def close(self) -> None:
        """The daemon is stopping cleanly: end the watchdog (it ends what is still listed,
        which after a clean shutdown is nothing)."""
        proc = self._proc
        if proc is None:
            return
        self._proc = None
        if proc.stdin is not None:
            try:
                proc.stdin.close()
            except OSError:
                pass
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def _write(self, line: str) -> None:
        proc = self._proc
        if proc is None or proc.stdin is None or self._broken:
            return
        try:
            proc.stdin.write(line.encode())
            proc.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            self._broken = True
            log.error("the driver watchdog is gone (%s); drivers may outlive a killed daemon", exc)
