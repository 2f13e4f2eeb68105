"""The daemon: wires paths -> store -> drivers -> supervisor -> topics -> socket, and serves
every client request (the handlers: `hostd.shell.handlers`, mixed into `Daemon`).

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
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import trio

from hostd import __version__
from hostd.core.payload_bounds import (
    bound_topic,
)
from hostd.core.runtime_outbox import NoticeLevel
from hostd.core.schedules import ScheduleBook
from hostd.shell.connection import (
    DEFAULT_MAX_QUEUE_BYTES,
    FRAME_TIMEOUT,
    HELLO_TIMEOUT,
    Connection,
)
from hostd.shell.drivers.priority import DEFAULT_DRIVER_NICE
from hostd.shell.drivers.registry import DriverRegistry
from hostd.shell.fanout import DEFAULT_REPLAY_SIZE
from hostd.shell.handlers import RequestHandlers
from hostd.shell.interpreter import collect_when_quiet, freeze_startup_heap, set_switch_interval
from hostd.shell.partial_frames import DEFAULT_MAX_PARTIAL_BYTES, PartialFrames
from hostd.shell.paths import Paths, check_database_files
from hostd.shell.schedule_service import (
    DaemonScheduleTarget,
    WriterScheduleStore,
)
from hostd.shell.scheduler import Scheduler
from hostd.shell.server import (
    ConnectionSlot,
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
from hostd.shell.tracing import Tracing, tracing_from_environment
from hostd.shell.turns import TurnServices
from hostd_protocol.client_messages import (
    ApprovalInfo,
    MessageRow,
    Result,
    ScheduleInfo,
    StateChanged,
    TopicEvent,
    TopicInfo,
    TurnStarted,
)
from hostd_protocol.errors import ConfigError, HostdError, UnknownRequest, UnknownTopic
from hostd_protocol.framing import DEFAULT_MAX_FRAME_SIZE

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
    driver_nice: int = DEFAULT_DRIVER_NICE,
) -> Supervisor:
    from hostd.shell.drivers.sandbox import Sandbox
    from hostd.shell.drivers.supervisor import Supervisor

    sandbox = Sandbox(sandbox_hidden, bridge_parent=bridge_parent)
    return Supervisor(
        registry, workdir_root=workdir_root, sandbox=sandbox, driver_nice=driver_nice
    )


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
    #: Of those, how many may be waiting for their hello; when full, the oldest waiting one
    #: is closed (0: `connection_slots.default_max_startups`).
    max_startups: int = 0
    #: A new connection must say hello within this; a frame once started must complete
    #: within `frame_timeout` (seconds).
    hello_timeout: float = HELLO_TIMEOUT
    frame_timeout: float = FRAME_TIMEOUT
    #: Bytes of incomplete frames all connections together may hold.
    max_partial_bytes: int = DEFAULT_MAX_PARTIAL_BYTES
    #: Nice value of driver processes and their session groups, so the daemon's fan-out
    #: and the desktop win under contention (`hostd.shell.drivers.priority`; 0: off).
    driver_nice: int = DEFAULT_DRIVER_NICE
    #: Freeze the start-up heap out of the cyclic GC once serving starts, and run full passes
    #: at quiet moments (`hostd.shell.interpreter`). `hostd serve` owns its interpreter; a process
    #: that embeds the daemon (the tests) keeps its own collector untouched.
    freeze_startup_heap: bool = False
    #: GIL switch interval (seconds) to set once serving starts, so the store writer's thread
    #: cannot keep the event loop waiting for the GIL for CPython's default 5 ms
    #: (`hostd.shell.interpreter`). None: leave the process's setting alone (embedded).
    switch_interval: float | None = None


class Daemon(RequestHandlers):
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
        tracing: Tracing | None = None,
    ) -> None:
        self.paths = paths
        #: OpenTelemetry spans of every turn (`hostd.shell.tracing`); None: off (default).
        self.tracing = tracing
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
        # A variable an option names (`api_key_env`) must be one the user's assistant files
        # name: the supervisor asks the config cache (hostd/shell/drivers/window_options.py).
        supervisor.configured_values = self.turns.config.configured_values
        # `${NAME}` references in options: secrets.env and the names assistant files refer to
        # (hostd/shell/drivers/secrets.py).
        supervisor.secret_source = self.turns.config
        # Scheduled prompts (hostd/shell/schedule_service.py); due times before now were missed.
        self.scheduler = Scheduler(
            ScheduleBook(schedules or [], booted_at=time.time()),
            DaemonScheduleTarget(self),
            WriterScheduleStore(writer),
        )
        self._handlers = self._handler_table()

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

    async def handle_connection(
        self, stream: trio.SocketStream, uid: int, slot: ConnectionSlot | None = None
    ) -> None:
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
            slot=slot,
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
            tracing=self.tracing,
        )
        assert self._hosts_nursery is not None
        await self._hosts_nursery.start(self._run_host, host)
        self.hosts[info.id] = host
        return host

    def _observe(self, topic_id: str, event: TopicEvent) -> None:
        self.turns.observe(topic_id, event)
        self.scheduler.observe(topic_id, event)
        if type(event) is StateChanged and (host := self.hosts.get(topic_id)) is not None:
            # Protocol 1.6: the topic list is live for watching windows, busy badges too.
            self._topics_changed("changed", topic_id, host.topic_info())
        if self.tracing is not None:
            host = self.hosts.get(topic_id) if type(event) is TurnStarted else None
            self.tracing.topic_event(topic_id, event, host.info.assistant if host else "")

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


async def serve_daemon(
    paths: Paths,
    *,
    config: DaemonConfig | None = None,
    registry: DriverRegistry | None = None,
    supervisor_factory: SupervisorFactory = default_supervisor_factory,
    runtime_factory: RuntimeFactory = default_runtime_factory,
    peer_uid: PeerUidLookup = default_peer_uid,
    tracing: Tracing | None = None,
    task_status: trio.TaskStatus[Daemon] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run the daemon until a shutdown is requested (graceful) or the caller cancels.
    `tracing` None: as the environment and `config.toml` say (`hostd.shell.tracing`)."""
    config = config or DaemonConfig()
    paths.ensure()
    tracing = tracing or tracing_from_environment(paths.config_path)
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
                        driver_nice=config.driver_nice,
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
                    tracing=tracing,
                )
                supervisor.report_model_calls = tracing is not None
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
                    if config.freeze_startup_heap:
                        # Start-up is done: what lives now lives as long as the daemon.
                        freeze_startup_heap()
                        nursery.start_soon(collect_when_quiet)  # full passes when quiet
                    if config.switch_interval is not None:
                        set_switch_interval(config.switch_interval)
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
        if tracing is not None:
            # Spans still queued go out now (bounded); in a thread: the loop may be closing.
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(tracing.shutdown)


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
            max_startups=daemon.config.max_startups or None,
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
