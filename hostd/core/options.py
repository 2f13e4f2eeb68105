"""Session options: the one function that builds them, and the rules of merging.

Rules this module guards:

- `session_options` is the only place a driver session's options are built (the topic's own
  session and a delegated child's alike): connector (explicit driver/model, else
  `use::<role>`), options merged assistant < topic (per-send ones travel in each `Send`),
  system prompt, working directory.
- One working-directory root (`workspaces`): per-topic directories are `<root>/<topic id>`,
  ephemeral ones `<root>/ephemeral/<topic id>[-<assistant>]`; the driver's own files go to
  `state_dir(workspaces, topic)` beside it (`<data>/driver-state/<topic id>`), never into
  the working dir (which may be the user's project). A fixed path or the topic's own
  `working_dir` is used as given; the shell expands `~` and creates the directory.
- Option layers merge later-wins; `metadata` merges key by key; `None` removes a key.
- Pure: no file is touched here (the shell creates the directory it is told).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any

import msgspec

from hostd_protocol.errors import InvalidArgument

if TYPE_CHECKING:  # kept light: the supervisor imports SessionOptions at daemon start
    from hostd.core.assistants import AssistantConfig, RolesConfig
    from hostd_protocol.client_messages import TopicInfo

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
    #: The topic's private folder for the driver's own files (`Init.state_dir`); part of the
    #: key, so two topics in one working dir never share a driver's files.
    state_dir: str = ""

    def secrets_fingerprint(self) -> str:
        """A short hash of the secrets (names and values), safe to log and compare."""
        if not self.secrets:
            return ""
        digest = hashlib.sha256(_KEY_ENCODER.encode(dict(self.secrets))).hexdigest()
        return digest[:16]

    def key(self) -> str:
        """The warm-pool key: driver, model, working dir, prompt, options, secrets' fingerprint.

        Raises `InvalidArgument` when the options are not plain data (they must go into
        `Init` on the wire anyway).
        """
        try:
            body = _KEY_ENCODER.encode(
                {
                    "driver": self.driver,
                    "model": self.model,
                    "working_dir": self.working_dir,
                    "system_prompt": self.system_prompt,
                    "options": dict(self.options),
                    "secrets": self.secrets_fingerprint(),
                    "state_dir": self.state_dir,
                }
            )
        except (TypeError, msgspec.EncodeError) as exc:
            raise InvalidArgument(
                f"options of driver {self.driver!r} are not plain data: {exc}"
            ) from None
        return f"{self.driver}:{hashlib.sha256(body).hexdigest()[:24]}"


def merge_options(*layers: Mapping[str, Any]) -> dict[str, Any]:
    """Merge option layers, later ones winning (assistant < topic < send).

    `metadata` is merged key by key rather than replaced, so a send that adds one metadata
    key does not drop the assistant's others. A `None` value removes the key.
    """
    out: dict[str, Any] = {}
    for layer in layers:
        for key, value in layer.items():
            if value is None:
                out.pop(key, None)
            elif key == "metadata" and isinstance(value, Mapping):
                base = out.get("metadata")
                out["metadata"] = {**(base if isinstance(base, Mapping) else {}), **value}
            else:
                out[key] = value
    return out


def plan_workdir(
    assistant: AssistantConfig, topic: TopicInfo, workspaces: str, *, child: bool = False
) -> str:
    """The working directory of a session of `assistant` in `topic` (not created here).

    A delegated child (`child=True`) does not inherit the topic's own directory choice
    unless its assistant is per-topic: it runs where its assistant says.
    """
    policy = assistant.workdir.policy
    if policy == "fixed":
        return assistant.workdir.path
    if policy == "ephemeral":
        suffix = f"-{assistant.name}" if child else ""
        return f"{workspaces}/ephemeral/{topic.id}{suffix}"
    if topic.working_dir:
        return topic.working_dir
    return f"{workspaces}/{topic.id}"


def state_dir(workspaces: str, topic_id: str) -> str:
    """The topic's private folder for its driver's own files (`Init.state_dir`)."""
    return str(PurePosixPath(workspaces).parent / "driver-state" / topic_id)


def session_options(
    topic: TopicInfo,
    assistant: AssistantConfig,
    roles: RolesConfig,
    workspaces: str,
    *,
    profile: str = "",
    child: bool = False,
) -> SessionOptions:
    """The driver session for `assistant` in `topic` (see the module rules).

    The topic's explicit driver/model apply to its own assistant only; a delegated child
    (`child=True`) resolves its assistant's connector alone. Raises `UnresolvedRole`.
    """
    from hostd.core.connector import resolve_connector

    connector = resolve_connector(
        assistant,
        roles,
        profile=profile,
        topic_driver="" if child else topic.driver,
        topic_model="" if child else topic.model,
    )
    return SessionOptions(
        driver=connector.driver,
        model=connector.model,
        working_dir=plan_workdir(assistant, topic, workspaces, child=child),
        system_prompt=assistant.system_prompt,
        options=merge_options(assistant.options, topic.options),
        state_dir=state_dir(workspaces, f"{topic.id}-{assistant.name}" if child else topic.id),
    )


__all__ = ["SessionOptions", "merge_options", "plan_workdir", "session_options", "state_dir"]
