"""`python -m hostd_scripted`: run the scripted driver on stdin/stdout (`run_driver`), keeping
the frames fd so the failure scenarios (`/garbage`, `/oversized`) can write bytes that are not
frames.
"""

from __future__ import annotations

from hostd_protocol.driver_harness import run_driver
from hostd_scripted.driver import ScriptedDriver


def main() -> None:
    run_driver(lambda process: ScriptedDriver(frames_fd=process.frames_fd))


if __name__ == "__main__":
    main()
