"""Drivers run at a lower CPU priority than the daemon and the desktop (a `nice` value).

Why: the daemon's fan-out is latency-critical (every window waits for it), while a driver
mostly waits on the network, and the work that is CPU-heavy in a driver's session is the
agent's tools (a build, a test run) that it starts. Under contention a desktop user wants the
UI and the stream to the windows to win; without contention a nice value changes nothing.

How, on Linux:

- The driver process's own nice value (`setpriority`). What it starts later (the vendor CLI,
  the agent's tools) inherits it.
- Its session's *autogroup*. Drivers start in a session of their own (`setsid`, so a
  terminal's signals never reach them), and with `kernel.sched_autogroup_enabled=1` each
  session is a scheduling group of its own: under contention the daemon's whole group then
  weighs the same as ONE driver's group, whatever the per-process nice values. The group's
  nice is `/proc/<pid>/autogroup`. An unprivileged user may only raise it, and the kernel
  allows one such change per 100 ms on the whole system (EAGAIN otherwise), so the write is
  retried at that pace until it is taken (a burst of new drivers settles within 0.1 s each).
- Where the kernel does not group by session (autogroup off, or the processes are in a cpu
  cgroup) only the process nice matters, and it is set.
- A confined driver (bubblewrap) starts its own session inside the sandbox, after we could set
  anything: it keeps the default priority.

`DEFAULT_DRIVER_NICE` is the daemon's default (`hostd serve --driver-nice`, 0 turns it off).
"""

from __future__ import annotations

import errno
import logging
import os

import trio

__all__ = [
    "AUTOGROUP_RETRY",
    "DEFAULT_DRIVER_NICE",
    "autogroups_enabled",
    "check_nice",
    "lower_priority",
    "set_autogroup_nice",
    "set_process_nice",
]

log = logging.getLogger(__name__)

#: The nice value drivers run at by default (0-19; 0: the daemon's own priority).
DEFAULT_DRIVER_NICE = 10
#: The kernel's pace for unprivileged autogroup changes (one per 100 ms, system-wide).
AUTOGROUP_RETRY = 0.1


def check_nice(nice: int) -> int:
    """`nice` if it is a value a process may lower itself to (0-19), else ValueError."""
    if not 0 <= nice <= 19:
        raise ValueError(f"a driver nice value is 0 (off) to 19, not {nice}")
    return nice


def set_process_nice(pid: int, nice: int) -> bool:
    """Set process `pid`'s nice value; False when it is gone or not ours to change."""
    try:
        os.setpriority(os.PRIO_PROCESS, pid, nice)
    except (ProcessLookupError, PermissionError, OSError):
        return False
    return True


def set_autogroup_nice(pid: int, nice: int) -> bool | None:
    """Set the nice value of `pid`'s autogroup. True: done. False: the kernel's rate limit
    refused it for now (EAGAIN): try again after `AUTOGROUP_RETRY`. None: nothing to do here
    (no autogroups on this system, the process is gone, or the change is not allowed)."""
    try:
        with open(f"/proc/{pid}/autogroup", "w", encoding="ascii") as f:
            f.write(str(nice))
    except BlockingIOError:
        return False
    except OSError as exc:
        if exc.errno == errno.EAGAIN:
            return False
        return None
    return True


def autogroups_enabled() -> bool:
    """Whether this kernel groups processes by session (`kernel.sched_autogroup_enabled`)."""
    try:
        with open("/proc/sys/kernel/sched_autogroup_enabled", encoding="ascii") as f:
            return f.read().strip() == "1"
    except OSError:
        return False


async def lower_priority(pid: int, nice: int) -> None:
    """Run process `pid` (a driver just started in its own session) at `nice`: the process
    now, its autogroup as soon as the kernel takes the change (see the module docstring).
    Returns when both are done or cannot be done; cancel it to give up."""
    if nice <= 0:
        return
    set_process_nice(pid, nice)
    if not autogroups_enabled():
        return
    while True:
        done = set_autogroup_nice(pid, nice)
        if done is not False:
            if done is None:
                log.debug("driver pid %d: autogroup nice not set", pid)
            return
        await trio.sleep(AUTOGROUP_RETRY)
