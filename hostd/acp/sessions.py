"""One ACP session of `hostd acp` (= one topic) and its prompts: the state that outlives
any one daemon connection (sans-IO but for the trio events prompts are waited on).

Rules this module guards: a prompt is finished once (its first outcome wins); a session
remembers the last seq and the rows it showed, so a new connection re-attaches where the
last one ended and a fresh snapshot shows only what the editor has not seen.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import trio

from hostd_protocol.client_messages import DriverInfo, MessageRow, TopicInfo, TurnEnded
from hostd_protocol.common import SendIntent, TurnStatus

__all__ = ["OURS", "AgentDefaults", "Prompt", "Session", "note", "ours"]

#: Our sends' client_msg_id prefix: the editor already shows what it sent.
OURS = "acp:"


@dataclass(frozen=True)
class AgentDefaults:
    """What `session/new` uses when `_meta.hostd` names nothing (the command's flags)."""

    assistant: str = ""
    driver: str = ""
    model: str = ""
    #: The intent of a prompt sent while a turn runs.
    busy_intent: SendIntent = "steer"


@dataclass
class Prompt:
    """One `session/prompt` waiting for the end of the turn that carries its message."""

    key: str
    row_id: str = ""
    turn_id: str = ""
    done: trio.Event = field(default_factory=trio.Event)
    status: TurnStatus = "success"
    error: str = ""
    #: The editor withdrew the request (`$/cancel_request`): its turn is stopped once.
    withdrawn: bool = False
    stop_sent: bool = False

    def finish(self, status: TurnStatus, error: str = "") -> None:
        if not self.done.is_set():
            self.status, self.error = status, error
            self.done.set()


class Session:
    """One ACP session = one topic, attached for as long as this process runs."""

    def __init__(self, topic: TopicInfo, driver: DriverInfo | None) -> None:
        self.topic_id = topic.id
        self.driver = driver.name if driver else topic.driver
        #: The driver hands images to its model (`DriverSpec.images`): image blocks pass.
        self.images = bool(driver and driver.images)
        #: The driver's modes (`DriverSpec.modes`), the send option they travel in, the
        #: current one (the topic's option, else the driver's first).
        self.modes = list(driver.modes) if driver else []
        self.mode_key = driver.mode_option if driver and self.modes else ""
        self.mode_ids = [m.id for m in self.modes]
        current = topic.options.get(self.mode_key) if self.mode_key else None
        self.mode = current if current in self.mode_ids else (self.mode_ids or [""])[0]
        self.prompts: dict[str, Prompt] = {}
        #: Turns that ended, so a prompt whose reply comes after its turn's end still finds it.
        self.ended: dict[str, TurnEnded] = {}
        #: Approvals the editor is being asked about, each with the scope of its pending
        #: request (cancelled: the request is withdrawn, hostd/acp/approvals.py).
        self.asking: dict[str, trio.CancelScope] = {}
        self.live = trio.Event()
        self.replayed = trio.Event()
        self.gone = False
        #: The scope of the task forwarding its events now (cancelled when the editor
        #: withdraws the request that opened it).
        self.follow: trio.CancelScope | None = None
        #: The last event seq forwarded (a new connection attaches with `since=` it), and
        #: the rows the editor was shown (a fresh snapshot after a restart shows the rest).
        self.seq = 0
        self.shown: set[str] = set()


def ours(row: MessageRow) -> bool:
    """A user row this process sent for the editor (it shows its prompts itself)."""
    return row.role == "user" and str(row.meta.get("client_msg_id", "")).startswith(OURS)


def note(text: str, code: str) -> dict[str, Any]:
    """A line for the editor's transcript (ACP has no session notice): an agent message."""
    return {"sessionUpdate": "agent_message_chunk",
            "content": {"type": "text", "text": f"\n\n_{text}._\n\n"},
            "_meta": {"hostd": {"notice": code}}}
