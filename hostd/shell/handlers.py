"""The daemon's request handlers: one method per client request, and the one table that
maps every request type to its handler (`RequestHandlers._handler_table`; the daemon's
`handle_request` looks it up). Topic operations (rewind, regenerate, edit-and-resend, fork)
and schedules keep their handlers beside their concept (`hostd.shell.topic_ops`,
`hostd.shell.schedule_service`); the table names them too.

Every handler is `async def _x(self, conn, msg) -> Result` (None when it replied itself, as
`attach` does) and raises `HostdError`s, which the connection turns into error replies. A
handler checks its input before it changes anything, so a refused request leaves nothing
behind.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, cast

import msgspec
import trio

from hostd import __version__
from hostd.core.assistants import DEFAULT_ASSISTANT_NAME
from hostd.core.connector import describe_assistants, has_file
from hostd.core.payload_bounds import (
    check_send,
    check_text,
    fit_rows,
    fit_topics,
    row_piece,
)
from hostd.core.sandbox_policy import driver_options, policy_of
from hostd.core.workspaces import workspace_of
from hostd.shell.connection import (
    Connection,
)
from hostd.shell.drivers.registry import DriverRegistry
from hostd.shell.drivers.secrets import check_references
from hostd.shell.drivers.window_options import check_window_options
from hostd.shell.fanout import encoded_size
from hostd.shell.lanes import check_takers, refused_target
from hostd.shell.paths import Paths
from hostd.shell.schedule_service import (
    schedule_handlers,
)
from hostd.shell.scheduler import Scheduler
from hostd.shell.store import store as st
from hostd.shell.topic_host import TopicHost, new_id
from hostd.shell.topic_ops import topic_op_handlers
from hostd.shell.turns import TurnServices, continue_text, ensure_workdir, missing_workdir
from hostd_protocol.client_messages import (
    AnswerApproval,
    ApprovalInfo,
    AssistantListResult,
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
    ListAssistants,
    ListDrivers,
    ListTopics,
    MessageRow,
    Ping,
    Pong,
    PrewarmTopic,
    ReadRow,
    RenameTopic,
    Result,
    SendMessage,
    SendNow,
    Shutdown,
    Status,
    StatusResult,
    Stop,
    TopicDeleted,
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
    HostdError,
    InvalidArgument,
    NotFound,
    TopicClosed,
    UnknownTopic,
    UnresolvedRole,
)
from hostd_protocol.limits import MAX_REPLY_BYTES, MAX_SEND_BYTES

if TYPE_CHECKING:
    from hostd.shell.daemon import Daemon, DaemonConfig
    from hostd.shell.drivers.supervisor import Supervisor
    from hostd.shell.scheduler import Scheduler

log = logging.getLogger(__name__)


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


class RequestHandlers:
    """The request handlers of `Daemon` (a mixin: one concept, one module). The daemon owns
    the state they use; they reach a topic through `host()`, which loads it if needed."""

    paths: Paths
    config: DaemonConfig
    reader: st.AsyncStore
    writer: st.StoreWriter
    registry: DriverRegistry
    supervisor: Supervisor
    hosts: dict[str, TopicHost]
    connections: set[Connection]
    turns: TurnServices
    scheduler: Scheduler
    _records: dict[str, st.TopicRecord]
    _topic_watchers: dict[Connection, None]
    _hosts_nursery: trio.Nursery | None
    _started_at: float

    if TYPE_CHECKING:  # provided by Daemon

        async def host(self, topic_id: str) -> TopicHost: ...

        def _topic_info(self, topic_id: str) -> TopicInfo: ...

        async def _start_host(
            self,
            info: TopicInfo,
            rows: list[MessageRow],
            approvals: list[ApprovalInfo],
            last_seq: int,
            resume_token: str | None,
        ) -> TopicHost: ...

        def request_shutdown(self) -> None: ...

    def _handler_table(self) -> dict[type, Callable[[Connection, Any], Any]]:
        """Every request type the daemon serves -> its handler."""
        daemon = cast("Daemon", self)  # mixed into Daemon only; its helpers take the daemon
        return {
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
            ListAssistants: self._list_assistants,
            Ping: self._ping,
            Shutdown: self._shutdown,
            GetUsage: self._usage,
            **schedule_handlers(daemon, self.scheduler),
            WatchTopics: self._watch_topics,
            UnwatchTopics: self._unwatch_topics,
            **topic_op_handlers(daemon),
        }

    async def _create_topic(self, conn: Connection, msg: CreateTopic) -> Result:
        if msg.working_dir and not os.path.isabs(msg.working_dir):
            # It would resolve against the daemon's cwd, which is not the user's: the client
            # resolves it (hostd.client does) or names an absolute path.
            raise InvalidArgument(
                f"working_dir must be an absolute path, not {msg.working_dir!r} (resolve it "
                "against your current directory first)",
                details={"working_dir": msg.working_dir},
            )
        problem = msg.working_dir and await trio.to_thread.run_sync(
            missing_workdir, msg.working_dir
        )
        if problem:
            # Refused here, not at the first send: no request changes a topic's working dir.
            raise InvalidArgument(problem, details={"working_dir": msg.working_dir})
        return TopicResult(topic=await self.create_topic(msg))

    async def create_topic(self, msg: CreateTopic) -> TopicInfo:
        """Create and load a topic (a window's `create-topic`, or a schedule's run)."""
        if msg.assistant:
            await self.turns.config.load(msg.assistant)  # unknown or broken: ConfigError
        # The built-in `default` is what a topic that names no assistant runs on: the same
        # driver choice (`list-assistants` shows it).
        bare = not msg.assistant or await self._builtin_default(msg.assistant)
        # A topic with an assistant gets its driver from it (or its role) unless it names one.
        driver = msg.driver or (self.config.default_driver if bare else "")
        driver = await self._ready_driver(msg, driver, bare=bare)
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

    async def _builtin_default(self, assistant: str) -> bool:
        """Whether `assistant` is the built-in `default` (no file of that name)."""
        if assistant != DEFAULT_ASSISTANT_NAME:
            return False
        catalog, _ = await self.turns.config.current()
        return not has_file(catalog, assistant)

    async def bare_driver(self, model: str = "") -> str:
        """The driver stored for a topic that names no assistant and no driver (and for the
        built-in `default`): the daemon's default driver; "" when the `default` role decides;
        else the first ready built-in driver (`DriverRegistry.pick_default`, which raises
        saying why none is)."""
        if self.config.default_driver:
            return self.config.default_driver
        try:
            await self.turns.resolve_driver("", model)
        except UnresolvedRole:
            return self.registry.pick_default(self.supervisor.driver_environ)
        return ""

    async def _ready_driver(self, msg: CreateTopic, driver: str, *, bare: bool) -> str:
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
        stored = driver
        if driver:
            spec = self.registry.require_ready(driver, environ_of)
        else:
            try:
                resolved = await self.turns.resolve_driver(msg.assistant, msg.model)
            except UnresolvedRole:
                if not bare:  # a named assistant's role must resolve
                    raise
                stored = self.registry.pick_default(environ_of)
                spec = self.registry.get(stored)
            else:
                spec = self.registry.require_ready(resolved, environ_of)
        spec.check_options(options)
        await self.turns.check_model(spec, msg.assistant, stored or driver, msg.model)
        # A window may not pick which of the daemon's variables is sent as a key.
        await self.turns.config.current()  # the assistant files as they are now
        check_window_options(
            spec, options, self.turns.config.configured_values,
            self.supervisor.driver_environ(spec, options),
        )
        check_references(spec, options, self.turns.config)
        return stored

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
        if msg.since is not None and msg.since < 0:
            raise InvalidArgument(
                f"since must be a seq this topic handed out (>= 0), not {msg.since}; leave it "
                "out for a fresh snapshot"
            )
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
        check_send(msg.text, msg.history, msg.attachments)  # refused: nothing is stored
        for n, target in enumerate(msg.also, 1):
            # An unknown or unusable driver or assistant (a typo, most likely) refuses the
            # whole message now, nothing stored: the user fixes it and sends again, instead
            # of paying for the other answers and getting an error row to ignore.
            try:
                if target.driver:
                    spec = self.registry.require_ready(
                        target.driver, self.supervisor.driver_environ
                    )
                    await self.turns.check_model(
                        spec, target.assistant, target.driver, target.model
                    )
                if target.assistant:
                    await self.turns.config.load(target.assistant)  # unknown: ConfigError
            except HostdError as exc:
                raise refused_target(exc, n, target) from None
        # An extra answer by the built-in `default` runs where a bare topic would.
        also = [
            msgspec.structs.replace(t, driver=await self.bare_driver(t.model))
            if not t.driver and await self._builtin_default(t.assistant)
            else t
            for t in msg.also
        ]
        host = await self.host(msg.topic_id)
        self.turns.check(conn.peer_uid, host.topic_info())  # refused: nothing is stored
        await check_takers(  # refused: nothing is stored
            self.registry, self.turns, host.info, also, msg, self.supervisor.driver_environ
        )
        client_msg_id = msg.client_msg_id
        if msg.history:
            # The transcript waits for this message's turn, found again by its key (a fresh
            # unique key when the client gave none: it dedups nothing).
            client_msg_id = client_msg_id or new_id("h")
            self.turns.remember_history(msg.topic_id, client_msg_id, msg.history)
        try:
            result = await host.send(
                msg.text,
                msg.intent,
                client_msg_id=client_msg_id,
                options=msg.options or None,
                also=also,
                attachments=msg.attachments,
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
        await host.stop(msg.row_id)
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
            workdir = await trio.to_thread.run_sync(
                ensure_workdir, opts.working_dir, info, str(self.turns.workspaces)
            )
            opts = replace(opts, working_dir=workdir)
        except HostdError:
            opts = SessionOptions(
                driver=info.driver, model=info.model, working_dir=info.working_dir,
                options=info.options,
            )
        try:
            await self.supervisor.prewarm(
                opts, host.resume_token, topic_id=host.topic_id, fork_from=host.pending_source
            )
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

    async def _list_assistants(self, conn: Connection, msg: ListAssistants) -> Result:
        catalog, roles = await self.turns.config.current()
        drivers = {d.name: d for d in self.registry.infos(self.supervisor.driver_environ)}
        # The built-in `default` runs where a bare topic does.
        fallback: str | HostdError
        try:
            fallback = self.config.default_driver or self.registry.pick_default(
                self.supervisor.driver_environ
            )
        except HostdError as exc:
            fallback = exc
        return AssistantListResult(
            assistants=describe_assistants(
                catalog,
                roles,
                drivers,
                profile=msg.profile,
                fallback=fallback,
                fallback_first=bool(self.config.default_driver),
            )
        )

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

