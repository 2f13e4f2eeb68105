"""`hostd acp`: hostd topics as the sessions of an ACP agent an editor runs over stdio.

The editor (Zed, JetBrains, Neovim) starts `hostd acp` and speaks ACP (JSON-RPC on stdin /
stdout). This process is one more window of the daemon: each ACP session is a topic, so the
answer goes on when the editor closes, other windows see it live, and approvals can be
answered anywhere. The ACP side is `hostd_acp.rpc_peer`, the same JSON-RPC implementation
the ACP driver uses toward the agents it runs (hostd is the ACP client there, the agent
here).

Methods (docs/acp.md):
- `initialize`: protocol 1; `loadSession`, prompt capabilities (embedded context inlined;
  images where the default driver takes them), MCP capabilities, `sessionCapabilities.list`.
- `session/new`: a new topic (working dir = `cwd`; driver / assistant / model from
  `_meta.hostd`, else this command's defaults); the editor's `mcpServers` become the
  driver's MCP option where the driver takes MCP servers.
- `session/load`: any topic; its history is replayed as updates, in order, then it is live.
- `session/list`: every topic (or those under `cwd`).
- `session/prompt`: a `send` (while a turn runs: the configured intent, `steer` by default);
  answered when the turn that carries it ends.
- `session/cancel`: `stop` (the partial answer is kept; the prompt answers `cancelled`).
- `$/cancel_request` (the editor withdraws one of its requests; `hostd_acp.rpc_peer`): a
  prompt's is `session/cancel` for the turn that carries its message (the prompt answers
  with that turn's end, `cancelled` once stopped); any other request is cut short and
  answered `-32800` (a session it was opening is closed again).
- the topic's approvals become `session/request_permission` (hostd/acp/approvals.py); the
  first answer from any window wins, a later one from the editor is dropped quietly.

When the daemon stops or crashes, `hostd.acp.link.DaemonLink` connects again (starting
it) and each open session re-attaches (`hostd.acp.forward`, `_follow`: `since=` on the same daemon, a fresh
snapshot on a restarted one); the editor gets one note per session (docs/acp.md).

Rules this module guards: one attachment per session per connection, forwarding its events
in `seq` order; a prompt is answered exactly once (turn end, draft after a stop, topic
deleted, its turn gone after a restart, stdin closed); nothing the editor sends can end the
process but closing stdin, and losing the daemon ends no session.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import msgspec
import trio

from hostd.acp.approvals import Approvals
from hostd.acp.forward import SessionEvents
from hostd.acp.inputs import mcp_option, prompt_input
from hostd.acp.link import Connect, DaemonLink
from hostd.acp.sessions import OURS, AgentDefaults, Prompt, Session, note
from hostd.acp.updates import (
    mode_state,
    stop_reason,
)
from hostd.client.async_client import Client
from hostd_acp.jsonrpc import INTERNAL_ERROR, INVALID_PARAMS, METHOD_NOT_FOUND
from hostd_acp.rpc_peer import AfterReply, RequestRefused, RpcPeer, on_withdraw
from hostd_protocol.client_messages import (
    DriverInfo,
)
from hostd_protocol.common import Attachment
from hostd_protocol.errors import (
    ConnectionBroken,
    HostdError,
    InvalidArgument,
    PayloadTooLarge,
    UnknownTopic,
)

__all__ = ["ACP_PROTOCOL_VERSION", "AcpAgent", "AgentDefaults"]

ACP_PROTOCOL_VERSION = 1
#: ACP's "resource not found" error code (a session id that names no topic).
RESOURCE_NOT_FOUND = -32002
#: How long requests still being served at the editor's EOF get to finish (`_input_ended`).
EOF_GRACE_S = 5.0


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")


class AcpAgent(SessionEvents):
    """The ACP agent side of `hostd acp`, over a daemon connection made again when lost."""

    def __init__(self, connect: Connect, defaults: AgentDefaults, version: str) -> None:
        self.link = DaemonLink(connect, on_up=self._connected, on_down=self._lost)
        #: The topics' approvals as the editor's permission requests (hostd/acp/approvals.py).
        self.approvals = Approvals(self.link, self._update)
        self.defaults = defaults
        self.version = version
        self.peer: RpcPeer | None = None
        self.sessions: dict[str, Session] = {}
        #: The daemon's drivers by name (what each declares: modes, MCP option).
        self._drivers: dict[str, DriverInfo] | None = None
        self._nursery: trio.Nursery | None = None
        #: The daemon's process id (a new one after a restart: sessions take a snapshot).
        self._daemon_pid = 0
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
        """Serve the editor until its input ends (the first daemon connection is made before:
        its failure is this call's)."""
        self.peer = RpcPeer(
            send,
            on_request=self._on_request,
            on_notification=self._on_notification,
            max_line=max_line,
            answer_garbage=True,
        )
        self.approvals.peer = self.peer
        async with trio.open_nursery() as nursery:
            self._nursery = self.approvals.nursery = nursery
            await nursery.start(self.link.run)
            await self.peer.serve(receive, nursery)
            with trio.move_on_after(EOF_GRACE_S + 5):  # an editor that reads no more
                await self._input_ended()
            self.peer.close("the editor closed the connection")
            nursery.cancel_scope.cancel()  # the editor is gone: the daemon goes on alone

    async def _input_ended(self) -> None:
        """The editor closed our stdin: it is leaving, or closed only its writing end and
        still reads. Either way every request it sent is answered before we exit, and
        nothing is stopped in the daemon: it owns the answers (a closed window never stops
        one; other windows and a later `session/load` see them finish). A prompt waiting for
        its turn is answered at once with an error saying so (the turn may run for minutes;
        `cancelled` would claim a stop that did not happen); the editor's permission
        requests are withdrawn (the approvals stay open for other windows); other requests
        get `EOF_GRACE_S` to finish, then an error."""
        assert self.peer is not None
        for session in self.sessions.values():
            for prompt in list(session.prompts.values()):
                prompt.finish("error", (
                    "hostd acp's input ended: this answer goes on in the daemon (topic "
                    f"{session.topic_id}); load the session again to see it"))
            for scope in session.asking.values():
                scope.cancel()
        await self.peer.wind_down(EOF_GRACE_S, "hostd acp's input ended before this request "
                                  "was done; send it again")

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
            await (await self.link.client()).stop(topic_id)
        except HostdError:
            pass  # nothing to stop (the turn ended meanwhile), or the topic is gone

    # --- methods --------------------------------------------------------------------------

    async def _initialize(self, params: dict[str, Any]) -> Any:
        # Images where new sessions' driver takes them (a session of another driver refuses
        # them with a reason: ACP has no per-session prompt capabilities).
        d = self.defaults
        driver = await self._driver(d.driver, d.assistant or ("" if d.driver else "default"))
        images = bool(driver and driver.images)
        return {
            "protocolVersion": ACP_PROTOCOL_VERSION,
            "agentCapabilities": {
                "loadSession": True,
                "promptCapabilities": {"image": images, "audio": False, "embeddedContext": True},
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
        client = await self.link.client()
        if self._drivers is None or name not in self._drivers:
            self._drivers = {d.name: d for d in await client.list_drivers()}
        if not name and assistant:
            found = [a for a in await client.list_assistants() if a.name == assistant]
            name = found[0].driver if found else ""
        return self._drivers.get(name)

    async def _new(self, params: dict[str, Any]) -> Any:
        cwd = params.get("cwd")
        if not isinstance(cwd, str) or not cwd.startswith("/"):
            raise RequestRefused(INVALID_PARAMS, "session/new: cwd must be an absolute path")
        choice = self._choice(params)
        options = choice["options"]
        driver = await self._driver(choice["driver"], choice["assistant"] or "default")
        options.update(mcp_option(driver, params.get("mcpServers")))
        topic = await (await self.link.client()).create_topic(
            title=choice["title"],
            assistant=choice["assistant"],
            driver=choice["driver"],
            model=choice["model"],
            working_dir=cwd,
            options=options,
        )
        session = await self._opening(topic, driver, replay=False)
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
        topic = await (await self.link.client()).get_topic(sid)  # UnknownTopic: not found
        driver = await self._driver(topic.driver, topic.assistant or "default")
        session = await self._opening(topic, driver, replay=True)
        modes = mode_state(session.modes, session.mode)
        return AfterReply({"modes": modes} if modes else {}, session.live.set)

    async def _list(self, params: dict[str, Any]) -> Any:
        cwd = params.get("cwd")
        topics = await (await self.link.client()).list_topics()
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

    def _session(self, params: dict[str, Any]) -> Session:
        sid = params.get("sessionId")
        session = self.sessions.get(sid) if isinstance(sid, str) else None
        if session is None:
            raise RequestRefused(RESOURCE_NOT_FOUND, f"no open session {sid!r}")
        return session

    async def _prompt(self, params: dict[str, Any]) -> Any:
        session = self._session(params)
        text, images = prompt_input(
            params.get("prompt"), images=session.images, driver=session.driver
        )
        if not text.strip() and not images:
            raise RequestRefused(INVALID_PARAMS, "the prompt is empty")
        prompt = Prompt(key=f"{OURS}{uuid.uuid4().hex}")
        session.prompts[prompt.key] = prompt
        on_withdraw(lambda: self._withdraw_prompt(session, prompt))
        try:
            sent = await self._send(session, prompt, text, images)
            prompt.row_id = prompt.row_id or sent.row_id
            self._withdraw_prompt(session, prompt, withdrawn=prompt.withdrawn)
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

    def _withdraw_prompt(self, session: Session, prompt: Prompt, withdrawn: bool = True) -> None:
        """The editor withdrew a `session/prompt` (`$/cancel_request`): as `session/cancel`,
        the turn that carries its message is stopped (once its message is in: a stop before
        would miss it) and the prompt answers when that turn ends (`cancelled`)."""
        prompt.withdrawn = withdrawn
        if prompt.withdrawn and prompt.row_id and not prompt.stop_sent:
            prompt.stop_sent = True
            assert self._nursery is not None
            self._nursery.start_soon(self._stop, session.topic_id)

    async def _send(
        self, session: Session, prompt: Prompt, text: str, images: list[Attachment]
    ) -> Any:
        """Send the prompt's message; when the daemon is lost meanwhile, again on the next
        connection with the same key (the daemon stores a key once; a stored one answers
        with its row). A message with images never steers (the daemon refuses it): it
        queues behind a running turn instead."""
        intent = self.defaults.busy_intent
        if images and intent == "steer":
            intent = "auto"
        while True:
            client = await self.link.client()
            try:
                return await client.send(
                    session.topic_id,
                    text,
                    intent,
                    client_msg_id=prompt.key,
                    options={session.mode_key: session.mode} if session.mode_key else None,
                    attachments=images,
                )
            except ConnectionBroken:
                await self.link.replaced(client)

    # --- the daemon connection ------------------------------------------------------------

    async def _connected(self, client: Client, nursery: trio.Nursery, again: bool) -> None:
        """A new connection: re-attach every open session there."""
        try:
            pid = (await client.status()).pid
        except HostdError:
            return  # lost again at once: the next connection does it
        restarted, self._daemon_pid = pid != self._daemon_pid, pid
        if not again:
            return
        for session in list(self.sessions.values()):
            if not session.gone:
                await nursery.start(
                    self._follow, client, session, "fresh" if restarted else "since"
                )
        what = "the daemon restarted" if restarted else "the connection to the daemon was back"
        for session in list(self.sessions.values()):
            if not session.gone:
                await self._update(session, note(
                    f"hostd: {what}; this session goes on", "reconnected"))

    async def _lost(self, reason: HostdError) -> None:
        print(f"hostd acp: lost the daemon ({reason.message}); connecting again",
              file=sys.stderr)
        assert self._nursery is not None
        self._nursery.start_soon(self._give_up, reason)

    async def _give_up(self, reason: HostdError) -> None:
        """Prompts do not wait longer than requests for a daemon that does not come back."""
        if await self.link.wait_down_for(self.link.wait_s):
            for session in self.sessions.values():
                for prompt in list(session.prompts.values()):
                    prompt.finish("error", f"lost the daemon ({reason.message}) and it has "
                                  "not come back; hostd acp keeps trying")
