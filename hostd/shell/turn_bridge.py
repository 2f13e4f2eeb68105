"""The turn pipeline's steps for the daemon, where the topic runtime owns each turn.

In the daemon a turn's start and end (`TurnStarted` / `TurnEnded`, `SaveTurn`, resume text)
belong to `TopicRuntime`, which already guarantees one start and one end per turn. The
pipeline's other steps plug into the daemon at four small seams, each one function here that
the daemon core calls:

| step | seam | function |
|---|---|---|
| 1 permission | `Daemon._send` / `_continue`, before `runtime.send` (refusal stores nothing) | `TurnBridge.check` |
| 3, 6, 8 options, connector, workdir | `TopicHost(session_options=...)`, when a session opens | `TurnBridge.session_options` |
| 7 history (window + client transcript, overlap removed) | `TopicHost(prepare_send=...)`, before `Send` goes out | `TurnBridge.remember_history`, `TurnBridge.prepare_send` |
| continue a failed/stopped turn | `Daemon._continue` | `TurnBridge.continue_text` |
| usage accounting | `TopicHost(observe=...)` for every emitted event | `TurnBridge.observe` |

Create/next hooks, delegation, steps and plugin observers are `hostd.shell.daemon_turns`
(`TopicHost(turns=...)`). Not wired: per-turn ephemeral directories (a daemon session outlives
a turn, so an ephemeral directory lives as long as the session).
"""

from __future__ import annotations

import logging
import os
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from hostd_protocol.client_messages import MessageRow, TopicEvent, TopicInfo, UsageUpdated
from hostd_protocol.common import Capabilities, HistoryMessage, TextDelta, Usage
from hostd_protocol.driver_messages import Send
from hostd_protocol.errors import NotFound

# The pipeline's modules (assistants, connector, history, hooks, turn_pipeline: ~65 ms of
# imports) load at first use, not at import: the daemon needs none of them before its socket
# is ready (start-to-ready is a benchmark target, docs/benchmarks.md "cli").
if TYPE_CHECKING:
    from hostd.core.assistants import AssistantCatalog, AssistantConfig
    from hostd.shell.drivers.supervisor import SessionOptions
    from hostd.shell.hooks import UsageAccounting
    from hostd.shell.turn_pipeline import PermissionCheck

log = logging.getLogger(__name__)

#: Client transcripts waiting for their turn; older ones are dropped beyond this many (a
#: transcript whose message was deduplicated or discarded would otherwise stay forever).
MAX_PENDING_TRANSCRIPTS = 256


class TurnBridge:
    """The pipeline's per-turn steps as small calls for the daemon core (see module doc).

    Args:
        config_dir: Holds `assistants/*.toml` and `roles.toml`; re-read at every session
            open, so an edited assistant applies from the next session on.
        workspaces: Base of per-topic (and ephemeral) working directories.
        permission: Step 1's check; defaults to "same uid as the daemon, and the topic's
            profile if it has one".
    """

    def __init__(
        self,
        config_dir: Path,
        workspaces: Path,
        *,
        permission: PermissionCheck | None = None,
        usage: UsageAccounting | None = None,
    ) -> None:
        self.config_dir = config_dir
        self.workspaces = workspaces
        self._permission = permission
        self._usage = usage
        self._transcripts: OrderedDict[tuple[str, str], list[HistoryMessage]] = OrderedDict()

    @property
    def permission(self) -> PermissionCheck:
        if self._permission is None:
            from hostd.shell.turn_pipeline import default_permission

            self._permission = default_permission()
        return self._permission

    @property
    def usage(self) -> UsageAccounting:
        if self._usage is None:
            from hostd.shell.hooks import UsageAccounting

            self._usage = UsageAccounting()
        return self._usage

    # --- config -----------------------------------------------------------------------------

    def catalog(self) -> AssistantCatalog:
        from hostd.shell.config import load_assistants

        return load_assistants(self.config_dir)

    def assistant(self, name: str) -> AssistantConfig:
        """The assistant `name` ("" = default); `ConfigError` names file and line if broken."""
        return self.catalog().get(name)

    # --- step 1 -----------------------------------------------------------------------------

    def check(self, uid: int | None, topic: TopicInfo, profile: str = "") -> None:
        """Raise `PermissionDenied` unless this identity may use the topic."""
        from hostd.shell.turn_pipeline import Identity

        self.permission(Identity(uid=os.getuid() if uid is None else uid, profile=profile), topic)

    # --- steps 3, 6, 8 ----------------------------------------------------------------------

    def resolve_driver(self, assistant: str, model: str = "", profile: str = "") -> str:
        """The driver a new topic of `assistant` ("" = default) with no driver of its own
        would run on. Raises `ConfigError` / `UnresolvedRole` (nothing configured)."""
        from hostd.core.connector import resolve_connector
        from hostd.shell.config import load_roles

        connector = resolve_connector(
            self.assistant(assistant), load_roles(self.config_dir), profile=profile,
            topic_model=model,
        )
        return connector.driver

    def session_options(self, topic: TopicInfo, profile: str = "") -> SessionOptions:
        """The driver session for a topic: its assistant's connector (explicit topic
        driver/model first, then `use::<role>`), options (assistant < topic; per-send ones
        travel in each `Send`), system prompt and working directory (created if missing).

        Raises `ConfigError` / `UnresolvedRole`; the host reports it as a failed turn.
        """
        from hostd.core.connector import resolve_connector
        from hostd.shell.config import load_roles
        from hostd.shell.drivers.supervisor import SessionOptions
        from hostd.shell.turn_pipeline import merge_options, plan_workdir
        from hostd.shell.turn_workdir import ensure_workdir

        assistant = self.assistant(topic.assistant)
        connector = resolve_connector(
            assistant,
            load_roles(self.config_dir),
            profile=profile,
            topic_driver=topic.driver,
            topic_model=topic.model,
        )
        path, ephemeral = plan_workdir(assistant, topic, self.workspaces)
        if ephemeral:
            path = self.workspaces / "ephemeral" / topic.id
        assert path is not None
        ensure_workdir(path, topic, assistant)
        return SessionOptions(
            driver=connector.driver,
            model=connector.model,
            working_dir=str(path),
            system_prompt=assistant.system_prompt,
            options=merge_options(assistant.options, topic.options),
            state_dir=str(self.state_dir(topic.id)),
        )

    def state_dir(self, topic_id: str) -> Path:
        """The topic's private folder for its driver's own files (`Init.state_dir`): beside
        the workspaces, never in the working dir (which may be the user's project)."""
        return self.workspaces.parent / "driver-state" / topic_id

    # --- step 7 -----------------------------------------------------------------------------

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

    def prepare_send(
        self,
        topic: TopicInfo,
        send: Send,
        row: MessageRow | None,
        capabilities: Capabilities,
    ) -> Send:
        """The `Send` as the driver gets it: the assistant's history window over the stored
        history, merged with the transcript the client sent along (overlap removed)."""
        from hostd.core.history_overlap import history_window, merge_history

        client_msg_id = row.meta.get("client_msg_id", "") if row is not None else ""
        sent = self._transcripts.pop((topic.id, client_msg_id), []) if client_msg_id else []
        if not capabilities.needs_history:
            return send
        try:
            size = self.assistant(topic.assistant).history_size
        except Exception as exc:  # the session opened, so a config error now is only history
            log.warning("topic %s: assistant config unreadable, full history: %s", topic.id, exc)
            size = len(send.history)
        merged = merge_history(
            history_window(send.history, size), sent, send.text, text_id=send.message_id
        )
        return msgspec.structs.replace(send, history=merged.messages)

    # --- continue ----------------------------------------------------------------------------

    def continue_text(self, turns: Sequence[Any], rows: Sequence[MessageRow]) -> str:
        """What to send to continue the topic's last turn, which must have failed or stopped.

        `turns` are the store's turn records (oldest first, with `id`, `status`,
        `resume_text`); `rows` the topic's rows. A turn that had answered part of its input
        is asked to continue; one that had not is sent again as it was.
        """
        from hostd.core.turn_record import decode_resume
        from hostd.shell.turn_pipeline import CONTINUE_PROMPT

        last = next((t for t in reversed(turns) if t.status is not None), None)
        if last is None or last.status == "success":
            state = "the topic has no turn yet" if last is None else "its last turn succeeded"
            raise NotFound(
                f"nothing to continue: {state} (continue resumes a turn that failed or was "
                "stopped)",
                details={"turn_id": getattr(last, "id", "")},
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
        # No resume data (e.g. the daemon was killed mid-turn): send the turn's input again.
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

    # --- observers ---------------------------------------------------------------------------

    def seed_usage(self, stored: Sequence[tuple[str, str, Usage]]) -> None:
        """The usage a previous daemon stored per turn (before any event of this one)."""
        from hostd.shell.hooks import TurnInfo

        for topic_id, turn_id, usage in stored:
            self.usage.usage(TurnInfo(topic_id=topic_id, turn_id=turn_id, assistant=""), usage)

    def observe(self, topic_id: str, event: TopicEvent) -> None:
        """Feed emitted events to the built-in usage accounting (sync: runs inside `apply`)."""
        if isinstance(event, UsageUpdated):
            from hostd.shell.hooks import TurnInfo

            self.usage.usage(
                TurnInfo(topic_id=topic_id, turn_id=event.turn_id, assistant=""), event.usage
            )
