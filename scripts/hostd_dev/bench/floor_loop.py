"""The processes of `scripts/bench floor` (`floor.py` says what they measure).

`python -m hostd_dev.bench.floor_loop VARIANT PIPES SOCKETS WINDOWS`: read the pipe fds
(JSON list) until each ends; per read, write one frame to each of that pipe's
`WINDOWS` socket fds; print this process's CPU per chunk as JSON.
`python -m hostd_dev.bench.floor_loop drain SOCKETS`: read the sockets until each ends.
"""

from __future__ import annotations

import json
import os
import resource
import select
import sys

FRAME_IN = 110
FRAME_OUT = b"\x00\x00\x00\x60" + b"y" * 96


class Loop:
    def __init__(self, pipes: list[int], socks: list[int], windows: int) -> None:
        self.pipes = pipes
        self.out = {fd: socks[k * windows : (k + 1) * windows] for k, fd in enumerate(pipes)}
        self.chunks = 0
        self.wakes = 0
        self.reads = 0
        self.frames_out = 0
        for fd in pipes + socks:
            os.set_blocking(fd, False)

    def chunk(self, fd: int) -> bool:
        """One pipe read and its socket writes; False at the pipe's end."""
        data = os.read(fd, 65536)
        if not data:
            return False
        # A read that found several chunks writes once per window, as the daemon does (one
        # merged event per read).
        self.reads += 1
        self.chunks += len(data) // FRAME_IN
        write = os.write
        for sock in self.out[fd]:
            self.frames_out += write(sock, FRAME_OUT) // len(FRAME_OUT)
        return True

    def bare(self) -> None:
        ep = select.epoll()
        for fd in self.pipes:
            ep.register(fd, select.EPOLLIN)
        live = len(self.pipes)
        while live:
            ready = ep.poll()
            self.wakes += 1
            for fd, _ in ready:
                if not self.chunk(fd):
                    ep.unregister(fd)
                    live -= 1

    def hub(self) -> None:
        import trio

        async def serve() -> None:
            ep = select.epoll()
            for fd in self.pipes:
                ep.register(fd, select.EPOLLIN)
            live = len(self.pipes)
            while live:
                await trio.lowlevel.wait_readable(ep.fileno())
                self.wakes += 1
                for fd, _ in ep.poll(0):
                    if not self.chunk(fd):
                        ep.unregister(fd)
                        live -= 1

        trio.run(serve)

    def tasks(self) -> None:
        import trio

        async def one(fd: int) -> None:
            while True:
                await trio.lowlevel.wait_readable(fd)
                self.wakes += 1
                if not self.chunk(fd):
                    return

        async def serve() -> None:
            async with trio.open_nursery() as nursery:
                for fd in self.pipes:
                    nursery.start_soon(one, fd)

        trio.run(serve)


def drain(socks: list[int]) -> None:
    ep = select.epoll()
    for fd in socks:
        ep.register(fd, select.EPOLLIN)
    live = len(socks)
    while live:
        for fd, _ in ep.poll():
            if not os.read(fd, 65536):
                ep.unregister(fd)
                live -= 1


def main(argv: list[str]) -> int:
    if argv[0] == "drain":
        drain(json.loads(argv[1]))
        return 0
    loop = Loop(json.loads(argv[1]), json.loads(argv[2]), int(argv[3]))
    if argv[0] != "bare":
        import trio  # noqa: F401  (imported before the count starts: not a chunk's cost)
    before = resource.getrusage(resource.RUSAGE_SELF)
    getattr(loop, argv[0])()
    after = resource.getrusage(resource.RUSAGE_SELF)
    n = max(1, loop.chunks)
    user = after.ru_utime - before.ru_utime
    system = after.ru_stime - before.ru_stime
    print(json.dumps({
        "cpu_us": round((user + system) / n * 1e6, 2),
        "sys_us": round(system / n * 1e6, 2),
        "chunks": loop.chunks,
        "reads": loop.reads,
        "windows_frames": loop.frames_out,
        "chunks_per_wake": round(loop.chunks / max(1, loop.wakes), 2),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
