"""The hostd client library's async trio client (`sync_client.SyncClient` is its blocking
face)::

    async with open_client(autostart=True) as client:
        topic = await client.create_topic(title="demo", driver="scripted")
        async with client.attach(topic.id) as sub:
            await client.send(topic.id, "hello")
            async for item in sub:          # Snapshot first, then TopicEvents
                if isinstance(item, TurnEnded):
                    break
            print(sub.transcript.rows())

Rules this module guards:

- One reader task per connection routes frames: replies to the waiting request (by id), topic
  events to that topic's subscription. Writes go through one lock.
- A request answered by `ErrorReply` raises the typed error rebuilt with `error_from_code`.
- A subscription (`hostd.client.subscription`) hides snapshot, replay and resync from the
  caller: it keeps the transcript current, and when the host sends `Resync` or a seq gap shows
  up it re-attaches with `since=<last seq>`; if the host cannot replay that far it takes a
  fresh snapshot, which it yields (a `Snapshot` item) so the caller redraws.
- Topic-list changes go to the connection's one `watch_topics` watch
  (`hostd.client.topic_watch`), if any.

Schedule requests are `hostd.client.schedule_ops.ScheduleOps`, topic operations
`hostd.client.topic_ops.TopicOps` (both mixed into `Client`).
"""

from __future__ import annotations

import itertools
import os
import socket
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import trio

from hostd.client.schedule_ops import ScheduleOps
from hostd.client.subscription import Subscription
from hostd.client.sync_wire import (
    DaemonNotRunning,
    autostart_connect,
    connect_attempts,
    encode_request,
    start_daemon,
    unreachable,
)
from hostd.client.sync_wire import not_running as _not_running
from hostd.client.topic_ops import TopicOps
from hostd.client.topic_watch import TopicWatch
from hostd.client.whole_rows import RowReading
from hostd.shell.paths import Paths
from hostd_protocol.client_messages import (
    AnswerApproval,
    AssistantInfo,
    AssistantListResult,
    ContinueTurn,
    CreateTopic,
    DeleteTopic,
    Detach,
    DiscardQueued,
    DriverInfo,
    DriverListResult,
    EditQueued,
    ErrorReply,
    GetTopic,
    GetUsage,
    Hello,
    History,
    HistoryResult,
    ListAssistants,
    ListDrivers,
    ListTopics,
    Ping,
    Pong,
    PrewarmTopic,
    RenameTopic,
    Reply,
    SendMessage,
    SendNow,
    SendResult,
    ServerMessage,
    Shutdown,
    Status,
    StatusResult,
    Stop,
    TopicInfo,
    TopicListResult,
    TopicResult,
    TopicsChanged,
    UnwatchTopics,
    UsageTotals,
    WatchTopics,
    Welcome,
)
from hostd_protocol.common import (
    PROTOCOL_VERSION,
    AnswerTarget,
    Attachment,
    HistoryMessage,
    SendIntent,
)
from hostd_protocol.errors import (
    ConnectionBroken,
    ConnectionClosed,
    HandshakeError,
    HostdError,
    ProtocolError,
    error_from_code,
)
from hostd_protocol.framing import DEFAULT_MAX_FRAME_SIZE, Codec, Encoding, FrameDecoder

T = TypeVar("T")

_CODECS: dict[Encoding, Codec[ServerMessage]] = {}


def _codec(encoding: Encoding) -> Codec[ServerMessage]:
    codec = _CODECS.get(encoding)
    if codec is None:
        codec = _CODECS[encoding] = Codec(ServerMessage, encoding, DEFAULT_MAX_FRAME_SIZE)
    return codec


class Client(TopicOps, ScheduleOps, RowReading):
    """One connection to the daemon. Use `open_client()` to get one."""

    def __init__(self, stream: trio.abc.Stream, *, encoding: Encoding = "msgpack") -> None:
        self._stream = stream
        self.encoding: Encoding = encoding
        self._codec = _codec(encoding)
        self._decoder = FrameDecoder(DEFAULT_MAX_FRAME_SIZE)
        self._ids = itertools.count(1)
        self._waiting: dict[int, trio.MemorySendChannel[Reply | ErrorReply]] = {}
        self._subs: dict[str, Subscription] = {}
        self._watch: TopicWatch | None = None
        self._write_lock = trio.Lock()
        self._closed: HostdError | None = None
        self.welcome: Welcome | None = None
        self._welcome_event = trio.Event()
        self._reader_done = trio.Event()

    # --- plumbing -------------------------------------------------------------------------

    async def _write(self, msg: Any) -> None:
        if self._closed is not None:
            raise self._closed
        frame = encode_request(self._codec, msg)
        async with self._write_lock:
            try:
                await self._stream.send_all(frame)
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                raise ConnectionBroken(f"connection to hostd lost: {exc}") from None

    async def _reader(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        task_status.started()
        # Cancelled (the client's own block ended) or our stream closed: our close, not the
        # daemon's; a subscription or watch then ends quietly instead of blaming hostd.
        error: HostdError = ConnectionClosed("the client closed the connection")
        try:
            while True:
                try:
                    data = await self._stream.receive_some(65536)
                except trio.ClosedResourceError:
                    break
                except trio.BrokenResourceError:
                    error = ConnectionBroken("hostd closed the connection")
                    break
                if not data:
                    error = ConnectionBroken("hostd closed the connection")
                    break
                for body in self._decoder.feed(data):
                    self._dispatch(self._codec.decode(body))
        except ProtocolError as exc:
            error = exc
        finally:
            self._fail_all(error)
            self._reader_done.set()

    def _dispatch(self, msg: Any) -> None:
        if isinstance(msg, (Reply, ErrorReply)):
            if msg.id is None:
                # A connection-level error (framing, handshake, access denied): fatal.
                assert isinstance(msg, ErrorReply)
                self._fail_all(error_from_code(msg.code, msg.message, msg.details))
                return
            waiter = self._waiting.pop(msg.id, None)
            if waiter is not None:
                waiter.send_nowait(msg)
            return
        if isinstance(msg, Welcome):
            self.welcome = msg
            self._welcome_event.set()
            return
        if isinstance(msg, TopicsChanged):
            if self._watch is not None:  # else a late change after unwatching: nobody reads it
                self._watch._push(msg)
            return
        sub = self._subs.get(msg.topic_id)
        if sub is not None:
            sub._send.send_nowait(msg)

    def _fail_all(self, error: HostdError) -> None:
        if self._closed is None:
            self._closed = error
        for waiter in self._waiting.values():
            waiter.close()
        self._waiting.clear()
        for sub in self._subs.values():
            sub._send.close()
        if self._watch is not None:
            self._watch._end()
        self._welcome_event.set()

    async def _hello(self, client_name: str) -> None:
        try:
            await self._write(Hello(protocol_version=PROTOCOL_VERSION, client=client_name))
        except ConnectionBroken:
            # The daemon may have refused us before reading (access denied): its reason is
            # more useful than our broken pipe.
            with trio.move_on_after(5):
                await self._welcome_event.wait()
            raise self._closed or HandshakeError("hostd closed the connection") from None
        await self._welcome_event.wait()
        if self.welcome is None:
            raise self._closed or HandshakeError("no welcome from hostd")

    async def _request(self, msg: Any) -> Any:
        """Send a request (its id is assigned here) and return the reply's result."""
        import msgspec

        rid = next(self._ids)
        msg = msgspec.structs.replace(msg, id=rid)
        send, recv = trio.open_memory_channel[Reply | ErrorReply](1)
        self._waiting[rid] = send
        try:
            await self._write(msg)
            try:
                reply = await recv.receive()
            except trio.EndOfChannel:
                raise self._closed or ConnectionClosed("connection closed") from None
        finally:
            self._waiting.pop(rid, None)
        if isinstance(reply, ErrorReply):
            raise error_from_code(reply.code, reply.message, reply.details)
        return reply.result

    async def wait_closed(self) -> HostdError:
        """Wait until the connection has ended (the daemon went away, or this side closed
        it) and return why: `ConnectionBroken` when the daemon closed it or vanished,
        `ConnectionClosed` when this client closed it."""
        await self._reader_done.wait()
        assert self._closed is not None
        return self._closed

    async def aclose(self) -> None:
        self._fail_all(ConnectionClosed("the client closed the connection"))
        await trio.aclose_forcefully(self._stream)

    # --- requests -------------------------------------------------------------------------

    async def create_topic(
        self,
        *,
        title: str = "",
        driver: str = "",
        model: str = "",
        assistant: str = "",
        working_dir: str = "",
        options: dict[str, Any] | None = None,
    ) -> TopicInfo:
        r = await self._request(
            CreateTopic(
                id=0,
                title=title,
                driver=driver,
                model=model,
                assistant=assistant,
                # Relative to this client's cwd (the daemon's cwd means nothing to the user).
                working_dir=_absolute(working_dir),
                options=options or {},
            )
        )
        assert isinstance(r, TopicResult)
        return r.topic

    async def list_topics(self) -> list[TopicInfo]:
        """Every topic (the daemon answers in bounded pages; this follows them)."""
        topics: list[TopicInfo] = []
        after = ""
        while True:
            r = await self._request(ListTopics(id=0, after=after))
            assert isinstance(r, TopicListResult)
            topics.extend(r.topics)
            if not r.has_more or not r.topics:
                return topics
            after = r.topics[-1].id

    async def get_topic(self, topic_id: str) -> TopicInfo:
        r = await self._request(GetTopic(id=0, topic_id=topic_id))
        assert isinstance(r, TopicResult)
        return r.topic

    async def rename_topic(self, topic_id: str, title: str) -> TopicInfo:
        r = await self._request(RenameTopic(id=0, topic_id=topic_id, title=title))
        assert isinstance(r, TopicResult)
        return r.topic

    async def delete_topic(self, topic_id: str) -> None:
        await self._request(DeleteTopic(id=0, topic_id=topic_id))

    async def send(
        self,
        topic_id: str,
        text: str,
        intent: SendIntent = "auto",
        *,
        client_msg_id: str = "",
        options: dict[str, Any] | None = None,
        history: list[HistoryMessage] | None = None,
        also: Sequence[AnswerTarget] = (),
        attachments: Sequence[Attachment] = (),
    ) -> SendResult:
        """Send a user message. `also`: more answerers (assistants or driver/model pairs),
        each answering in its own row at the same time (a multi-answer turn; pick the one
        the conversation continues from with `choose_answer`). `attachments`: images sent
        with the text (protocol 1.5)."""
        r = await self._request(
            SendMessage(
                id=0,
                topic_id=topic_id,
                text=text,
                intent=intent,
                client_msg_id=client_msg_id,
                options=options or {},
                history=history or [],
                also=list(also),
                attachments=list(attachments),
            )
        )
        assert isinstance(r, SendResult)
        return r

    async def continue_turn(self, topic_id: str) -> SendResult:
        """Continue the topic's last turn, which failed or was stopped, from its resume data."""
        r = await self._request(ContinueTurn(id=0, topic_id=topic_id))
        assert isinstance(r, SendResult)
        return r

    async def usage(self, topic_id: str = "") -> UsageTotals:
        """Token/cost totals per topic (and per turn of `topic_id`), as stored per turn."""
        r = await self._request(GetUsage(id=0, topic_id=topic_id))
        assert isinstance(r, UsageTotals)
        return r

    async def stop(self, topic_id: str, *, row_id: str = "") -> None:
        """Stop the topic's running turn, or only `row_id`: one answer of a multi-answer
        turn (the others go on; protocol 1.2, see docs/protocol.md)."""
        await self._request(Stop(id=0, topic_id=topic_id, row_id=row_id))

    async def answer_approval(
        self,
        topic_id: str,
        approval_id: str,
        allow: bool,
        reason: str = "",
        *,
        option_id: str = "",
    ) -> None:
        """Answer an approval; `option_id` picks one of its `options` (kind agreeing with
        `allow`)."""
        await self._request(
            AnswerApproval(
                id=0,
                topic_id=topic_id,
                approval_id=approval_id,
                allow=allow,
                reason=reason,
                option_id=option_id,
            )
        )

    async def edit_queued(self, topic_id: str, row_id: str, text: str) -> None:
        await self._request(EditQueued(id=0, topic_id=topic_id, row_id=row_id, text=text))

    async def discard_queued(self, topic_id: str, row_id: str) -> None:
        await self._request(DiscardQueued(id=0, topic_id=topic_id, row_id=row_id))

    async def send_now(self, topic_id: str, row_id: str) -> None:
        await self._request(SendNow(id=0, topic_id=topic_id, row_id=row_id))

    async def prewarm(self, topic_id: str) -> None:
        await self._request(PrewarmTopic(id=0, topic_id=topic_id))

    async def history(
        self, topic_id: str, *, before_position: int | None = None, limit: int = 100
    ) -> HistoryResult:
        r = await self._request(
            History(id=0, topic_id=topic_id, before_position=before_position, limit=limit)
        )
        assert isinstance(r, HistoryResult)
        return r

    async def status(self) -> StatusResult:
        r = await self._request(Status(id=0))
        assert isinstance(r, StatusResult)
        return r

    async def list_drivers(self) -> list[DriverInfo]:
        r = await self._request(ListDrivers(id=0))
        assert isinstance(r, DriverListResult)
        return r.drivers

    async def list_assistants(self, profile: str = "") -> list[AssistantInfo]:
        """The configured assistants (protocol 1.3; an older daemon: `UnknownRequest`)."""
        r = await self._request(ListAssistants(id=0, profile=profile))
        assert isinstance(r, AssistantListResult)
        return r.assistants

    async def ping(self) -> Pong:
        r = await self._request(Ping(id=0))
        assert isinstance(r, Pong)
        return r

    async def shutdown(self, *, wait: bool = True) -> None:
        """Ask the daemon to stop. With `wait`, return once it closed this connection: by
        then its turns are stopped, the store flushed and the socket removed."""
        await self._request(Shutdown(id=0))
        if wait:
            await self._reader_done.wait()

    @asynccontextmanager
    async def watch_topics(self) -> AsyncIterator[TopicWatch]:
        """Watch the topic list for the duration of the block (one watch per connection).

        `watch.topics()` is the whole list at once (paged for you); iterating the watch
        yields each later create, rename or delete by any window (`TopicsChanged`), applied
        to `topics()` first. The iteration ends when the block exits or the client closes;
        a lost connection raises its error.
        """
        if self._watch is not None:
            raise HostdError("this connection already watches the topic list")
        watch = TopicWatch(
            lambda: None if isinstance(self._closed, ConnectionClosed) else self._closed
        )
        # Registered before the request, so changes right behind the reply are kept.
        self._watch = watch
        try:
            first = await self._request(WatchTopics(id=0))
            assert isinstance(first, TopicListResult)
            topics = list(first.topics)
            page = first
            while page.has_more and page.topics:
                page = await self._request(ListTopics(id=0, after=topics[-1].id))
                assert isinstance(page, TopicListResult)
                topics.extend(page.topics)
            watch._reset(topics)
            yield watch
        finally:
            self._watch = None
            watch._end()
            if self._closed is None:
                with trio.CancelScope(shield=True), trio.move_on_after(5):
                    try:
                        await self._request(UnwatchTopics(id=0))
                    except HostdError:
                        pass

    @asynccontextmanager
    async def attach(
        self,
        topic_id: str,
        *,
        since: int | None = None,
        max_rows: int = 500,
        whole_rows: bool = True,
    ) -> AsyncIterator[Subscription]:
        """Subscribe to a topic for the duration of the block (one subscription per topic).

        With `since`, the host replays what was missed (the first item is then not a
        `Snapshot`; `transcript` stays None unless a resync forces a snapshot).
        With `whole_rows` (the default), a row a snapshot delivers cut (`meta["truncated"]`,
        bigger than one reply) is read whole (`read-row`) before the snapshot is yielded.
        """
        if topic_id in self._subs:
            raise HostdError(f"already attached to topic {topic_id} on this connection")
        sub = Subscription(self, topic_id, max_rows, whole_rows=whole_rows)
        # Registered before the request, so events right behind the reply are routed.
        self._subs[topic_id] = sub
        try:
            if since is not None:
                sub.seq = since
            await sub._attach(since)
            yield sub
        finally:
            sub.closed = True
            self._subs.pop(topic_id, None)
            if self._closed is None:
                with trio.CancelScope(shield=True), trio.move_on_after(5):
                    try:
                        await self._request(Detach(id=0, topic_id=topic_id))
                    except HostdError:
                        pass


async def _connect_socket(paths: Paths) -> trio.SocketStream:
    """Connect to the daemon's socket (`sync_wire.connect_attempts`, the one connect loop).
    Not `trio.open_unix_socket`: it takes the `EAGAIN` of a full listen backlog for "in
    progress" and returns a socket that was never connected."""
    attempts = connect_attempts(paths, trio.current_time)
    while True:
        try:
            delay = next(attempts)
        except StopIteration as done:
            sock: socket.socket = done.value
            return trio.SocketStream(trio.socket.from_stdlib_socket(sock))
        # Nothing to wait for but time: the daemon is another process.
        await trio.sleep(delay)


async def _autostart(paths: Paths) -> trio.SocketStream:
    """Start the daemon and connect: `sync_wire.autostart_connect` (the one autostart), in a
    worker thread."""
    sock = await trio.to_thread.run_sync(autostart_connect, paths)
    sock.setblocking(False)
    return trio.SocketStream(trio.socket.from_stdlib_socket(sock))


@asynccontextmanager
async def open_client(
    paths: Paths | None = None,
    *,
    home: str | os.PathLike[str] | None = None,
    client_name: str = "hostd-client",
    encoding: Encoding = "msgpack",
    autostart: bool = False,
) -> AsyncIterator[Client]:
    """Connect (starting the daemon first if `autostart` and it is not running), handshake,
    and close the connection when the block ends."""
    paths = paths or Paths.from_env(home)
    try:
        stream = await _connect_socket(paths)
    except (FileNotFoundError, ConnectionRefusedError) as exc:
        if not autostart:
            raise _not_running(paths, unreachable(exc)) from None
        stream = await _autostart(paths)
    client = Client(stream, encoding=encoding)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(client._reader)
            await client._hello(client_name)
            try:
                yield client
            finally:
                nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        # The nursery only holds our reader, which never raises: the one exception is the
        # caller's (or the handshake's). Hand it back as itself, not wrapped in a group.
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise
    finally:
        await client.aclose()


__all__ = [
    "Client",
    "DaemonNotRunning",
    "Subscription",
    "open_client",
    "start_daemon",
]


def _absolute(path: str) -> str:
    """A working directory relative to this process's cwd, made absolute ("" stays "")."""
    return os.path.abspath(path) if path else ""
