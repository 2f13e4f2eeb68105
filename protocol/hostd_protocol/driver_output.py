"""The driver harness's output: every event a driver emits, framed, on its way to the host.

Rules this module guards:

- Frames leave in the order `send` was called (from any task), each whole and contiguous:
  bytes of two frames are never interleaved, and a frame the pipe takes only in part keeps
  the head of the buffer until its last byte is written.
- One write per scheduler pass. On a file descriptor (a real driver's stdout) `send` only
  appends the encoded frame to a buffer; the buffer is written with one `os.write` when the
  trio scheduler pass ends (an instrument's `before_io_wait`, i.e. just before the loop
  polls for I/O). No task switch per event, and everything a driver produced in one pass
  reaches the host as one pipe read. Any other stream (tests' memory streams) is written by
  the writer task, which takes everything queued when it runs.
- Backpressure: while `FLUSH_AT` bytes or more wait, `send` returns only once its own frame
  is in the pipe. A host that stops reading stops the driver's emits, with bounded memory and
  nothing dropped; a task that emits without ever yielding yields every `FLUSH_AT` bytes,
  so the harness still reads commands (an interrupt) meanwhile.
- A host that is gone (EPIPE, a closed stream): frames are discarded and `send` keeps
  returning, so a turn still ends with its `TurnEnd` and the process can exit. `send` after
  `aclose` raises `trio.ClosedResourceError`.

When the pipe is full, the instrument hands the rest to the writer task (woken through the
run's `TrioToken`: an instrument cannot reschedule a task itself, the loop has already chosen
its timeout), which waits until the pipe is writable and gives the buffer back once it is
empty.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from typing import Any

import trio

from hostd_protocol.framing import Codec

__all__ = ["FLUSH_AT", "FrameOutput", "OutputStatistics"]

#: Bytes waiting for the host beyond which `send` waits until its frame is written (the
#: default pipe buffer is 64 KiB; a quarter of it keeps a producer that never yields from
#: holding the loop more than a few milliseconds, and batches still hundreds of small
#: frames).
FLUSH_AT = 16 * 1024

#: What a full non-blocking pipe raises; anything else from `os.write` means the host is gone.
_WOULD_BLOCK = frozenset({errno.EAGAIN, errno.EWOULDBLOCK})


@dataclass(frozen=True)
class OutputStatistics:
    """A snapshot of `FrameOutput`'s counters (for tests and diagnostics)."""

    #: Frames accepted by `send` so far (discarded ones after the host left included).
    frames: int
    #: Bytes handed to the host so far.
    bytes_written: int
    #: Write calls that moved bytes (one per scheduler pass in which frames were emitted,
    #: more when the pipe was full).
    writes: int
    #: Bytes encoded but not yet written.
    pending: int
    #: The host is gone: frames are being discarded.
    broken: bool


class _PassEnd(trio.abc.Instrument):
    """Calls `FrameOutput._flush_pass` when a scheduler pass ends (before the I/O poll)."""

    def __init__(self, output: FrameOutput) -> None:
        self._output = output

    def before_io_wait(self, timeout: float) -> None:
        self._output._flush_pass()


class FrameOutput:
    """Frames `DriverEvent`s onto the host's stream; see the module docstring for the rules.

    Use: `await nursery.start(output.serve)` (the writer task), `await output.send(event)`
    from any task, `await output.aclose()` at the end (writes what is left, then the writer
    task returns).
    """

    def __init__(self, stream: trio.abc.SendStream, codec: Codec[Any]) -> None:
        self._stream = stream
        self._codec = codec
        #: Encoded frames not yet written; bytes before `_buf` were written.
        self._buf = bytearray()
        self._queued = 0  # bytes ever appended to `_buf`
        self._written = 0  # bytes ever written
        self._frames = 0
        self._writes = 0
        self._broken = False
        self._closed = False
        self._serving = False
        #: True while the writer task owns the stream (a full pipe, or a stream with no fd):
        #: the pass-end flush then leaves the buffer alone.
        self._task_owns = not isinstance(stream, trio.lowlevel.FdStream)
        self._wanted = trio.Event()  # the writer task has something to do
        self._progress = trio.Event()  # the writer task wrote (or the host is gone)
        self._token = trio.lowlevel.current_trio_token()
        self._instrument: _PassEnd | None = None
        if not self._task_owns:
            self._instrument = _PassEnd(self)
            trio.lowlevel.add_instrument(self._instrument)

    def statistics(self) -> OutputStatistics:
        return OutputStatistics(
            frames=self._frames,
            bytes_written=self._written,
            writes=self._writes,
            pending=len(self._buf),
            broken=self._broken,
        )

    async def send(self, event: Any) -> None:
        """Queue one event as a frame; waits only while `FLUSH_AT` bytes are pending.

        Raises `FrameTooLarge` (nothing queued) for an event over the maximum frame size,
        `trio.ClosedResourceError` after `aclose`.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        if self._closed:
            raise trio.ClosedResourceError("the driver's output is closed")
        if self._broken:
            self._frames += 1
            return
        self._queued += self._codec.encode_frame_into(event, self._buf)
        self._frames += 1
        if self._task_owns:
            self._wanted.set()
        if len(self._buf) >= FLUSH_AT:
            await self._wait_written(self._queued)

    async def _wait_written(self, end: int) -> None:
        """Wait until the first `end` bytes ever queued are written (or the host is gone)."""
        while self._written < end and not self._broken:
            if self._task_owns:
                if not self._serving:
                    return  # the writer task is gone (it failed): nothing will be written
                if self._progress.is_set():
                    self._progress = trio.Event()
                await self._progress.wait()
            else:
                # The pass ends here: the instrument writes, or hands over to the task.
                await trio.lowlevel.checkpoint()

    def _flush_pass(self) -> None:
        """At the end of a scheduler pass: write what the pass produced, in one call."""
        if not self._buf or self._task_owns or self._closed:
            return
        try:
            n = os.write(self._stream.fileno(), self._buf)  # type: ignore[attr-defined]
        except OSError as exc:
            if exc.errno in _WOULD_BLOCK:
                n = 0
            else:
                self._host_gone()
                return
        except Exception:  # never let trio drop the instrument: the task will see it
            n = 0
        if n:
            self._advance(n)
        if self._buf:
            # The pipe is full. Only a task can wait for it, and the loop is about to poll
            # with a timeout it chose already: wake the writer through the run's token.
            self._task_owns = True
            self._token.run_sync_soon(self._wanted.set)

    def _advance(self, n: int) -> None:
        del self._buf[:n]
        self._written += n
        self._writes += 1

    def _host_gone(self) -> None:
        self._broken = True
        self._buf.clear()
        self._written = self._queued
        self._progress.set()

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The writer task: writes whenever the pass-end flush cannot (or there is none).
        Returns after `aclose`, once everything queued is written (or the host is gone)."""
        self._serving = True
        try:
            task_status.started()
            while True:
                await self._wanted.wait()
                self._wanted = trio.Event()
                await self._write_all()
                if self._closed:
                    return
        finally:
            self._serving = False
            self._progress.set()

    async def _write_all(self) -> None:
        try:
            while self._buf and not self._broken:
                stream = self._stream
                if isinstance(stream, trio.lowlevel.FdStream):
                    if stream.fileno() < 0:  # our side closed the stream
                        self._host_gone()
                        return
                    try:
                        await trio.lowlevel.wait_writable(stream.fileno())
                        n = os.write(stream.fileno(), self._buf)
                    except OSError as exc:
                        if exc.errno in _WOULD_BLOCK:
                            continue
                        self._host_gone()  # EPIPE; EBADF: the stream was closed
                        return
                    except trio.ClosedResourceError:  # closed while we waited
                        self._host_gone()
                        return
                else:
                    data = bytes(self._buf)
                    try:
                        await stream.send_all(data)
                    except (trio.BrokenResourceError, trio.ClosedResourceError):
                        self._host_gone()
                        return
                    n = len(data)
                self._advance(n)
                self._progress.set()
        finally:
            if isinstance(self._stream, trio.lowlevel.FdStream) and not self._closed:
                # Empty again: the pass-end flush takes over.
                self._task_owns = False
            self._progress.set()

    def detach(self) -> None:
        """Stop flushing at pass ends (idempotent; `aclose` does it first)."""
        if self._instrument is not None:
            trio.lowlevel.remove_instrument(self._instrument)
            self._instrument = None

    async def aclose(self) -> None:
        """Write what is still queued (unless the host is gone), then stop the writer task.
        Further `send`s raise `trio.ClosedResourceError`."""
        self.detach()
        self._task_owns = True
        self._closed = True
        self._wanted.set()
        await self._wait_written(self._queued)
