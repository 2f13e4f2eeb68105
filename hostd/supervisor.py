"""The driver supervisor: one driver subprocess per active topic, warm spares, timers.

Skeleton committed early so the daemon core can code against the API; bodies follow.
See docs/internal-contracts.md ("Supervisor") for the contract.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec
import trio

from hostd.driver_process import DriverSession, SessionEnded
from hostd.driver_registry import DriverRegistry

__all__ = [
    "DriverSession",
    "SessionEnded",
    "SessionOptions",
    "Supervisor",
    "SupervisorStatistics",
]

_KEY_ENCODER = msgspec.json.Encoder(order="sorted")


@dataclass(frozen=True)
class SessionOptions:
    """What a driver session is opened with. Equal keys mean interchangeable processes."""

    driver: str
    model: str = ""
    working_dir: str = ""
    system_prompt: str = ""
    #: Driver options (`Init.options`); part of the warm key.
    options: Mapping[str, Any] = field(default_factory=dict)
    #: Environment for this driver only (API keys). Never logged, not in `repr`; the key holds
    #: only a fingerprint, so new credentials invalidate warm processes.
    secrets: Mapping[str, str] = field(default_factory=dict, repr=False)

    def secrets_fingerprint(self) -> str:
        """A short hash of the secrets (names and values), safe to log and compare."""
        if not self.secrets:
            return ""
        digest = hashlib.sha256(_KEY_ENCODER.encode(dict(self.secrets))).hexdigest()
        return digest[:16]

    def key(self) -> str:
        """The warm-pool key: driver, model, working dir, prompt, options, secrets' fingerprint."""
        body = _KEY_ENCODER.encode(
            {
                "driver": self.driver,
                "model": self.model,
                "working_dir": self.working_dir,
                "system_prompt": self.system_prompt,
                "options": dict(self.options),
                "secrets": self.secrets_fingerprint(),
            }
        )
        return f"{self.driver}:{hashlib.sha256(body).hexdigest()[:24]}"


@dataclass(frozen=True)
class SupervisorStatistics:
    """A snapshot of the supervisor's bookkeeping (trio's `statistics()` convention)."""

    sessions: int = 0
    connecting: int = 0
    warm: int = 0
    spawned: int = 0
    warm_hits: int = 0
    warm_misses: int = 0
    crashed: int = 0
    idle_closed: int = 0


class Supervisor:
    """Starts, shares, times out and reaps driver processes. Owns every one of them."""

    def __init__(
        self,
        registry: DriverRegistry,
        *,
        base_env: Mapping[str, str] | None = None,
        idle_ttl: float = 300.0,
        warm_ttl: float = 300.0,
        max_warm: int = 4,
        handshake_timeout: float = 15.0,
        workdir_root: str | None = None,
    ) -> None:
        raise NotImplementedError

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        raise NotImplementedError

    async def open(
        self, topic_id: str, opts: SessionOptions, resume_token: str | None = None
    ) -> DriverSession:
        raise NotImplementedError

    def mark_idle(self, topic_id: str) -> None:
        raise NotImplementedError

    def mark_busy(self, topic_id: str) -> None:
        raise NotImplementedError

    async def prewarm(
        self, opts: SessionOptions, resume_token: str | None = None, *, topic_id: str = ""
    ) -> None:
        raise NotImplementedError

    async def close(self, topic_id: str) -> None:
        raise NotImplementedError

    def statistics(self) -> SupervisorStatistics:
        raise NotImplementedError

    async def aclose(self) -> None:
        raise NotImplementedError
