"""One trio task reading every quiet driver pipe: the per-chunk wake-up of a streaming topic
costs a slot in that task's step, not a task step, a rescheduling and an `epoll_ctl` of its own.

Why: at 100 topics streaming 50 chunks/s each (issue 35), every chunk was one wake-up of its
session's reader task: trio re-arms the pipe in its epoll (`wait_readable` is one-shot),
reschedules the task and runs a task step, and a daemon that keeps up runs a whole loop pass
for one or two chunks. The hub keeps the parked pipes in an epoll set of its own
(level-triggered, registered once per park), waits on that set's fd in trio's loop, and
reads every ready pipe in one task step, calling each pipe's handler synchronously.

Rules this module guards:

- A pipe is read by its parked task's handler only, and only while parked: `park` returns
  (the task reads on its own again) once the handler returns anything but `STAY`, raises, or
  the task is cancelled, and the fd is out of the set before that. So the bytes of one pipe
  are never read by two readers, and a handler's work happens in pipe order.
- A handler runs inside the hub's task step: it must not block (no await; a pipe read, a
  decode and a synchronous hand-off, like `DriverSession`'s batch taker).
- A pipe is read the moment the loop sees it readable: the hub adds no wait. (A pause after
  a busy pass, to read more chunks per pass, was measured in session 9: 0.5 ms cost 2-4 ms
  of host p50 at 100 x 4 on this machine, since trio's sleep rounds to its epoll's
  millisecond, and the CPU it saved was within the noise: not kept.)
- When the hub stops (its nursery ends), every parked task is released with `STOPPED` and
  reads its pipe on its own.
"""

from __future__ import annotations

import select
from collections.abc import Callable
from dataclasses import dataclass

import trio

__all__ = ["STAY", "STOPPED", "PipeHub", "PipeHubStatistics"]


class _Sentinel:
    def __init__(self, name: str) -> None:
        self._name = name

    def __repr__(self) -> str:
        return self._name


#: A handler's "keep me parked" answer.
STAY = _Sentinel("STAY")
#: What `park` returns when the hub stopped under the task.
STOPPED = _Sentinel("STOPPED")

Handler = Callable[[], object]


class _Parked:
    __slots__ = ("error", "handler", "result", "task")

    def __init__(self, handler: Handler, task: trio.lowlevel.Task) -> None:
        self.handler = handler
        self.task = task
        self.result: object = None
        self.error: Exception | None = None


@dataclass(frozen=True)
class PipeHubStatistics:
    #: Pipes parked now.
    parked: int
    #: Times the hub woke and read the ready pipes, and handler calls (pipe reads) in all.
    passes: int
    reads: int


class PipeHub:
    """Start with `await nursery.start(hub.serve)`; tasks call `await hub.park(fd, handler)`."""

    def __init__(self) -> None:
        #: The set of parked pipes, open while `serve` runs.
        self._epoll: select.epoll | None = None
        self._parked: dict[int, _Parked] = {}
        self._serving = False
        self._passes = 0
        self._reads = 0

    @property
    def serving(self) -> bool:
        """Parking is possible (the hub's task runs)."""
        return self._serving

    def statistics(self) -> PipeHubStatistics:
        return PipeHubStatistics(len(self._parked), self._passes, self._reads)

    async def park(self, fd: int, handler: Handler) -> object:
        """Hand pipe `fd` to the hub until `handler` (called each time the pipe is readable)
        returns something other than `STAY`; return that. Raises what the handler raised.
        Returns `STOPPED` at once when the hub does not serve."""
        if not self._serving:
            await trio.lowlevel.checkpoint()
            return STOPPED
        if fd in self._parked:
            raise trio.BusyResourceError(f"pipe {fd} is parked on the hub already")
        assert self._epoll is not None
        slot = _Parked(handler, trio.lowlevel.current_task())
        self._epoll.register(fd, select.EPOLLIN)
        self._parked[fd] = slot

        def abort(_raise_cancel: object) -> trio.lowlevel.Abort:
            self._unpark(fd)
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)
        if slot.error is not None:
            raise slot.error
        return slot.result

    def _unpark(self, fd: int) -> None:
        del self._parked[fd]
        assert self._epoll is not None
        try:
            self._epoll.unregister(fd)
        except OSError:
            pass  # closed under us: the kernel dropped it from the set already

    def _release(self, fd: int, result: object, error: Exception | None = None) -> None:
        slot = self._parked[fd]
        self._unpark(fd)
        slot.result, slot.error = result, error
        trio.lowlevel.reschedule(slot.task)

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Read parked pipes until cancelled; then release every parked task."""
        if self._serving:
            raise trio.BusyResourceError("this PipeHub serves already")
        epoll = self._epoll = select.epoll()
        self._serving = True
        task_status.started()
        try:
            while True:
                await trio.lowlevel.wait_readable(epoll.fileno())
                self._pass(epoll)
        finally:
            self._serving = False
            for fd in list(self._parked):
                self._release(fd, STOPPED)
            epoll.close()
            self._epoll = None

    def _pass(self, epoll: select.epoll) -> None:
        """Run the handler of every ready parked pipe once."""
        ready = epoll.poll(0)
        self._passes += 1
        for fd, _mask in ready:
            slot = self._parked.get(fd)
            if slot is None:
                continue  # released earlier in this pass
            self._reads += 1
            try:
                result = slot.handler()
            except Exception as exc:  # the parked task's to handle, not the hub's
                self._release(fd, None, exc)
                continue
            if result is not STAY:
                self._release(fd, result)
