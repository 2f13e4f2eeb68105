"""The agent subprocess, tied to the driver process's life (the trio shell's spawn).

Rules this module guards:

- On Linux the agent gets `PR_SET_PDEATHSIG=SIGKILL`, so a driver killed with SIGKILL takes
  its agent along (agents do not reliably exit when their stdin closes). The kernel sends
  that signal when the *thread* that forked the child ends, not the process: spawning from
  a trio worker thread (`trio.lowlevel.open_process` does) killed every agent about 10 s
  after the worker went idle and trio's thread cache retired it, in the middle of long
  turns. So on Linux the agent is forked from the calling thread, the driver's trio thread,
  which lives as long as the driver; its exit is awaited on a pidfd, as trio does.
- The child calls only a libc function resolved before the fork: no `dlopen`, import or
  allocation between fork and exec.
- Elsewhere (no PDEATHSIG) `trio.lowlevel.open_process` is used as it is.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import trio

_PR_SET_PDEATHSIG = 1


def _prctl() -> Callable[..., int] | None:
    try:
        fn: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    return fn


#: `prctl`, resolved once in the parent.
_PRCTL = _prctl() if sys.platform.startswith("linux") else None


def _set_pdeathsig() -> None:  # runs in the child between fork and exec
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)


class Child(Protocol):
    """What `AgentProcess` needs of a subprocess (`trio.Process` has it too)."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    stdin: trio.abc.SendStream | None
    stdout: trio.abc.ReceiveStream | None
    stderr: trio.abc.ReceiveStream | None

    async def wait(self) -> int: ...


class _LinuxChild:
    """A `subprocess.Popen` forked from the trio thread: pipes as `FdStream`s, exit on a
    pidfd."""

    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
        self._popen = popen
        self._pidfd = os.pidfd_open(popen.pid)
        self._wait_lock = trio.Lock()
        self.stdin: trio.abc.SendStream | None = None
        self.stdout: trio.abc.ReceiveStream | None = None
        self.stderr: trio.abc.ReceiveStream | None = None
        # FdStream takes ownership of a descriptor: give it its own, close Popen's files.
        if popen.stdin is not None:
            self.stdin = trio.lowlevel.FdStream(os.dup(popen.stdin.fileno()))
            popen.stdin.close()
        if popen.stdout is not None:
            self.stdout = trio.lowlevel.FdStream(os.dup(popen.stdout.fileno()))
            popen.stdout.close()
        if popen.stderr is not None:
            self.stderr = trio.lowlevel.FdStream(os.dup(popen.stderr.fileno()))
            popen.stderr.close()

    @property
    def pid(self) -> int:
        return self._popen.pid

    @property
    def returncode(self) -> int | None:
        return self._popen.poll()

    async def wait(self) -> int:
        # One waiter on the pidfd at a time; the next finds the exit code already reaped.
        async with self._wait_lock:
            while self._popen.poll() is None:
                # The pidfd turns readable when the process exits; poll() then reaps it.
                await trio.lowlevel.wait_readable(self._pidfd)
            if self._pidfd >= 0:
                os.close(self._pidfd)
                self._pidfd = -1
        return self._popen.returncode

    def __del__(self) -> None:
        if getattr(self, "_pidfd", -1) >= 0:
            os.close(self._pidfd)


async def spawn(argv: Sequence[str], *, env: dict[str, str], cwd: str) -> Child:
    """Start `argv` in its own session with piped stdio; raises `OSError` if it cannot."""
    options: dict[str, Any] = dict(
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=cwd,
        start_new_session=True,
    )
    if _PRCTL is None or not hasattr(os, "pidfd_open"):
        return await trio.lowlevel.open_process(list(argv), **options)
    # In this thread (see the module docstring); a fork + exec takes a few milliseconds.
    popen = subprocess.Popen(list(argv), preexec_fn=_set_pdeathsig, **options)  # noqa: ASYNC220
    try:
        return _LinuxChild(popen)
    except OSError:
        popen.kill()
        popen.wait()
        raise
