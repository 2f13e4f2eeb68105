"""Reading a driver's stdout: one `os.read` per call, paced so that a driver streaming flat
out is read in a few large reads whatever the scheduling, and a driver at any slower pace is
read the moment it writes.

Rules this module guards:

- Bytes come out exactly as the pipe gave them: never reordered, dropped or split
  differently than `os.read` split them (the frame decoder behind does not care).
- A read that had to wait for the pipe is made as soon as the loop sees it readable (no
  extra scheduler pass), and nothing follows it: an event at a human pace, or at 50 chunks/s,
  reaches the topic with no added delay.
- After a read that waited and set no pause, the next read waits for the pipe first: at a
  slow pace a read at once would only find it empty (a syscall and an exception per event).
- A read is *hot* when it found data without waiting, or came less than `pace` after the
  previous read that returned data. After a hot read the next read is made no earlier than
  `pace` after it (`ReadPacer`), so while a driver streams faster than one write per `pace`
  the daemon reads its pipe at most once per `pace` and each read carries everything written
  meanwhile. A read of `big` bytes or more is not paced: its batch is already large (a driver
  that writes many frames per write, like the harness's `FrameOutput`), and pausing would only
  stall a fast driver on a full pipe.

Why: a pipe read is one batch, and one batch becomes one merged text event for the runtime,
the store and every window (`coalesce_deltas`, `TopicStream.held`). Without pacing the batch
size was decided by timing: a daemon that happened to read early (a few chunks per read)
sent ~2.5x more frames to every window, spent twice the CPU in the daemon and the windows'
process, crowded the CPU-bound driver out of two shared cores and stayed in that slow
equilibrium for the whole turn (0.6x the bare pipe; a daemon that read late ran at 1.2x).
Pacing makes the batch size a function of the stream's rate (rate x `pace`) instead, and
costs latency only to bytes written within `pace` of a read that was itself hot.
"""

from __future__ import annotations

import math
import os

import trio

__all__ = ["BIG_READ", "READ_PACE", "PipeReader", "ReadPacer"]

#: Minimum spacing of reads while a driver streams flat out (seconds). 1 ms: a window gets
#: at most ~1,000 events a second from one streaming topic (far above what a screen shows),
#: and an event written right after a hot read waits at most this long.
READ_PACE = 0.001
#: A read this big is a batch large enough on its own (~200 small chunks' frames): never paced.
#: Below the 64 KiB a pipe holds, so a driver writing faster than 16 KiB per pace cannot
#: be held up by a pause.
BIG_READ = 16 * 1024


class ReadPacer:
    """When the next read of a pipe may be made (sans-IO: time comes in as an argument)."""

    def __init__(self, pace: float = READ_PACE, big: int = BIG_READ) -> None:
        self.pace = pace
        self.big = big
        #: When the last read that returned data was made (-inf: none yet).
        self._last = -math.inf

    def read(self, now: float, size: int, *, waited: bool) -> float:
        """Record a read of `size` bytes (> 0) at `now`; return the earliest time of the next
        read. `waited`: the read had to wait for the pipe to become readable."""
        hot = not waited or now - self._last < self.pace
        self._last = now
        if hot and size < self.big:
            return now + self.pace
        return now


class PipeReader:
    """Reads a non-blocking pipe `fd` (which it does not own) through trio's loop."""

    def __init__(self, fd: int, *, size: int, pace: float = READ_PACE, big: int = BIG_READ) -> None:
        self._fd = fd
        self._size = size
        self._pacer = ReadPacer(pace, min(big, size))
        self._next_read_at = -math.inf
        #: The last read waited for the pipe and set no pause: wait before the next read.
        self._quiet = False

    @property
    def quiet(self) -> bool:
        """The next read waits for the pipe first (no pause pending): the pipe can be parked
        on a `PipeHub`, whose handler reads it with `read_ready`."""
        return self._quiet and self._next_read_at == -math.inf

    def read_ready(self) -> bytes | None:
        """The read `receive` makes after waiting, for a pipe the loop saw readable: the next
        bytes, b"" at its end (or when it broke), None when it had nothing after all. Sets
        the same pause or wait for the next read as `receive` (so a pipe that turned hot is
        no longer `quiet`)."""
        try:
            data = os.read(self._fd, self._size)
        except BlockingIOError:
            return None
        except OSError:
            return b""
        if data:
            self._after_read(data, waited=True)
        return data

    async def receive(self) -> bytes:
        """The next bytes of the pipe, as one `os.read` returned them; b"" at its end (or
        when the descriptor was closed under us, or the pipe broke)."""
        waited = False
        if self._next_read_at > -math.inf:
            # The pause after a hot read; it is also the yield that keeps a driver writing
            # faster than we read from holding the loop (a read that waited needs none: the
            # loop woke it).
            await trio.sleep_until(self._next_read_at)
            self._next_read_at = -math.inf
        elif self._quiet:
            # The last read had to wait and was not hot: the driver writes slower than once
            # per pace (50 chunks/s, a human), so a read now would only find the pipe empty.
            # Wait first: one `read` syscall and one exception fewer per chunk. (Data already
            # there is seen by the loop's next poll, and that read counts as hot if it is.)
            try:
                await trio.lowlevel.wait_readable(self._fd)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return b""
            except OSError:
                pass  # e.g. EBADF: the read below says what it is
            waited = True
        while True:
            try:
                data = os.read(self._fd, self._size)
            except BlockingIOError:
                try:
                    await trio.lowlevel.wait_readable(self._fd)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    return b""
                waited = True
                continue
            except OSError:  # EBADF: closed under us; EIO and the like: the pipe is gone
                return b""
            break
        if data:
            self._after_read(data, waited=waited)
        return data

    def _after_read(self, data: bytes, *, waited: bool) -> None:
        now = trio.current_time()
        at = self._pacer.read(now, len(data), waited=waited)
        # A read that did not wait yields once even when it is not paced (`big`).
        self._next_read_at = at if at > now or not waited else -math.inf
        self._quiet = waited and self._next_read_at == -math.inf
