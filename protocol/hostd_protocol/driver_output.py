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
- Consecutive text (or thinking) deltas of one turn are merged into one frame: a delta is
  kept un-encoded while the next `send` is another delta of the same kind and turn, and is
  encoded (with the text of all of them, concatenated) when the pass ends or any other event
  comes. The host merges a read's deltas when it decodes them anyway
  (`hostd.core.delta_merge`), so this changes nothing it sees but the number of frames: a
  driver streaming flat out hands over one frame per pass instead of hundreds, and both
  sides stop paying encode, frame split and decode per token. A delta carries a turn id and
  its text and nothing else (`tests/protocol/test_driver_output.py` fails when a field is
  added, so the merge is revisited). Never merged: deltas of different turns
  or kinds, deltas with anything but text between them (a tool call, a steer boundary, a
  usage figure...: every other event ends the merge, so the order of everything is kept), a
  delta whose text could not be encoded (it raises from its own `send`, as before), and a
  merge that would outgrow `MAX_CHUNK_CHARS` or the frame limit (the host would split it).
- Backpressure: while `FLUSH_AT` bytes or more wait (merged text included), `send` returns
  only once its own frame is in the pipe. A host that stops reading stops the driver's
  emits, with bounded memory and nothing dropped; a task that emits without ever yielding
  yields every `FLUSH_AT` bytes, so the harness still reads commands (an interrupt)
  meanwhile.
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

from hostd_protocol.common import TextDelta, ThinkingDelta
from hostd_protocol.driver_messages import ChunkEvent
from hostd_protocol.framing import Codec
from hostd_protocol.limits import MAX_CHUNK_CHARS

__all__ = ["FLUSH_AT", "FrameOutput", "OutputStatistics"]

#: Bytes waiting for the host beyond which `send` waits until its frame is written (the
#: default pipe buffer is 64 KiB; a quarter of it keeps a producer that never yields from
#: holding the loop more than a few milliseconds, and batches still hundreds of small
#: frames).
FLUSH_AT = 16 * 1024

#: Room a merged delta's frame keeps for everything but its text (tags, field names, the
#: turn id is counted apart): a merged text of `limit - _FRAME_ROOM` bytes always encodes
#: within the frame limit.
_FRAME_ROOM = 256

#: What a full non-blocking pipe raises; anything else from `os.write` means the host is gone.
_WOULD_BLOCK = frozenset({errno.EAGAIN, errno.EWOULDBLOCK})


@dataclass(frozen=True)
class OutputStatistics:
    """A snapshot of `FrameOutput`'s counters (for tests and diagnostics)."""

    #: Events accepted by `send` so far (discarded ones after the host left included, merged
    #: deltas included: each is one event here).
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
    #: Deltas that went out inside the frame of the delta before them (`frames` minus the
    #: frames actually encoded, for events that were not refused).
    merged: int = 0


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
        #: The delta run not yet encoded: its first event, kind (TextDelta / ThinkingDelta,
        #: None = no run), turn, texts, their UTF-8 size and the size it may grow to.
        self._run_head: ChunkEvent | None = None
        self._run_kind: type | None = None
        self._run_turn = ""
        self._run_texts: list[str] = []
        self._run_bytes = 0
        self._run_room = 0
        self._merged = 0
        #: The largest merged text (bytes): within what the host forwards as one delta and
        #: what one frame holds. 0 = no merging (a JSON codec escapes characters unboundedly).
        self._merge_limit = (
            max(0, min(MAX_CHUNK_CHARS, codec.max_frame_size - _FRAME_ROOM))
            if codec.encoding == "msgpack"
            else 0
        )
        self._instrument: _PassEnd | None = None
        if not self._task_owns:
            self._instrument = _PassEnd(self)
            trio.lowlevel.add_instrument(self._instrument)

    def statistics(self) -> OutputStatistics:
        return OutputStatistics(
            frames=self._frames,
            bytes_written=self._written,
            writes=self._writes,
            pending=len(self._buf) + self._run_bytes,
            broken=self._broken,
            merged=self._merged,
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
        # Runs once per token a driver streams: exact-type checks and few attribute lookups.
        if type(event) is ChunkEvent and self._merge_limit:
            chunk = event.chunk
            kind = type(chunk)
            if kind is TextDelta or kind is ThinkingDelta:
                text: str = chunk.text  # type: ignore[union-attr]
                size = len(text) if text.isascii() else _utf8_size(text)
                if (
                    kind is self._run_kind
                    and event.turn_id == self._run_turn
                    and self._run_bytes + size <= self._run_room
                    and size >= 0
                ):
                    self._run_texts.append(text)
                    self._run_bytes += size
                    self._merged += 1
                    self._frames += 1
                    await self._queued_some()
                    return
                if size >= 0 and self._start_run(event, kind, text, size):
                    self._frames += 1
                    await self._queued_some()
                    return
        self._close_run()
        self._queued += self._codec.encode_frame_into(event, self._buf)
        self._frames += 1
        await self._queued_some()

    async def _queued_some(self) -> None:
        if self._task_owns:
            self._wanted.set()
        if len(self._buf) + self._run_bytes >= FLUSH_AT:
            self._close_run()
            await self._wait_written(self._queued)

    def _start_run(self, event: ChunkEvent, kind: type, text: str, size: int) -> bool:
        """Make `event` the head of a new run (the run before it encoded first); False when
        it cannot merge (its turn id does not encode, or it is too big to grow)."""
        turn = event.turn_id
        turn_size = len(turn) if turn.isascii() else _utf8_size(turn)
        room = self._merge_limit - turn_size
        if turn_size < 0 or size > room:
            return False
        self._close_run()
        self._run_head = event
        self._run_kind = kind
        self._run_turn = turn
        self._run_texts = [text]
        self._run_bytes = size
        self._run_room = room
        return True

    def _close_run(self) -> None:
        """Encode the pending delta run (if any) as one frame at the end of the buffer."""
        kind = self._run_kind
        if kind is None:
            return
        texts = self._run_texts
        event = self._run_head
        if len(texts) > 1:
            event = ChunkEvent(turn_id=self._run_turn, chunk=kind(text="".join(texts)))
        self._run_head = None
        self._run_kind = None
        self._run_texts = []
        self._run_bytes = 0
        # Cannot fail: the text is known to encode and the frame to fit (`_start_run`).
        self._queued += self._codec.encode_frame_into(event, self._buf)

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
        if self._task_owns or self._closed:
            return
        self._close_run()
        if not self._buf:
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
        self._run_kind = self._run_head = None
        self._run_texts = []
        self._run_bytes = 0
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
            while not self._broken:
                self._close_run()
                if not self._buf:
                    break
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
        if not self._broken:
            self._close_run()
        self._wanted.set()
        await self._wait_written(self._queued)


def _utf8_size(text: str) -> int:
    """The UTF-8 size of a non-ASCII text; -1 if it does not encode (a lone surrogate)."""
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError:
        return -1
