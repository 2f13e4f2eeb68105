"""`python -m hostd_scripted`: run the scripted driver on stdin/stdout.

Like `hostd_protocol.driver_harness.run_driver`, but keeps the frames fd so the failure
scenarios (`/garbage`, `/oversized`) can write bytes that are not frames.
"""

from __future__ import annotations

import os
import sys

import trio

from hostd_protocol.driver_harness import serve_driver
from hostd_scripted.driver import ScriptedDriver


def main() -> None:
    frames_fd = os.dup(1)
    os.dup2(2, 1)  # stray prints land in the stderr tail, never in the frame channel
    sys.stdout = sys.stderr
    driver = ScriptedDriver(frames_fd=frames_fd)

    async def serve() -> int:
        stdin = trio.lowlevel.FdStream(os.dup(0))
        stdout = trio.lowlevel.FdStream(frames_fd)
        async with stdin, stdout:
            return await serve_driver(driver, stdin, stdout)

    sys.exit(trio.run(serve))


if __name__ == "__main__":
    main()
