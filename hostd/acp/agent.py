"""`hostd acp`: hostd topics as the sessions of an ACP agent an editor runs over stdio.

The editor (Zed, JetBrains, Neovim) starts `hostd acp` and speaks ACP (JSON-RPC on stdin /
stdout). This process is one more window of the daemon: each ACP session is a topic, so the
answer goes on when the editor closes, other windows see it live, and approvals can be
answered anywhere. The ACP side is `hostd_acp.rpc_peer`, the same JSON-RPC implementation
the ACP driver uses toward the agents it runs (hostd is the ACP client there, the agent
here).

Methods (docs/acp.md):
- `initialize`: protocol 1; `loadSession`, prompt capabilities (embedded context: inlined as
  text), MCP capabilities, `sessionCapabilities.list`.
- `session/new`: a new topic (working dir = `cwd`; driver / assistant / model from
  `_meta.hostd`, else this command's defaults); the editor's `mcpServers` become the
  driver's MCP option where the driver takes MCP servers.
- `session/load`: any topic; its history is replayed as updates, in order, then it is live.
- `session/list`: every topic (or those under `cwd`).
- `session/prompt`: a `send` (while a turn runs: the configured intent, `steer` by default);
  answered when the turn that carries it ends.
- `session/cancel`: `stop` (the partial answer is kept; the prompt answers `cancelled`).
- the topic's approvals become `session/request_permission`; the first answer from any
  window wins, a later one from the editor is dropped quietly.

Rules this module guards: one attachment per session, forwarding its events in `seq`
order; a prompt is answered exactly once (turn end, draft after a stop, topic deleted, or
the daemon gone); nothing the editor sends can end the process but closing stdin.
"""

from __future__ import annotations

import re
import sys
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import msgspec
import trio

from hostd.acp.updates import (
    commands_update,
    mode_state,
    stop_reason,
    updates_for_chunk,
    updates_for_row,
)
from hostd.client.async_client import Client
from hostd_acp.jsonrpc import INTERNAL_ERROR, INVALID_PARAMS, METHOD_NOT_FOUND
from hostd_acp.rpc_peer import AfterReply, PeerGone, PeerRpcError, RequestRefused, RpcPeer
from hostd_protocol.client_messages import (
    ApprovalInfo,
    ApprovalRequested,
    ApprovalResolved,
    CommandsChanged,
    DriverInfo,
    MessageRow,
    RowAppended,
    RowOpened,
    RowUpdated,
    Snapshot,
    TopicDeleted,
    TopicInfo,
    TurnEnded,
)
from hostd_protocol.common import SendIntent, TurnStatus
from hostd_protocol.errors import (
    AlreadyAnswered,
    HostdError,
    InvalidArgument,
    NotFound,
    PayloadTooLarge,
    UnknownTopic,
)

__all__ = ["ACP_PROTOCOL_VERSION", "AcpAgent", "AgentDefaults"]

ACP_PROTOCOL_VERSION = 1
#: ACP's "resource not found" error code (a session id that names no topic).
RESOURCE_NOT_FOUND = -32002
#: Our sends' client_msg_id prefix: the editor already shows what it sent.
_OURS = "acp:"
#: Default answers when the driver offers no options of its own.
_DEFAULT_OPTIONS = [
    {"optionId": "allow", "name": "Allow", "kind": "allow_once"},
    {"optionId": "reject", "name": "Deny", "kind": "reject_once"},
]


@dataclass(frozen=True)
class AgentDefaults:
    """What `session/new` uses when `_meta.hostd` names nothing (the command's flags)."""

    assistant: str = ""
    driver: str = ""
    model: str = ""
    #: The intent of a prompt sent while a turn runs.
    busy_intent: SendIntent = "steer"


@dataclass
class _Prompt:
    """One `session/prompt` waiting for the end of the turn that carries its message."""

    key: str
    row_id: str = ""
    turn_id: str = ""
    done: trio.Event = field(default_factory=trio.Event)
    status: TurnStatus = "success"
    error: str = ""

    def finish(self, status: TurnStatus, error: str = "") -> None:
        if not self.done.is_set():
            self.status, self.error = status, error
            self.done.set()


class _Session:
    """One ACP session = one topic, attached for as long as this process runs."""

    def __init__(self, topic: TopicInfo, driver: DriverInfo | None) -> None:
        self.topic_id = topic.id
        self.driver = driver.name if driver else topic.driver
        #: The driver's modes (`DriverSpec.modes`), the send option they travel in, the
        #: current one (the topic's option, else the driver's first).
        self.modes = list(driver.modes) if driver else []
        self.mode_key = driver.mode_option if driver and self.modes else ""
        self.mode_ids = [m.id for m in self.modes]
        current = topic.options.get(self.mode_key) if self.mode_key else None
        self.mode = current if current in self.mode_ids else (self.mode_ids or [""])[0]
        self.prompts: dict[str, _Prompt] = {}
        #: Turns that ended, so a prompt whose reply comes after its turn's end still finds it.
        self.ended: dict[str, TurnEnded] = {}
        #: Approvals the editor is being asked about.
        self.asking: set[str] = set()
        self.live = trio.Event()
        self.replayed = trio.Event()
        self.gone = False


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")


def _prompt_text(blocks: Any) -> str:
    """ACP content blocks as the message text: text as is, embedded resources inlined."""
    if not isinstance(blocks, list):
        raise RequestRefused(INVALID_PARAMS, "prompt must be a list of content blocks")
    out: list[str] = []
    for b in blocks:
        if not isinstance(b, dict):
            continue
        kind = b.get("type")
        if kind == "text":
            out.append(str(b.get("text", "")))
        elif kind == "resource":
            res = b.get("resource") or {}
            if isinstance(res, dict):
                uri, text = res.get("uri", ""), res.get("text")
                body = text if isinstance(text, str) else "(binary content)"
                out.append(f"\n<context uri={uri!r}>\n{body}\n</context>\n")
        elif kind == "resource_link":
            out.append(f"[{b.get('name') or b.get('uri', '')}]({b.get('uri', '')})")
        else:
            raise RequestRefused(INVALID_PARAMS, f"hostd does not take {kind!r} content")
    return "".join(out)


def _mcp_option(driver: DriverInfo | None, servers: Any) -> dict[str, Any]:
    """The editor's MCP servers as the driver's option, in the shape it declares
    (`DriverSpec.mcp_option` / `mcp_format`); {} when it takes none."""
    if not isinstance(servers, list) or not servers or driver is None or not driver.mcp_option:
        return {}
    if driver.mcp_format == "acp":
        return {driver.mcp_option: servers}  # e.g. to an inner ACP agent's session/new as is
    if driver.mcp_format == "mcp.json":
        table: dict[str, Any] = {}
        for s in servers:
            if not isinstance(s, dict) or not s.get("name"):
                continue
            pairs = s.get("env") or s.get("headers") or []
            kv = {p["name"]: p["value"] for p in pairs if isinstance(p, dict) and "name" in p}
            # The openai driver takes names of letters, digits, '-' and '_' only.
            name = re.sub(r"[^A-Za-z0-9_-]", "_", str(s["name"]))
            if s.get("url"):
                kind = {"type": "sse"} if s.get("type") == "sse" else {}
                table[name] = {"url": s["url"], "headers": kv, **kind}
            else:
                table[name] = {
                    "command": s.get("command", ""),
                    "args": list(s.get("args") or []),
                    "env": kv,
                }
        return {driver.mcp_option: table} if table else {}
    return {}


class AcpAgent:
    """The ACP agent side of `hostd acp`, over one daemon connection."""

    def __init__(self, client: Client, defaults: AgentDefaults, version: str) -> None:
        self.client = client
        self.defaults = defaults
        self.version = version
        self.peer: RpcPeer | None = None
        self.sessions: dict[str, _Session] = {}
        #: The daemon's drivers by name (what each declares: modes, MCP option).
        self._drivers: dict[str, DriverInfo] | None = None
        self._nursery: trio.Nursery | None = None
        self._handlers: dict[str, Callable[[dict[str, Any]], Awaitable[Any]]] = {
            "initialize": self._initialize,
            "authenticate": self._authenticate,
            "session/new": self._new,
            "session/load": self._load,
            "session/list": self._list,
            "session/prompt": self._prompt,
            "session/set_mode": self._set_mode,
        }

    async def serve(
        self,
        receive: Callable[[], Awaitable[bytes]],
        send: Callable[[bytes], Awaitable[None]],
        max_line: int = 8 * 1024 * 1024,
    ) -> None:
        """Serve the editor until its input ends."""
        self.peer = RpcPeer(
            send,
            on_request=self._on_request,
            on_notification=self._on_notification,
            max_line=max_line,
            answer_garbage=True,
        )
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            await self.peer.serve(receive, nursery)
            self.peer.close("the editor closed the connection")
            nursery.cancel_scope.cancel()  # the editor is gone: the daemon goes on alone

    # --- JSON-RPC entry points ------------------------------------------------------------

    async def _on_request(self, method: str, raw: msgspec.Raw) -> Any:
        handler = self._handlers.get(method)
        if handler is None:
            raise RequestRefused(METHOD_NOT_FOUND, f"method not found: {method}")
        try:
            params = msgspec.json.decode(raw)
        except msgspec.DecodeError:
            params = None
        if params is None:
            params = {}
        if not isinstance(params, dict):
            raise RequestRefused(INVALID_PARAMS, f"{method}: params must be an object")
        try:
            return await handler(params)
        except UnknownTopic as exc:
            raise RequestRefused(RESOURCE_NOT_FOUND, exc.message) from None
        except (InvalidArgument, PayloadTooLarge) as exc:
            # What the editor sent is wrong (a value, a size): its params, not our fault.
            raise RequestRefused(INVALID_PARAMS, f"{exc.code}: {exc.message}") from None
        except HostdError as exc:
            raise RequestRefused(INTERNAL_ERROR, f"{exc.code}: {exc.message}") from None

    async def _on_notification(self, method: str, raw: msgspec.Raw) -> None:
        if method != "session/cancel":
            return  # notifications are never answered; unknown ones are ignored
        try:
            params = msgspec.json.decode(raw)
        except msgspec.DecodeError:
            return
        sid = params.get("sessionId") if isinstance(params, dict) else None
        if isinstance(sid, str) and sid in self.sessions:
            assert self._nursery is not None
            self._nursery.start_soon(self._stop, sid)

    async def _stop(self, topic_id: str) -> None:
        try:
            await self.client.stop(topic_id)
        except HostdError:
            pass  # nothing to stop (the turn ended meanwhile), or the topic is gone

    # --- methods --------------------------------------------------------------------------

    async def _initialize(self, params: dict[str, Any]) -> Any:
        return {
            "protocolVersion": ACP_PROTOCOL_VERSION,
            "agentCapabilities": {
                "loadSession": True,
                "promptCapabilities": {"image": False, "audio": False, "embeddedContext": True},
                "mcpCapabilities": {"http": True, "sse": False},
                "sessionCapabilities": {"list": {}},
            },
            "agentInfo": {"name": "hostd", "title": "hostd", "version": self.version},
            "authMethods": [],
        }

    async def _authenticate(self, params: dict[str, Any]) -> Any:
        return {}  # the daemon is reached through the user's own socket: nothing to do

    def _choice(self, params: dict[str, Any]) -> dict[str, Any]:
        meta = params.get("_meta")
        ours = meta.get("hostd") if isinstance(meta, dict) else None
        ours = ours if isinstance(ours, dict) else {}
        d = self.defaults
        return {
            "assistant": str(ours.get("assistant") or ("" if ours.get("driver") else d.assistant)),
            "driver": str(ours.get("driver") or ("" if ours.get("assistant") else d.driver)),
            "model": str(ours.get("model") or d.model),
            "options": dict(ours.get("options") or {}),
            "title": str(ours.get("title") or ""),
        }

    async def _driver(self, name: str, assistant: str = "") -> DriverInfo | None:
        """What the daemon says of a driver (by name, else of an assistant's driver)."""
        if self._drivers is None or name not in self._drivers:
            self._drivers = {d.name: d for d in await self.client.list_drivers()}
        if not name and assistant:
            found = [a for a in await self.client.list_assistants() if a.name == assistant]
            name = found[0].driver if found else ""
        return self._drivers.get(name)

    async def _new(self, params: dict[str, Any]) -> Any:
        cwd = params.get("cwd")
        if not isinstance(cwd, str) or not cwd.startswith("/"):
            raise RequestRefused(INVALID_PARAMS, "session/new: cwd must be an absolute path")
        choice = self._choice(params)
        options = choice["options"]
        driver = await self._driver(choice["driver"], choice["assistant"] or "default")
        options.update(_mcp_option(driver, params.get("mcpServers")))
        topic = await self.client.create_topic(
            title=choice["title"],
            assistant=choice["assistant"],
            driver=choice["driver"],
            model=choice["model"],
            working_dir=cwd,
            options=options,
        )
        session = await self._open(topic, driver, replay=False)
        result: dict[str, Any] = {"sessionId": topic.id}
        modes = mode_state(session.modes, session.mode)
        if modes is not None:
            result["modes"] = modes
        return AfterReply(result, session.live.set)

    async def _load(self, params: dict[str, Any]) -> Any:
        sid = params.get("sessionId")
        if not isinstance(sid, str) or not sid:
            raise RequestRefused(INVALID_PARAMS, "session/load: sessionId is required")
        if sid in self.sessions:
            raise RequestRefused(INVALID_PARAMS, f"session {sid} is already open")
        topic = await self.client.get_topic(sid)  # UnknownTopic -> resource not found
        driver = await self._driver(topic.driver, topic.assistant or "default")
        session = await self._open(topic, driver, replay=True)
        await session.replayed.wait()
        modes = mode_state(session.modes, session.mode)
        return AfterReply({"modes": modes} if modes else {}, session.live.set)

    async def _list(self, params: dict[str, Any]) -> Any:
        cwd = params.get("cwd")
        topics = await self.client.list_topics()
        return {
            "sessions": [
                {
                    "sessionId": t.id,
                    "cwd": t.working_dir or "/",
                    "title": t.title or None,
                    "updatedAt": _iso(t.updated_at or t.created_at),
                }
                for t in topics
                if not cwd or t.working_dir == cwd
            ]
        }

    async def _set_mode(self, params: dict[str, Any]) -> Any:
        session = self._session(params)
        mode = params.get("modeId")
        if mode not in session.mode_ids:
            offered = ", ".join(session.mode_ids) or "none"
            raise RequestRefused(
                INVALID_PARAMS,
                f"the {session.driver or 'topic'} driver has no mode {mode!r} (modes: {offered})",
            )
        session.mode = str(mode)
        # The next prompt carries it (`Send.options`); the editor hears it at once.
        await self._update(session, {"sessionUpdate": "current_mode_update",
                                      "currentModeId": session.mode})
        return {}

    def _session(self, params: dict[str, Any]) -> _Session:
        sid = params.get("sessionId")
        session = self.sessions.get(sid) if isinstance(sid, str) else None
        if session is None:
            raise RequestRefused(RESOURCE_NOT_FOUND, f"no open session {sid!r}")
        return session

    async def _prompt(self, params: dict[str, Any]) -> Any:
        session = self._session(params)
        text = _prompt_text(params.get("prompt"))
        if not text.strip():
            raise RequestRefused(INVALID_PARAMS, "the prompt is empty")
        prompt = _Prompt(key=f"{_OURS}{uuid.uuid4().hex}")
        session.prompts[prompt.key] = prompt
        try:
            sent = await self.client.send(
                session.topic_id,
                text,
                self.defaults.busy_intent,
                client_msg_id=prompt.key,
                options={session.mode_key: session.mode} if session.mode_key else None,
            )
            prompt.row_id = prompt.row_id or sent.row_id
            if sent.disposition == "started":
                # A steered or queued message's turn is the one that finally carries it
                # (a steer not taken in time runs as the next turn): events tell.
                prompt.turn_id = prompt.turn_id or sent.turn_id
            ended = session.ended.get(prompt.turn_id)
            if ended is not None:
                prompt.finish(ended.status, ended.error)
            await prompt.done.wait()
        finally:
            session.prompts.pop(prompt.key, None)
        if prompt.status == "error":
            raise RequestRefused(INTERNAL_ERROR, prompt.error or "the turn failed")
        return {"stopReason": stop_reason(prompt.status)}

    # --- one session: the topic's events to the editor ----------------------------------

    async def _open(
        self, topic: TopicInfo, driver: DriverInfo | None, *, replay: bool
    ) -> _Session:
        session = self.sessions[topic.id] = _Session(topic, driver)
        assert self._nursery is not None
        await self._nursery.start(self._follow, session, replay)
        return session

    async def _follow(
        self, session: _Session, replay: bool, task_status: Any = trio.TASK_STATUS_IGNORED
    ) -> None:
        try:
            async with self.client.attach(session.topic_id) as sub:
                task_status.started()
                first = await sub.__anext__()
                assert isinstance(first, Snapshot)
                if replay:
                    for row in await self._history(first):
                        for update in updates_for_row(row):
                            await self._update(session, update)
                session.replayed.set()
                await session.live.wait()
                if first.commands:
                    await self._update(session, commands_update(first.commands))
                for approval in first.approvals:
                    self._ask(session, approval)
                async for event in sub:
                    await self._forward(session, event)
        except (PeerGone, HostdError) as exc:
            print(f"hostd acp: session {session.topic_id} ended: {exc}", file=sys.stderr)
        finally:
            session.gone = True
            session.replayed.set()
            for prompt in list(session.prompts.values()):
                prompt.finish("error", "the session's topic is gone or the daemon stopped")

    async def _history(self, snap: Snapshot) -> list[MessageRow]:
        rows = list(snap.rows)
        while snap.truncated and rows:
            page = await self.client.history(
                snap.topic.id, before_position=rows[0].position, limit=1000
            )
            rows = list(page.rows) + rows
            if not page.has_more:
                break
        return rows

    async def _update(self, session: _Session, update: dict[str, Any]) -> None:
        assert self.peer is not None
        await self.peer.notify("session/update", {"sessionId": session.topic_id, "update": update})

    async def _forward(self, session: _Session, event: Any) -> None:
        if isinstance(event, RowAppended):
            for update in updates_for_chunk(event.chunk):
                await self._update(session, update)
        elif isinstance(event, RowOpened):
            self._track(session, event.row)
            row = event.row
            if row.role == "user" and str(row.meta.get("client_msg_id", "")).startswith(_OURS):
                return  # the editor shows what it sent itself
            for update in updates_for_row(row):
                await self._update(session, update)
        elif isinstance(event, RowUpdated):
            for prompt in session.prompts.values():
                if prompt.row_id == event.row_id:
                    if event.turn_id and event.status == "success":  # sent in that turn
                        prompt.turn_id = event.turn_id
                    if event.status == "draft":
                        prompt.finish("stopped")  # handed back by a stop: never sent
        elif isinstance(event, TurnEnded):
            session.ended[event.turn_id] = event
            if len(session.ended) > 64:
                del session.ended[next(iter(session.ended))]
            for prompt in session.prompts.values():
                if prompt.turn_id == event.turn_id:
                    prompt.finish(event.status, event.error)
        elif isinstance(event, CommandsChanged):
            await self._update(session, commands_update(event.commands))
        elif isinstance(event, ApprovalRequested):
            self._ask(session, event.approval)
        elif isinstance(event, ApprovalResolved):
            if event.approval_id in session.asking:
                session.asking.discard(event.approval_id)
                # Answered in another window first: the editor's card shows the outcome;
                # its own answer, whenever it comes, is dropped quietly.
                status = "failed" if event.status != "allowed" else "in_progress"
                await self._update(
                    session,
                    {"sessionUpdate": "tool_call_update", "toolCallId": event.approval_id,
                     "status": status},
                )
        elif isinstance(event, TopicDeleted):
            for prompt in session.prompts.values():
                prompt.finish("error", "the topic was deleted")

    def _track(self, session: _Session, row: MessageRow) -> None:
        key = row.meta.get("client_msg_id")
        prompt = session.prompts.get(key) if isinstance(key, str) else None
        if prompt is not None:
            prompt.row_id = row.id
            if row.status == "success" and row.turn_id:
                prompt.turn_id = row.turn_id

    # --- approvals ------------------------------------------------------------------------

    def _ask(self, session: _Session, approval: ApprovalInfo) -> None:
        if approval.id in session.asking or approval.status != "open":
            return
        session.asking.add(approval.id)
        assert self._nursery is not None
        self._nursery.start_soon(self._permission, session, approval)

    async def _permission(self, session: _Session, approval: ApprovalInfo) -> None:
        assert self.peer is not None
        options = [
            {"optionId": o.id, "name": o.label or o.id, "kind": o.kind or "allow_once"}
            for o in approval.options
        ] or _DEFAULT_OPTIONS
        kinds = {o["optionId"]: o["kind"] for o in options}
        params = {
            "sessionId": session.topic_id,
            "toolCall": {
                "toolCallId": approval.id,
                "title": approval.description or approval.tool,
                "kind": "other",
                "status": "pending",
                "rawInput": approval.input,
            },
            "options": options,
        }
        try:
            raw = await self.peer.request("session/request_permission", params)
        except (PeerGone, PeerRpcError):
            return  # the editor is gone or refused: other windows can still answer
        finally:
            session.asking.discard(approval.id)
        try:
            outcome = msgspec.json.decode(raw).get("outcome") or {}
        except (msgspec.DecodeError, AttributeError):
            outcome = {}
        chosen = outcome.get("optionId") if outcome.get("outcome") == "selected" else None
        if chosen not in kinds:
            allow, option_id, reason = False, "", "cancelled in the editor"
        else:
            allow = str(kinds[chosen]).startswith("allow")
            option_id = "" if any(chosen == d["optionId"] for d in _DEFAULT_OPTIONS) else chosen
            reason = ""
        try:
            await self.client.answer_approval(
                session.topic_id, approval.id, allow, reason, option_id=option_id
            )
        except (AlreadyAnswered, NotFound, UnknownTopic):
            pass  # another window answered first (or the turn ended): first answer wins
