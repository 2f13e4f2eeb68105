"""What every topic's turns share, daemon-wide (`TurnServices`): configuration read once per
change, off the trio thread (`ConfigCache`); observers and their calls, run in order; usage;
the clients' transcripts waiting for their turn; the permission check; and what `continue`
sends (`continue_text`). `hostd.shell.turns` executes one topic's turn effects with them.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from hostd.shell.store import store as st
from hostd.shell.workspaces import Workspaces
from hostd_protocol.client_messages import MessageRow, TopicEvent, TopicInfo, UsageUpdated
from hostd_protocol.common import HistoryMessage, TextDelta, Usage
from hostd_protocol.errors import (
    ConfigError,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    UnresolvedRole,
)

if TYPE_CHECKING:
    from hostd.core.assistants import AssistantCatalog, AssistantConfig, RolesConfig
    from hostd.core.options import SessionOptions
    from hostd.shell.drivers.supervisor import Supervisor
    from hostd.shell.hooks import ObserverChain, UsageAccounting
    from hostd_protocol.driver_spec import DriverSpec

log = logging.getLogger(__name__)

#: Client transcripts waiting for their turn; older ones are dropped beyond this many (a
#: transcript whose message was deduplicated or discarded would otherwise stay forever).
MAX_PENDING_TRANSCRIPTS = 256
#: What `continue` sends when the failed turn had already answered part of its input.
CONTINUE_PROMPT = "Continue exactly where you stopped; do not repeat what you already wrote."


# --- configuration, read once per change -------------------------------------------------------


@dataclass(frozen=True)
class _Loaded:
    stamp: tuple[tuple[str, int, int], ...]
    catalog: AssistantCatalog
    roles: RolesConfig | ConfigError


class ConfigCache:
    """`<config>/assistants/*.toml` and `roles.toml`, parsed again only when a file's mtime,
    size or the set of files changed. Parsing runs on a worker thread (`load`); the stamps
    are taken on the trio thread (`cached`); `load_sync` is for the CLI and tests."""

    #: Seconds a look at the files' stamps holds for `load` (an edit shows from the next
    #: turn that starts this long after the last look).
    FRESH_FOR = 0.5

    def __init__(self, config_dir: Path) -> None:
        self.config_dir = config_dir
        self._loaded: _Loaded | None = None
        self._checked_at = -math.inf
        self.reads = 0  # how many times the files were parsed (tests check the cache)

    def _stamp(self) -> tuple[tuple[str, int, int], ...]:
        files = sorted((self.config_dir / "assistants").glob("*.toml"))
        files.append(self.config_dir / "roles.toml")
        out: list[tuple[str, int, int]] = []
        for f in files:
            try:
                s = f.stat()
            except OSError:
                continue
            out.append((f.name, s.st_mtime_ns, s.st_size))
        return tuple(out)

    def load_sync(self) -> _Loaded:
        from hostd.shell.config import load_assistants, load_roles

        stamp = self._stamp()
        self._checked_at = time.monotonic()
        loaded = self._loaded
        if loaded is not None and loaded.stamp == stamp:
            return loaded
        self.reads += 1
        roles: RolesConfig | ConfigError
        try:
            roles = load_roles(self.config_dir)
        except ConfigError as exc:
            roles = exc
        loaded = self._loaded = _Loaded(stamp, load_assistants(self.config_dir), roles)
        return loaded

    async def load(self, assistant: str) -> tuple[AssistantConfig, RolesConfig]:
        """Assistant `assistant` ("" = default) and the roles; `ConfigError` names the file.

        Goes to a worker thread only when a file changed (see `cached`)."""
        cached = self.cached(assistant)
        if cached is not None:
            return cached
        return _pick(await trio.to_thread.run_sync(self.load_sync), assistant)

    async def current(self) -> tuple[AssistantCatalog, RolesConfig | ConfigError]:
        """Every assistant (and each broken file's error) and the roles (or their error), as
        the files are now; parsed on a worker thread only when a file changed. The stamps are
        always taken (a listing is rare; a window must see a file added a moment ago)."""
        loaded = self._loaded
        if loaded is None or self._stamp() != loaded.stamp:
            loaded = await trio.to_thread.run_sync(self.load_sync)
        return loaded.catalog, loaded.roles

    def cached(self, assistant: str) -> tuple[AssistantConfig, RolesConfig] | None:
        """The config as parsed, if no file changed since and it has this assistant; None:
        parse the files again (`load`, on a worker thread).

        A look older than `FRESH_FOR` takes the files' stamps again here, on the trio
        thread: a directory listing and a few `stat`s of the user's own config folder cost
        microseconds, while a worker-thread hop for them cost a send milliseconds on a busy
        machine (docs/benchmarks.md, issue 22). Only parsing goes to the thread."""
        loaded = self._loaded
        if loaded is None:
            return None
        if time.monotonic() - self._checked_at > self.FRESH_FOR:
            if self._stamp() != loaded.stamp:
                return None
            self._checked_at = time.monotonic()
        try:
            return _pick(loaded, assistant)
        except ConfigError:
            return None

    def assistant_sync(self, assistant: str) -> AssistantConfig:
        return _pick(self.load_sync(), assistant)[0]

    def configured_refs(self) -> frozenset[str]:
        """The `${NAME}` references in the assistant files' options (names the local user
        allows options to refer to; `hostd.shell.drivers.secrets`)."""
        from hostd_protocol.secret_refs import references

        loaded = self._loaded if self._loaded is not None else self.load_sync()
        names: set[str] = set()
        for config in loaded.catalog.assistants.values():
            names |= references(dict(config.options))
        return frozenset(names)

    def secrets(self) -> dict[str, str]:
        """`<config>/secrets.env` (`hostd.shell.drivers.secrets.read_secrets`)."""
        from hostd.shell.drivers.secrets import read_secrets

        return read_secrets(self.config_dir)

    def configured_values(self, option: str) -> tuple[Any, ...]:
        """The values driver option `option` has in the assistant files (what the local user
        chose; `hostd.shell.drivers.window_options`); `"TABLE.NAME"`: the values entry NAME
        of table option TABLE has (`env.ANTHROPIC_BASE_URL`). The files as last parsed: a
        turn or a topic's creation loads them first."""
        loaded = self._loaded if self._loaded is not None else self.load_sync()
        table, _, key = option.partition(".")  # "env.NAME": an entry of a table option
        values = (
            config.options.get(option) if not key else _entry(config.options.get(table), key)
            for config in loaded.catalog.assistants.values()
        )
        return tuple(v for v in values if v is not None and v != "")


def _entry(table: Any, key: str) -> Any:
    return table.get(key) if isinstance(table, dict) else None


def _pick(loaded: _Loaded, assistant: str) -> tuple[AssistantConfig, RolesConfig]:
    if isinstance(loaded.roles, ConfigError):
        raise loaded.roles
    return loaded.catalog.get(assistant), loaded.roles


# --- daemon-wide services ----------------------------------------------------------------------


class TurnServices:
    """What every topic's turns share (see the module docstring).

    Args:
        config_dir: Holds `assistants/*.toml` and `roles.toml`.
        workspaces: The one working-directory root.
        supervisor: Opens and closes driver sessions (delegated children's too).
        writer: Where the steps of ended turns go.
        observers: Plugin observers; None: the `hostd.hooks` entry points, found at first use.
    """

    def __init__(
        self,
        config_dir: Path,
        workspaces: Path,
        supervisor: Supervisor,
        writer: st.StoreWriter,
        *,
        observers: ObserverChain | None = None,
        daemon_uid: int | None = None,
    ) -> None:
        self.config = ConfigCache(config_dir)
        self.workspaces = workspaces
        #: Standalone workspaces (the `workspace` option): `<data>/standalone`.
        self.standalone = Workspaces(str(workspaces.parent / "standalone"))
        self.supervisor = supervisor
        self.writer = writer
        self._observers = observers
        self._daemon_uid = os.getuid() if daemon_uid is None else daemon_uid
        self._usage: UsageAccounting | None = None
        self._transcripts: OrderedDict[tuple[str, str], list[HistoryMessage]] = OrderedDict()
        self._calls_send, self._calls_recv = trio.open_memory_channel[
            tuple[Callable[..., Awaitable[Any]], tuple[Any, ...]]
        ](math.inf)

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run observer calls one at a time, in order (they never slow the stream)."""
        task_status.started()
        async for fn, args in self._calls_recv:
            try:
                await fn(*args)
            except Exception:  # ObserverChain isolates observers; this is belt and braces
                log.exception("observer call failed")

    @property
    def observers(self) -> ObserverChain:
        if self._observers is None:
            from hostd.shell.hooks import ObserverChain, discover_observers

            self._observers = ObserverChain(discover_observers())
        return self._observers

    @observers.setter
    def observers(self, chain: ObserverChain) -> None:
        self._observers = chain

    @property
    def usage(self) -> UsageAccounting:
        if self._usage is None:
            from hostd.shell.hooks import UsageAccounting

            self._usage = UsageAccounting()
        return self._usage

    def notify(self, method: str, args: tuple[Any, ...]) -> None:
        chain = self.observers
        if chain.observers:
            calls: dict[str, Callable[..., Awaitable[Any]]] = {
                "turn_start": chain.turn_start,
                "turn_finish": chain.turn_finish,
                "step": chain.step,
                "tool": chain.tool,
                "usage": chain.usage,
            }
            self._calls_send.send_nowait((calls[method], args))

    def seed_usage(self, stored: Sequence[tuple[str, str, Usage]]) -> None:
        """The usage a previous daemon stored per turn (before any event of this one)."""
        from hostd.shell.hooks import TurnInfo

        for topic_id, turn_id, usage in stored:
            self.usage.usage(TurnInfo(topic_id=topic_id, turn_id=turn_id, assistant=""), usage)

    def observe(self, topic_id: str, event: TopicEvent) -> None:
        """Every emitted event (synchronous, inside `TopicHost.apply`): usage accounting,
        kept per turn in the store too (batched, not durable: a later figure of the same
        turn replaces it), so `hostd usage` survives a restart."""
        if isinstance(event, UsageUpdated):
            from hostd.shell.hooks import TurnInfo

            self.writer.put(st.PutTurnUsage(topic_id, event.turn_id, event.usage))
            info = TurnInfo(topic_id=topic_id, turn_id=event.turn_id, assistant="")
            self.usage.usage(info, event.usage)
            self.notify("usage", (info, event.usage))

    # --- permission, transcripts, continue ---------------------------------------------------

    def check(self, uid: int | None, topic: TopicInfo, profile: str = "") -> None:
        """Same user as the daemon and, if the topic is bound to a profile, that profile;
        raises `PermissionDenied` (before anything is stored)."""
        who = self._daemon_uid if uid is None else uid
        if who != self._daemon_uid:
            raise PermissionDenied(
                f"uid {who} may not use topic {topic.id} (the daemon runs as uid "
                f"{self._daemon_uid})",
                details={"topic_id": topic.id},
            )
        owner = topic.options.get("profile")
        if isinstance(owner, str) and owner and profile and owner != profile:
            raise PermissionDenied(
                f"topic {topic.id} belongs to profile {owner!r}, not {profile!r}",
                details={"topic_id": topic.id},
            )

    def remember_history(
        self, topic_id: str, client_msg_id: str, history: Sequence[HistoryMessage]
    ) -> None:
        """Keep a client's transcript until the turn of message `client_msg_id` starts."""
        if not history or not client_msg_id:
            return
        key = (topic_id, client_msg_id)
        self._transcripts[key] = list(history)
        self._transcripts.move_to_end(key)
        while len(self._transcripts) > MAX_PENDING_TRANSCRIPTS:
            self._transcripts.popitem(last=False)

    def forget_history(self, topic_id: str, client_msg_id: str) -> None:
        """The send that remembered this transcript was refused: release it now."""
        self._transcripts.pop((topic_id, client_msg_id), None)

    def take_transcript(self, topic_id: str, row: MessageRow | None) -> list[HistoryMessage]:
        client_msg_id = row.meta.get("client_msg_id", "") if row is not None else ""
        if not client_msg_id:
            return []
        return self._transcripts.pop((topic_id, client_msg_id), [])

    async def resolve_driver(self, assistant: str, model: str = "", profile: str = "") -> str:
        """The driver a new topic of `assistant` ("" = default) with no driver of its own
        would run on. Raises `ConfigError` / `UnresolvedRole` (nothing configured)."""
        from hostd.core.connector import resolve_connector

        config, roles = await self.config.load(assistant)
        return resolve_connector(config, roles, profile=profile, topic_model=model).driver

    async def check_model(
        self, spec: DriverSpec, assistant: str, driver: str, model: str
    ) -> None:
        """Refuse now (`InvalidArgument`) a topic or an extra answer on `spec` that would
        run with no model while the driver needs one (`DriverSpec.needs_model`): its own
        `model`, its assistant's, or its role's. A role that does not resolve is refused (or
        defaulted) where the driver is chosen, not here."""
        if not spec.needs_model:
            return
        from hostd.core.connector import resolve_connector

        config, roles = await self.config.load(assistant)
        try:
            connector = resolve_connector(config, roles, topic_driver=driver, topic_model=model)
        except UnresolvedRole:
            return
        if connector.driver == spec.name and not connector.model:
            raise InvalidArgument(
                f"driver {spec.name!r} needs a model, and neither the topic nor its assistant "
                "or role names one: give the topic a model (or an assistant with one)",
                details={"driver": spec.name, "field": "model"},
            )

    async def session_options(self, topic: TopicInfo) -> SessionOptions:
        """The options the topic's own session opens with (prewarm uses them too)."""
        from hostd.core.options import session_options

        assistant, roles = await self.config.load(topic.assistant)
        return session_options(topic, assistant, roles, str(self.workspaces))


def continue_text(turns: Sequence[Any], rows: Sequence[MessageRow]) -> str:
    """What to send to continue the topic's last turn, which must have failed or stopped.

    `turns` are the store's turn records (oldest first, with `id`, `status`, `resume_text`);
    `rows` the topic's rows. A turn that had answered part of its input is asked to continue;
    one that had not is sent again as it was; one without resume data (the daemon was killed
    mid-turn) has its input row sent again.
    """
    from hostd.core.turn_record import decode_resume

    last = next((t for t in reversed(turns) if t.status is not None), None)
    if last is None or last.status == "success":
        state = "the topic has no turn yet" if last is None else "its last turn succeeded"
        raise NotFound(
            f"nothing to continue: {state} (continue resumes a turn that failed or was "
            "stopped)",
            details={"turn_id": last.id if last is not None else ""},
        )
    if last.resume_text:
        resume = decode_resume(last.resume_text)
        if resume is not None:
            return CONTINUE_PROMPT if resume.partial else resume.text
    mine = [r for r in rows if r.turn_id == last.id]
    answered = any(
        r.role == "assistant" and any(isinstance(p, TextDelta) and p.text for p in r.parts)
        for r in mine
    )
    if answered:
        return CONTINUE_PROMPT
    if last.resume_text:
        return str(last.resume_text)
    asked = "".join(
        p.text for r in mine if r.role == "user" for p in r.parts if isinstance(p, TextDelta)
    )
    if asked.strip():
        return asked
    raise NotFound(
        f"nothing to continue: the last turn ended {last.status} and kept neither its "
        "input nor a partial answer; send the message again",
        details={"turn_id": last.id},
    )


__all__ = [
    "CONTINUE_PROMPT",
    "MAX_PENDING_TRANSCRIPTS",
    "ConfigCache",
    "TurnServices",
    "continue_text",
]
