"""Per-stage timestamps of the event path, for `scripts/bench latency --trace` (issue 22).

Off unless the daemon starts with `HOSTD_TRACE=<file>` in its environment; then production
code pays one module-attribute test (`trace.ENABLED`) per hook and nothing else. When on,
each hook appends a tuple of `time.monotonic_ns()` values to an in-memory list (no I/O on
the event loop), and the lists are written to `<file>` as JSON lines when the process exits
(`atexit`: `hostd serve` returns normally on SIGTERM).

The stages of one driver event, keyed by (topic id, seq) once the runtime gave it a seq:

- `read`: the session decoded the pipe read that carried it (`DriverSession`);
- `pump`: the topic's pump took that batch off the session's channel;
- `runtime`: the runtime's effect reached `TopicStream.publish` (runtime + effect apply);
- `fanout`: publish returned (encode once per encoding, queued for every window);
- `write`: a window's connection wrote it to the socket (one record per window).

The send path of a turn, keyed by topic (the k-th `send` request of a topic with the k-th
`Send` its driver got): `send-in` (a connection decoded the client's `send` request) and
`send-out` (the session wrote `Send` whole to the driver's stdin).

Plus `commit` spans (start, end) of the store writer's batches, so a bench can tell whether
events that crossed a commit were later than those that did not (the store writer runs on a
worker thread and competes for the GIL with the event loop).

The bench adds the two ends it can see: the driver's emit stamp and the window's receipt.
"""

from __future__ import annotations

import atexit
import json
import os
from collections.abc import Iterable
from time import monotonic_ns

#: The file the trace goes to at exit, or "" (tracing off).
PATH = os.environ.get("HOSTD_TRACE", "")
ENABLED = bool(PATH)

# Pipe-read stamps of batches waiting in a session's channel, by id() of the batch list: the
# list object lives until the pump takes it, so its id cannot be reused meanwhile.
_batch_read: dict[int, int] = {}
#: (read_ns, pump_ns) of the batch the runtime is applying right now, or None.
_current: tuple[int, int] | None = None
#: (topic, seq, read, pump, runtime, fanout) per published driver event.
events: list[tuple[str, int, int, int, int, int]] = []
#: (topic, seq, connection id, write) per event frame written to a window's socket.
writes: list[tuple[str, int, int, int]] = []
#: (start, end) of each store batch commit.
commits: list[tuple[int, int]] = []
#: (topic, ns) per client `send` request decoded by a connection.
sends_in: list[tuple[str, int]] = []
#: (topic, ns) per `Send` written whole to a driver's stdin.
sends_out: list[tuple[str, int]] = []


def batch_read(batch: object) -> None:
    """A session is about to hand `batch` (decoded from one pipe read) to its topic."""
    _batch_read[id(batch)] = monotonic_ns()


def batch_taken(batch: object, first: bool) -> None:
    """The pump took `batch` off the channel (`first`: the first of the batches it merges,
    whose read stamp stands for the whole merged batch)."""
    read = _batch_read.pop(id(batch), 0)
    global _current
    if first:
        _current = (read, monotonic_ns())


def batch_done() -> None:
    """The pump applied its merged batch: later publishes are not driver events."""
    global _current
    _current = None


def published(topic_id: str, seq: int, runtime_ns: int) -> None:
    """`TopicStream.publish` of event `seq` began at `runtime_ns` and returns now."""
    if _current is not None:
        events.append((topic_id, seq, _current[0], _current[1], runtime_ns, monotonic_ns()))


def written(keys: Iterable[tuple[str, int]], conn_id: int) -> None:
    """A connection wrote the frames of these (topic, seq) events to its socket."""
    now = monotonic_ns()
    writes.extend((topic, seq, conn_id, now) for topic, seq in keys)


def send_in(topic_id: str) -> None:
    """A connection decoded a client's `send` request for `topic_id`."""
    sends_in.append((topic_id, monotonic_ns()))


def send_out(topic_id: str) -> None:
    """A driver session wrote a `Send` (a turn's start) to its driver's stdin."""
    sends_out.append((topic_id, monotonic_ns()))


def commit(start_ns: int) -> None:
    """A store batch that began at `start_ns` is committed now."""
    commits.append((start_ns, monotonic_ns()))


def dump(path: str) -> None:
    """Append everything recorded so far to `path` as JSON lines. Appends, and only when
    something was recorded: another process that imports this module with the same
    environment (a child of the daemon, say) must not clobber the daemon's file."""
    if not (events or writes or commits or sends_in or sends_out):
        return
    with open(path, "a", encoding="utf-8") as f:
        for e in events:
            f.write(json.dumps(["event", *e]) + "\n")
        for w in writes:
            f.write(json.dumps(["write", *w]) + "\n")
        for c in commits:
            f.write(json.dumps(["commit", *c]) + "\n")
        for s in sends_in:
            f.write(json.dumps(["send-in", *s]) + "\n")
        for s in sends_out:
            f.write(json.dumps(["send-out", *s]) + "\n")


if ENABLED:
    atexit.register(dump, PATH)
