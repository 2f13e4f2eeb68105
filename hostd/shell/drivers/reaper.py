"""Driver process groups die with the daemon, however the daemon dies (kill -9 included).

A driver notices a dead daemon by the end of its stdin, unless it is hung or busy (a blocked
event loop, a vendor CLI it started that never reads anything). So the daemon keeps one tiny
watchdog process (`GroupReaper`) and tells it, through a pipe, the process group of every
driver it starts and reaps. When the pipe ends (the daemon exited or was killed: the kernel
closes its descriptors either way) the watchdog kills every group still registered and
exits. No polling, no parent-death signal (which would reach the driver only, not the
vendor CLI in its group).

Rules this module guards:

- The watchdog runs in its own session (a Ctrl-C in the daemon's terminal does not kill it
  first) and ignores SIGINT/SIGTERM/SIGHUP; it ends only with its pipe.
- Only the daemon holds the pipe's write end (close-on-exec; drivers never inherit it).
- A group is unregistered when its driver is reaped, so a recycled pid is never killed.
- Registering never blocks the daemon for long: a few bytes per driver into a pipe the
  watchdog drains continuously; if the watchdog is gone, registering is a no-op (logged once).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys

log = logging.getLogger(__name__)

#: The watchdog: read "+pgid" / "-pgid" lines until EOF, then kill what is left.
WATCHDOG = r"""
import os, signal, sys
for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(s, signal.SIG_IGN)
groups = set()
for line in sys.stdin.buffer:
    line = line.strip()
    try:
        n = int(line[1:])
    except ValueError:
        continue
    if line[:1] == b"+":
        groups.add(n)
    elif line[:1] == b"-":
        groups.discard(n)
for g in groups:
    try:
        os.killpg(g, signal.SIGKILL)
    except OSError:
        pass
"""


class GroupReaper:
    """The daemon's side of the watchdog (start once, `add` / `remove` groups, `close`)."""

    def __init__(self, python: str | None = None) -> None:
        self._python = python or sys.executable
        self._proc: subprocess.Popen[bytes] | None = None
        self._broken = False

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def start(self) -> None:
        """Start the watchdog (quick: a bare interpreter, no imports but os/signal/sys)."""
        if self._proc is not None:
            return
        self._proc = subprocess.Popen(
            [self._python, "-I", "-S", "-c", WATCHDOG],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
        )
        assert self._proc.stdin is not None
        os.set_inheritable(self._proc.stdin.fileno(), False)

    def add(self, pgid: int) -> None:
        """Kill group `pgid` if the daemon dies before `remove(pgid)`."""
        self._write(f"+{pgid}\n")

    def remove(self, pgid: int) -> None:
        self._write(f"-{pgid}\n")

    def close(self) -> None:
        """The daemon is stopping cleanly: end the watchdog (it kills what is still listed,
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
