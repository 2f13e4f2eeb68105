"""The daemon: wires paths -> store -> drivers -> supervisor -> topics -> socket, and serves
every client request.

`serve_daemon` is the whole daemon as one trio service. Start-up order matters:

1. the single-instance lock (a second daemon on the same paths refuses here);
2. the store, reconciled before anyone is served (no row stays `pending` after a crash);
3. the store writer and the supervisor;
4. topics with queued rows are loaded and their queues resumed;
5. only then the socket is bound and `started()` is called.

Shutdown (the `shutdown` request, SIGTERM/SIGINT in `hostd serve`, or cancelling the
caller) is graceful when requested: stop accepting, stop every running turn (bounded wait for
their ends), flush the store, let connections deliver their last frames, close drivers,
remove the socket, release the lock.

Topics are loaded lazily (first attach/send/...) and stay loaded: a `TopicHost` holds the
runtime, the replay buffer and the subscriptions. Loading is single-flight per topic.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import trio

from hostd import __version__
from hostd.core.payload_bounds import (
    bound_topic,
    check_send,
    check_text,
    fit_rows,
    fit_topics,
    row_piece,
)
from hostd.core.runtime_outbox import NoticeLevel
from hostd.core.sandbox_policy import driver_options, policy_of
from hostd.core.schedules import ScheduleBook
from hostd.core.workspaces import workspace_of
from hostd.shell.connection import (
    DEFAULT_MAX_PARTIAL_BYTES,
    DEFAULT_MAX_QUEUE_BYTES,
    FRAME_TIMEOUT,
    HELLO_TIMEOUT,
    Connection,
    PartialFrames,
)
from hostd.shell.drivers.registry import DriverRegistry
from hostd.shell.fanout import DEFAULT_REPLAY_SIZE, encoded_size
from hostd.shell.paths import Paths, check_database_files
from hostd.shell.schedule_service import (
    DaemonScheduleTarget,
    WriterScheduleStore,
    schedule_handlers,
)
from hostd.shell.scheduler import Scheduler
from hostd.shell.server import (
    DaemonAlreadyRunning,
    DaemonLock,
    PeerUidLookup,
    bind_unix_listener,
    default_max_connections,
    default_peer_uid,
    serve_unix,
)
from hostd.shell.store import store as st
from hostd.shell.topic_host import TopicHost, new_id
from hostd.shell.topic_ops import topic_op_handlers
from hostd.shell.turns import TurnServices, continue_text, ensure_workdir
from hostd_protocol.client_messages import (
    AnswerApproval,
    ApprovalInfo,
    Attach,
    ContinueTurn,
    CreateTopic,
    DeleteTopic,
    Detach,
    DiscardQueued,
    DriverListResult,
    EditQueued,
    Empty,
    GetTopic,
    GetUsage,
    History,
    HistoryResult,
    ListDrivers,
    ListTopics,
    MessageRow,
    Ping,
    Pong,
    PrewarmTopic,
    ReadRow,
    RenameTopic,
    Result,
    ScheduleInfo,
    SendMessage,
    SendNow,
    Shutdown,
    Status,
    StatusResult,
    Stop,
    TopicDeleted,
    TopicEvent,
    TopicInfo,
    TopicListChange,
    TopicListResult,
    TopicResult,
    TopicsChanged,
    TurnUsage,
    UnwatchTopics,
    UsageTotals,
    WatchTopics,
)
from hostd_protocol.errors import (
    ConfigError,
    HostdError,
    InvalidArgument,
    NotFound,
    TopicClosed,
    UnknownRequest,
    UnknownTopic,
    UnresolvedRole,
)
from hostd_protocol.framing import DEFAULT_MAX_FRAME_SIZE
from hostd_protocol.limits import MAX_REPLY_BYTES, MAX_SEND_BYTES

if TYPE_CHECKING:
    from hostd.core.topic_runtime import TopicRuntime
    from hostd.shell.drivers.supervisor import Supervisor

log = logging.getLogger(__name__)

#: Added to a topic's stored last seq when it is loaded in a new daemon process. Events of the
#: last flush interval before a crash may not be stored, but windows may have seen their seqs;
#: new events must never reuse them. 100,000 is far above what 100 ms of streaming produces.
LOAD_SEQ_GAP = 100_000

RuntimeFactory = Callable[[TopicInfo, list[MessageRow], list[ApprovalInfo], int], "TopicRuntime"]
SupervisorFactory = Callable[[DriverRegistry], "Supervisor"]


def default_runtime_factory(
    info: TopicInfo, rows: list[MessageRow], approvals: list[ApprovalInfo], last_seq: int
) -> TopicRuntime:
    from hostd.core.topic_runtime import TopicRuntime

    return TopicRuntime(info, rows, approvals, last_seq, new_id=new_id, wall=time.time)


def default_supervisor_factory(
    registry: DriverRegistry,
    *,
    workdir_root: str | None = None,
    sandbox_hidden: tuple[str, ...] = (),
    bridge_parent: str | None = None,
) -> Supervisor:
    from hostd.shell.drivers.sandbox import Sandbox
    from hostd.shell.drivers.supervisor import Supervisor

    sandbox = Sandbox(sandbox_hidden, bridge_parent=bridge_parent)
    return Supervisor(registry, workdir_root=workdir_root, sandbox=sandbox)


@dataclass(frozen=True)
class DaemonConfig:
    #: Store flush interval: the bound on streamed text lost to kill -9 (seconds).
    flush_interval: float = st.DEFAULT_FLUSH_INTERVAL
    replay_size: int = DEFAULT_REPLAY_SIZE
    max_queue_bytes: int = DEFAULT_MAX_QUEUE_BYTES
    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE
    #: Driver of topics created without one ("" = the client must name one).
    default_driver: str = ""
    #: How long a graceful shutdown waits for stopped turns to end.
    shutdown_grace: float = 5.0
    #: Connections served at once; more are refused with `too_many_connections`
    #: (0: derived from the descriptor limit, `server.default_max_connections`).
    max_connections: int = 0
    #: A new connection must say hello within this; a frame once started must complete
    #: within `frame_timeout` (seconds).
    hello_timeout: float = HELLO_TIMEOUT
    frame_timeout: float = FRAME_TIMEOUT
    #: Bytes of incomplete frames all connections together may hold.
    max_partial_bytes: int = DEFAULT_MAX_PARTIAL_BYTES


#: Longest title taken from a first message.
TITLE_CHARS = 60


def title_from(text: str) -> str:
    """A title for an untitled topic from its first message: the first non-empty line, one
    space between words, cut at `TITLE_CHARS`. None from a command (`/compact`, ...)."""
    line = next((ln for ln in text.splitlines() if ln.strip()), "")
    line = " ".join(line.split())
    if not line or line.startswith("/"):
        return ""
    return line if len(line) <= TITLE_CHARS else line[: TITLE_CHARS - 1].rstrip() + "…"


class Daemon:
    """Topics, connections and request handling. Built and run by `serve_daemon`."""

    def __init__(
        self,
        paths: Paths,
        *,
        config: DaemonConfig,
        reader: st.AsyncStore,
        writer: st.StoreWriter,
        registry: DriverRegistry,
        supervisor: Supervisor,
        runtime_factory: RuntimeFactory,
        records: list[st.TopicRecord],
        schedules: list[ScheduleInfo] | None = None,
    ) -> None:
        self.paths = paths
        self.config = config
        self.reader = reader
        self.writer = writer
        self.registry = registry
        self.supervisor = supervisor
        self._runtime_factory = runtime_factory
        self._records: dict[str, st.TopicRecord] = {r.info.id: r for r in records}
        self.hosts: dict[str, TopicHost] = {}
        self._loading: dict[str, trio.Event] = {}
        self.connections: set[Connection] = set()
        #: Connections that sent `WatchTopics` (a dict keeps their order).
        self._topic_watchers: dict[Connection, None] = {}
        self._conn_counter = 0
        self._connections_changed = trio.Event()
        self._partial_frames = PartialFrames(config.max_partial_bytes)
        self._hosts_nursery: trio.Nursery | None = None
        self._shutdown_requested = trio.Event()
        self._started_at = time.monotonic()
        # What every topic's turns share: configuration (read once per change), observers,
        # usage, client transcripts, the permission check (hostd/shell/turns.py). Each turn
        # is a machine in hostd/core/turn.py that its topic's host executes.
        self.turns = TurnServices(
            paths.config_dir, paths.data_dir / "workspaces", supervisor, writer
        )
        # Scheduled prompts (hostd/shell/schedule_service.py); due times before now were missed.
        self.scheduler = Scheduler(
            ScheduleBook(schedules or [], booted_at=time.time()),
            DaemonScheduleTarget(self),
            WriterScheduleStore(writer),
        )
        self._handlers: dict[type, Callable[[Connection, Any], Any]] = {
            CreateTopic: self._create_topic,
            ListTopics: self._list_topics,
            GetTopic: self._get_topic,
            RenameTopic: self._rename_topic,
            DeleteTopic: self._delete_topic,
            Attach: self._attach,
            Detach: self._detach,
            SendMessage: self._send,
            Stop: self._stop,
            AnswerApproval: self._answer_approval,
            EditQueued: self._edit_queued,
            DiscardQueued: self._discard_queued,
            SendNow: self._send_now,
            ContinueTurn: self._continue,
            History: self._history,
            ReadRow: self._read_row,
            PrewarmTopic: self._prewarm,
            Status: self._status,
            ListDrivers: self._list_drivers,
            Ping: self._ping,
            Shutdown: self._shutdown,
            GetUsage: self._usage,
            **schedule_handlers(self, self.scheduler),
            WatchTopics: self._watch_topics,
            UnwatchTopics: self._unwatch_topics,
            **topic_op_handlers(self),
        }

    # --- lifetime -------------------------------------------------------------------------

    async def run_hosts(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The nursery every `TopicHost` lives in."""
        # Standalone workspaces a crash left behind go before any turn can start.
        await self.turns.standalone.sweep()
        async with trio.open_nursery() as nursery:
            self._hosts_nursery = nursery
            task_status.started()
            await trio.sleep_forever()

    def request_shutdown(self) -> None:
        self._shutdown_requested.set()

    async def wait_shutdown_requested(self) -> None:
        await self._shutdown_requested.wait()

    async def stop_turns(self, grace: float) -> None:
        """Stop every running turn and wait (up to `grace`) for their ends. A turn that
        chains into another as it ends (a `send_now` pick, a message queued meanwhile) has
        that one stopped too, so a graceful stop leaves no row `pending`."""
        with trio.move_on_after(grace) as scope:
            while active := [h for h in self.hosts.values() if h.active and not h.closed]:
                turns = [h.runtime.active_turn_id for h in active]
                for host in active:
                    try:
                        await host.stop()  # also ends a turn still in its set-up or a hook
                    except HostdError as exc:
                        log.info("topic %s: stop at shutdown: %s", host.topic_id, exc)
                for host, turn in zip(active, turns, strict=True):
                    await host.wait_turn_over(turn)
        if scope.cancelled_caught:
            log.warning("shutdown: some turns did not end within %.1f s", grace)

    async def close_connections(self, timeout: float = 2.0) -> None:
        for conn in list(self.connections):
            conn.close_after_flush()
        with trio.move_on_after(timeout):
            while self.connections:
                self._connections_changed = trio.Event()
                await self._connections_changed.wait()

    def store_health_changed(self, error: HostdError | None) -> None:
        """The store's writes started failing (error) or work again (None): tell every
        loaded topic's windows with a `notice` (the log has it from the writer)."""
        level: NoticeLevel
        if error is not None:
            code, level = "store_error", "error"
            message = (
                f"hostd cannot save to its database: {error.message}. Answers keep streaming "
                "and are saved once it can; messages sent meanwhile are not confirmed"
            )
        else:
            code, level = "store_recovered", "info"
            message = "hostd can save to its database again; what it held is being written"
        now = trio.current_time()
        for host in list(self.hosts.values()):
            if not host.closed:
                host.apply(host.runtime.notice(code, message, level, now))

    async def close_hosts(self) -> None:
        for host in list(self.hosts.values()):
            await host.aclose()

    # --- connections ----------------------------------------------------------------------

    async def handle_connection(self, stream: trio.SocketStream, uid: int) -> None:
        self._conn_counter += 1
        conn = Connection(
            stream,
            self,
            connection_id=f"c{self._conn_counter}",
            max_frame_size=self.config.max_frame_size,
            max_queue_bytes=self.config.max_queue_bytes,
            peer_uid=uid,
            hello_timeout=self.config.hello_timeout,
            frame_timeout=self.config.frame_timeout,
            partial_frames=self._partial_frames,
        )
        self.connections.add(conn)
        try:
            await conn.run()
        except Exception:
            # A bug in serving one connection closes that connection only.
            log.exception("%r failed", conn)

    def connection_closed(self, conn: Connection) -> None:
        self.connections.discard(conn)
        self._topic_watchers.pop(conn, None)
        self._connections_changed.set()

    async def handle_request(self, conn: Connection, msg: Any) -> Result | None:
        handler = self._handlers.get(type(msg))
        if handler is None:
            raise UnknownRequest(f"request {type(msg).__name__} is not served by this daemon")
        result: Result | None = await handler(conn, msg)
        return result

    # --- topics ---------------------------------------------------------------------------

    def _topic_info(self, topic_id: str) -> TopicInfo:
        host = self.hosts.get(topic_id)
        if host is not None:
            return host.topic_info()
        record = self._records.get(topic_id)
        if record is None:
            raise UnknownTopic(f"no topic with id {topic_id!r}", details={"topic_id": topic_id})
        return record.info

    async def host(self, topic_id: str) -> TopicHost:
        """The live host of a topic, loading it (once) if needed."""
        while True:
            host = self.hosts.get(topic_id)
            if host is not None:
                return host
            loading = self._loading.get(topic_id)
            if loading is None:
                break
            await loading.wait()
        record = self._records.get(topic_id)
        if record is None:
            raise UnknownTopic(f"no topic with id {topic_id!r}", details={"topic_id": topic_id})
        done = self._loading[topic_id] = trio.Event()
        try:
            rows = await self.reader.run(self.reader.sync.load_rows, topic_id)
            approvals = await self.reader.run(self.reader.sync.load_approvals, topic_id)
            last_seq = record.last_seq + LOAD_SEQ_GAP
            # On disk before any event of this life goes out: if this daemon is killed before
            # its events' seqs are flushed, the next one must still start above them.
            await self.writer.wait_committed(
                self.writer.put(st.PutSeq(topic_id, last_seq), durable=True)
            )
            host = await self._start_host(
                record.info, rows, approvals, last_seq, record.resume_token
            )
        finally:
            del self._loading[topic_id]
            done.set()
        # The runtime contract: once after constructing from stored rows, so rows a previous
        # daemon left queued run again.
        try:
            await host.resume_queue()
        except HostdError as exc:
            log.warning("topic %s: resuming its queue failed: %s", topic_id, exc)
        return host

    async def _start_host(
        self,
        info: TopicInfo,
        rows: list[MessageRow],
        approvals: list[ApprovalInfo],
        last_seq: int,
        resume_token: str | None,
    ) -> TopicHost:
        runtime = self._runtime_factory(info, rows, approvals, last_seq)
        host = TopicHost(
            info,
            runtime,
            writer=self.writer,
            supervisor=self.supervisor,
            resume_token=resume_token,
            replay_size=self.config.replay_size,
            services=self.turns,
            observe=self._observe,
        )
        assert self._hosts_nursery is not None
        await self._hosts_nursery.start(self._run_host, host)
        self.hosts[info.id] = host
        return host

    def _observe(self, topic_id: str, event: TopicEvent) -> None:
        self.turns.observe(topic_id, event)
        self.scheduler.observe(topic_id, event)

    async def _run_host(
        self, host: TopicHost, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """A bug in one topic must not take the daemon down: log it and close that topic."""
        try:
            await host.run(task_status=task_status)
        except Exception:
            log.exception("topic %s failed; it is closed until the daemon restarts", host.topic_id)
            host.closed = True

    async def resume_queues(self) -> None:
        """Restart queued rows left by the previous daemon (before clients are served)."""
        topic_ids = await self.reader.run(self.reader.sync.topics_with_rows_in, ("queued",))
        for tid in topic_ids:
            if tid in self._records:
                await self.host(tid)  # loading resumes the queue

    # --- request handlers -----------------------------------------------------------------

    async def _create_topic(self, conn: Connection, msg: CreateTopic) -> Result:
        if msg.working_dir and not os.path.isabs(msg.working_dir):
            # It would resolve against the daemon's cwd, which is not the user's: the client
            # resolves it (hostd.client does) or names an absolute path.
            raise InvalidArgument(
                f"working_dir must be an absolute path, not {msg.working_dir!r} (resolve it "
                "against your current directory first)",
                details={"working_dir": msg.working_dir},
            )
        return TopicResult(topic=await self.create_topic(msg))

    async def create_topic(self, msg: CreateTopic) -> TopicInfo:
        """Create and load a topic (a window's `create-topic`, or a schedule's run)."""
        if msg.assistant:
            await self.turns.config.load(msg.assistant)  # unknown or broken: ConfigError
        # A topic with an assistant gets its driver from it (or its role) unless it names one.
        driver = msg.driver or ("" if msg.assistant else self.config.default_driver)
        driver = await self._ready_driver(msg, driver)
        now = time.time()
        info = TopicInfo(
            id=new_id("tp"),
            title=msg.title,
            assistant=msg.assistant,
            driver=driver,
            model=msg.model,
            working_dir=msg.working_dir,
            options=msg.options,
            created_at=now,
            updated_at=now,
        )
        gen = self.writer.put(st.PutTopic(info), durable=True)
        await self.writer.wait_committed(gen)
        host = await self.add_topic(info, [])
        return host.topic_info()

    async def add_topic(self, info: TopicInfo, rows: list[MessageRow]) -> TopicHost:
        """Serve a topic just stored (created, or forked with its copied rows)."""
        self._records[info.id] = st.TopicRecord(info, 0, None)
        host = await self._start_host(info, rows, [], 0, None)
        self._topics_changed("created", info.id, host.topic_info())
        return host

    async def _ready_driver(self, msg: CreateTopic, driver: str) -> str:
        """The driver to store for a new topic, refusing now (not at the first send) when the
        topic could not answer: unknown or unavailable driver, no credential, unresolvable
        role. A topic that names nothing gets the `default` role of roles.toml when there is
        one (stored as "" so the role keeps deciding), else the first ready built-in default
        (`DEFAULT_DRIVER_PREFERENCE`)."""
        environ_of = self.supervisor.driver_environ
        # The sandbox and workspace policies are the host's options, not the driver's:
        # checked here (a bad one is refused at creation), kept out of the driver's check.
        policy_of(msg.options)
        workspace_of(msg.options)
        options = driver_options(msg.options)
        if driver:
            self.registry.require_ready(driver, environ_of).check_options(options)
            return driver
        try:
            resolved = await self.turns.resolve_driver(msg.assistant, msg.model)
        except UnresolvedRole:
            if msg.assistant:
                raise
            chosen = self.registry.pick_default(environ_of)
            self.registry.get(chosen).check_options(options)
            return chosen
        self.registry.require_ready(resolved, environ_of).check_options(options)
        return ""

    async def _list_topics(self, conn: Connection, msg: ListTopics) -> Result:
        ids = list(self._records)
        if msg.after:
            try:
                ids = ids[ids.index(msg.after) + 1 :]
            except ValueError:
                raise UnknownTopic(
                    f"no topic with id {msg.after!r} to list after",
                    details={"topic_id": msg.after},
                ) from None
        topics, has_more = fit_topics(
            [self._topic_info(tid) for tid in ids], MAX_REPLY_BYTES, encoded_size(conn.encoding)
        )
        return TopicListResult(topics=topics, has_more=has_more)

    async def _get_topic(self, conn: Connection, msg: GetTopic) -> Result:
        return TopicResult(topic=self._topic_info(msg.topic_id))

    async def _rename_topic(self, conn: Connection, msg: RenameTopic) -> Result:
        host = await self.host(msg.topic_id)
        await host.rename(msg.title)
        self._topics_changed("changed", msg.topic_id, host.topic_info())
        return TopicResult(topic=host.topic_info())

    async def _delete_topic(self, conn: Connection, msg: DeleteTopic) -> Result:
        host = await self.host(msg.topic_id)
        self._records.pop(msg.topic_id, None)
        self.hosts.pop(msg.topic_id, None)
        await host.delete()
        await self.turns.standalone.forget(msg.topic_id)  # its standalone workspace, if any
        self.scheduler.observe(msg.topic_id, TopicDeleted(topic_id=msg.topic_id, seq=0))
        self._topics_changed("deleted", msg.topic_id, None)
        return Empty()

    async def _watch_topics(self, conn: Connection, msg: WatchTopics) -> Result:
        # The first page and the registration in one synchronous step (`_list_topics` does not
        # await): no change can fall between. Later pages: `ListTopics(after=...)`.
        result = await self._list_topics(conn, ListTopics(id=msg.id))
        self._topic_watchers[conn] = None
        return result

    async def _unwatch_topics(self, conn: Connection, msg: UnwatchTopics) -> Result:
        self._topic_watchers.pop(conn, None)
        return Empty()

    def _topics_changed(
        self, change: TopicListChange, topic_id: str, topic: TopicInfo | None
    ) -> None:
        """Tell every watching connection (the requester's reply follows its own event)."""
        event = TopicsChanged(change=change, topic_id=topic_id, topic=topic)
        for conn in list(self._topic_watchers):
            conn.send_message(event)

    async def _attach(self, conn: Connection, msg: Attach) -> Result | None:
        if msg.max_rows < 0:
            raise InvalidArgument("max_rows must be >= 0")
        host = await self.host(msg.topic_id)
        host.attach(conn, msg.id, msg.since, msg.max_rows)
        return None

    async def _detach(self, conn: Connection, msg: Detach) -> Result:
        self._topic_info(msg.topic_id)  # unknown topic -> typed error
        host = self.hosts.get(msg.topic_id)
        if host is not None:
            host.detach(conn)
        return Empty()

    async def _send(self, conn: Connection, msg: SendMessage) -> Result:
        check_send(msg.text, msg.history)  # refused: nothing is stored
        if msg.also:
            # Protocol 1.1 has the fields; the daemon side lands next (issue 20, lanes).
            raise InvalidArgument("several answers to one message (also) are not supported yet")
        host = await self.host(msg.topic_id)
        self.turns.check(conn.peer_uid, host.topic_info())  # refused: nothing is stored
        client_msg_id = msg.client_msg_id
        if msg.history:
            # The transcript waits for this message's turn, found again by its key (a fresh
            # unique key when the client gave none: it dedups nothing).
            client_msg_id = client_msg_id or new_id("h")
            self.turns.remember_history(msg.topic_id, client_msg_id, msg.history)
        try:
            result = await host.send(
                msg.text, msg.intent, client_msg_id=client_msg_id, options=msg.options or None
            )
        except BaseException:
            # Refused (busy, store error, ...): what it brought along is released now, not
            # kept until evicted (40 refused sends once held hundreds of MB).
            if msg.history:
                self.turns.forget_history(msg.topic_id, client_msg_id)
            raise
        title = title_from(msg.text)
        if title and not host.topic_info().title:
            # An untitled topic is named after its first message (every window sees it).
            await host.rename(title)
            self._topics_changed("changed", msg.topic_id, host.topic_info())
        return result

    async def _stop(self, conn: Connection, msg: Stop) -> Result:
        host = await self.host(msg.topic_id)
        await host.stop()
        return Empty()

    async def _answer_approval(self, conn: Connection, msg: AnswerApproval) -> Result:
        host = await self.host(msg.topic_id)
        await host.answer_approval(
            msg.approval_id,
            msg.allow,
            by=conn.client_name or conn.id,
            reason=msg.reason,
            option_id=msg.option_id,
        )
        return Empty()

    async def _edit_queued(self, conn: Connection, msg: EditQueued) -> Result:
        check_text("the message", msg.text, MAX_SEND_BYTES)
        host = await self.host(msg.topic_id)
        await host.edit_queued(msg.row_id, msg.text)
        return Empty()

    async def _discard_queued(self, conn: Connection, msg: DiscardQueued) -> Result:
        host = await self.host(msg.topic_id)
        await host.discard_queued(msg.row_id)
        return Empty()

    async def _send_now(self, conn: Connection, msg: SendNow) -> Result:
        host = await self.host(msg.topic_id)
        await host.send_now(msg.row_id)
        return Empty()

    async def _continue(self, conn: Connection, msg: ContinueTurn) -> Result:
        host = await self.host(msg.topic_id)
        self.turns.check(conn.peer_uid, host.topic_info())
        await self.writer.wait_committed()  # the last turn's record may still be queued
        turns = await self.reader.run(self.reader.sync.load_turns, msg.topic_id)
        text = continue_text(turns, host.runtime.snapshot(max_rows=1_000).rows)
        return await host.send(text, "start")

    async def _history(self, conn: Connection, msg: History) -> Result:
        if msg.limit <= 0 or msg.limit > 10_000:
            raise InvalidArgument("limit must be between 1 and 10000")
        if msg.before_position is not None and not 0 <= msg.before_position <= 2**62:
            raise InvalidArgument("before_position must be between 0 and 2**62")
        self._topic_info(msg.topic_id)
        # Streamed content waits in the writer for up to one flush interval: flush first so
        # the page is as fresh as the live stream.
        await self.writer.wait_committed()
        rows, has_more = await self.reader.run(
            functools.partial(self.reader.sync.history_page, include_superseded=msg.all),
            msg.topic_id,
            msg.before_position,
            msg.limit,
            MAX_REPLY_BYTES,
        )
        fitted, dropped = fit_rows(rows, MAX_REPLY_BYTES, encoded_size(conn.encoding))
        return HistoryResult(rows=fitted, has_more=has_more or dropped)

    async def _read_row(self, conn: Connection, msg: ReadRow) -> Result:
        self._topic_info(msg.topic_id)
        if msg.part < 0 or msg.offset < 0:
            raise InvalidArgument("part and offset must be >= 0")
        await self.writer.wait_committed()
        row = await self.reader.run(self.reader.sync.load_row, msg.topic_id, msg.row_id)
        if row is None:
            raise NotFound(
                f"no row {msg.row_id!r} in topic {msg.topic_id}", details={"row_id": msg.row_id}
            )
        return row_piece(row, msg.part, msg.offset, MAX_REPLY_BYTES, encoded_size(conn.encoding))

    async def _prewarm(self, conn: Connection, msg: PrewarmTopic) -> Result:
        host = await self.host(msg.topic_id)
        if host.closed:
            raise TopicClosed(f"topic {msg.topic_id} is closed")
        assert self._hosts_nursery is not None
        self._hosts_nursery.start_soon(self._prewarm_task, host)
        return Empty()

    async def _prewarm_task(self, host: TopicHost) -> None:
        from hostd.shell.drivers.supervisor import SessionOptions

        info = host.info
        try:
            # The same options the session will open with, so the warm process matches.
            opts = await self.turns.session_options(info)
            workdir = await trio.to_thread.run_sync(ensure_workdir, opts.working_dir, info)
            opts = replace(opts, working_dir=workdir)
        except HostdError:
            opts = SessionOptions(
                driver=info.driver, model=info.model, working_dir=info.working_dir,
                options=info.options,
            )
        try:
            await self.supervisor.prewarm(opts, host._resume_token, topic_id=host.topic_id)
        except HostdError as exc:
            log.info("topic %s: prewarm failed: %s", host.topic_id, exc)

    async def _status(self, conn: Connection, msg: Status) -> Result:
        stats = self.supervisor.statistics()
        drivers_running, warm = stats.sessions, stats.warm
        enabled, nxt = self.scheduler.statistics()
        return StatusResult(
            schedules=enabled,
            next_schedule_id=nxt.id if nxt is not None else "",
            next_schedule_due=nxt.next_due if nxt is not None else None,
            pid=os.getpid(),
            version=__version__,
            uptime_s=time.monotonic() - self._started_at,
            topics=len(self._records),
            active_turns=sum(1 for h in self.hosts.values() if h.active),
            connections=len(self.connections),
            drivers_running=drivers_running,
            warm_drivers=warm,
            data_dir=str(self.paths.data_dir),
            socket_path=str(self.paths.socket_path),
        )

    async def _list_drivers(self, conn: Connection, msg: ListDrivers) -> Result:
        self.registry.rescan()  # a driver installed since the daemon started is listed too
        return DriverListResult(drivers=self.registry.infos(self.supervisor.driver_environ))

    async def _ping(self, conn: Connection, msg: Ping) -> Result:
        return Pong(time=time.time())

    async def _usage(self, conn: Connection, msg: GetUsage) -> Result:
        usage = self.turns.usage  # stored per turn, plus UsageUpdated events since start
        if not msg.topic_id:
            return UsageTotals(topics=usage.topics())
        self._topic_info(msg.topic_id)  # unknown topic -> typed error
        turns = [TurnUsage(turn_id=t, usage=u) for t, u in usage.turns_of(msg.topic_id).items()]
        return UsageTotals(topics={msg.topic_id: usage.topic_usage(msg.topic_id)}, turns=turns)

    async def _shutdown(self, conn: Connection, msg: Shutdown) -> Result:
        log.info("shutdown requested by %r", conn)
        self.request_shutdown()
        return Empty()


async def serve_daemon(
    paths: Paths,
    *,
    config: DaemonConfig | None = None,
    registry: DriverRegistry | None = None,
    supervisor_factory: SupervisorFactory = default_supervisor_factory,
    runtime_factory: RuntimeFactory = default_runtime_factory,
    peer_uid: PeerUidLookup = default_peer_uid,
    task_status: trio.TaskStatus[Daemon] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run the daemon until a shutdown is requested (graceful) or the caller cancels."""
    config = config or DaemonConfig()
    paths.ensure()
    lock = DaemonLock(paths.lock_path)
    lock.acquire()
    socket_bound = False
    # The database has its own lock: two daemons with one data dir but different runtime
    # dirs (so different sockets and runtime locks) must not both write it.
    data_lock = DaemonLock(paths.data_lock_path)
    try:
        try:
            data_lock.acquire()
        except DaemonAlreadyRunning as exc:
            raise ConfigError(
                f"the data directory {str(paths.data_dir)!r} is in use by another hostd "
                f"(pid {exc.details.get('pid') or '?'}) with another runtime directory; stop "
                "it, or give this one its own HOSTD_HOME",
                details={"pid": exc.details.get("pid")},
            ) from None
        check_database_files(paths.db_path)
        store = st.Store(paths.db_path)
        try:
            # Reconcile before anything else touches the database (and before the reader
            # connection exists, so its start-up pragmas do not invalidate our statements).
            store.reconcile()
            # A topic stored before the size limits existed is shown cut, never breaking a
            # listing or an attach (`payload_bounds.bound_topic`).
            records = [
                dataclasses.replace(r, info=bound_topic(r.info)) for r in store.load_topics()
            ]
            schedules = store.load_schedules()
            stored_usage = store.load_usage()
            reader = st.AsyncStore(paths.db_path)
            try:
                writer = st.StoreWriter(store, flush_interval=config.flush_interval)
                registry = registry or DriverRegistry.discover()
                if supervisor_factory is default_supervisor_factory:
                    # Per-topic working directories live under the data dir, so HOSTD_HOME
                    # (and every test's temp home) holds them too.
                    supervisor = default_supervisor_factory(
                        registry,
                        workdir_root=str(paths.data_dir / "workdirs"),
                        # A confined driver sees neither the store nor the socket.
                        sandbox_hidden=(str(paths.data_dir), str(paths.runtime_dir)),
                        bridge_parent=str(paths.runtime_dir),
                    )
                else:
                    supervisor = supervisor_factory(registry)
                daemon = Daemon(
                    paths,
                    config=config,
                    reader=reader,
                    writer=writer,
                    registry=registry,
                    supervisor=supervisor,
                    runtime_factory=runtime_factory,
                    records=records,
                    schedules=schedules,
                )
                writer.on_health = daemon.store_health_changed
                daemon.turns.seed_usage(stored_usage)
                async with trio.open_nursery() as nursery:
                    await nursery.start(writer.serve)
                    await nursery.start(supervisor.serve)
                    await nursery.start(daemon.turns.serve)
                    await nursery.start(daemon.run_hosts)
                    await daemon.resume_queues()
                    # Runs start only now: every queue a previous daemon left is running again.
                    schedule_scope = trio.CancelScope()
                    await nursery.start(_serve_scheduled, daemon.scheduler, schedule_scope)
                    listener = await bind_unix_listener(paths.socket_path)
                    socket_bound = True
                    async with trio.open_nursery() as conn_nursery:
                        accept_scope = trio.CancelScope()
                        await conn_nursery.start(
                            _accept, listener, daemon, conn_nursery, peer_uid, accept_scope
                        )
                        log.info(
                            "hostd %s serving on %s (pid %d)",
                            __version__,
                            paths.socket_path,
                            os.getpid(),
                        )
                        task_status.started(daemon)
                        await daemon.wait_shutdown_requested()
                        log.info("shutting down")
                        accept_scope.cancel()
                        schedule_scope.cancel()  # no new runs while turns are stopped
                        _unlink(paths.socket_path)
                        socket_bound = False
                        await daemon.stop_turns(config.shutdown_grace)
                        await writer.wait_committed()
                        await daemon.close_connections()
                        conn_nursery.cancel_scope.cancel()
                    await daemon.close_hosts()
                    await supervisor.aclose()
                    await writer.wait_committed()
                    nursery.cancel_scope.cancel()
                log.info("hostd stopped")
            finally:
                reader.close()
        finally:
            store.close()
    finally:
        if socket_bound:
            _unlink(paths.socket_path)
        data_lock.release()
        lock.release()


async def _accept(
    listener: Any,
    daemon: Daemon,
    conn_nursery: trio.Nursery,
    peer_uid: PeerUidLookup,
    scope: trio.CancelScope,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    with scope:
        await serve_unix(
            listener,
            daemon.handle_connection,
            handler_nursery=conn_nursery,
            peer_uid=peer_uid,
            max_connections=daemon.config.max_connections or default_max_connections(),
            task_status=task_status,
        )


async def _serve_scheduled(
    scheduler: Scheduler,
    scope: trio.CancelScope,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    with scope:
        await scheduler.serve(task_status=task_status)


def _unlink(path: Any) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


__all__ = [
    "Daemon",
    "DaemonConfig",
    "LOAD_SEQ_GAP",
    "serve_daemon",
]
