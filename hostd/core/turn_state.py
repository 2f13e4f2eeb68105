"""The turn machine's state: its phases (`Phase`, the rows of `hostd.core.turn.TABLE`), its
frames (the root assistant and delegated children), and its limits."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from hostd.core.assistants import AssistantConfig
from hostd.core.options import SessionOptions
from hostd_protocol.common import Capabilities, HistoryMessage

#: A next hook may continue one turn this many times.
MAX_CONTINUES = 8
#: A failed driver step may run again this many times (when an observer asks).
MAX_RETRIES = 3


class Phase(enum.Enum):
    """Where a turn is. Each phase but the last two waits for one effect's result."""

    CONFIG = "config"  # LoadConfig out: the frame's assistant and the roles
    CREATE_HOOK = "create_hook"  # RunHook(create) out
    OPENING = "opening"  # OpenSession out
    PREPARING = "preparing"  # PrepareStep out: the observers decide what the step sends
    DRIVING = "driving"  # SendToDriver out: the driver answers until its TurnEnd
    RETRY = "retry"  # AskRetry out: run the failed step again?
    NEXT_HOOK = "next_hook"  # RunHook(next) out
    ENDING = "ending"  # EndTurn out: waiting for the runtime's TurnEnded
    ENDED = "ended"  # steps saved; every input is ignored


# --- frames -----------------------------------------------------------------------------------


@dataclass
class Frame:
    """The root assistant (depth 0) or a delegated child of the turn."""

    assistant_name: str
    depth: int
    text: str
    options: dict[str, Any]
    history: list[HistoryMessage]
    key: str
    assistant: AssistantConfig | None = None
    session: SessionOptions | None = None
    capabilities: Capabilities | None = None
    continues: int = 0


class TurnStateError(RuntimeError):
    """An input the table does not know (a bug in the shell); nothing was changed."""


__all__ = ["MAX_CONTINUES", "MAX_RETRIES", "Frame", "Phase", "TurnStateError"]
