"""Run the real daemon as a subprocess (`python -m hostd --home H serve`) for e2e tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import BinaryIO

import trio


class DaemonProcess:
    def __init__(self, proc: trio.Process, home: Path) -> None:
        self.proc = proc
        self.home = home

    @property
    def pid(self) -> int:
        return self.proc.pid

    async def kill9(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        await self.proc.wait()

    async def terminate(self) -> int:
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
        return await self.proc.wait()


def _open_log(home: Path) -> BinaryIO:
    return open(home / "daemon-stderr.log", "ab")


def exists(path: object) -> bool:
    return os.path.lexists(path)  # type: ignore[arg-type]


async def start(home: Path, *extra: str, env: dict[str, str] | None = None) -> DaemonProcess:
    """Start the daemon and return once it serves (its readiness pipe says so); `env`:
    its whole environment instead of this process's."""
    read_fd, write_fd = os.pipe()
    log = _open_log(home)
    try:
        proc = await trio.lowlevel.open_process(
            [sys.executable, "-m", "hostd", "--home", str(home), "serve",
             "--ready-fd", str(write_fd), *extra],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            pass_fds=(write_fd,),
            env=env,
        )
    finally:
        os.close(write_fd)
        log.close()
    stream = trio.lowlevel.FdStream(read_fd)
    line = b""
    async with stream:
        while not line.endswith(b"\n"):
            data = await stream.receive_some(1024)
            if not data:
                break
            line += data
    if not line.startswith(b"ready"):
        await proc.wait()
        raise RuntimeError(f"daemon did not start: {line!r}; see {home}/daemon-stderr.log")
    return DaemonProcess(proc, home)
