"""Step 8 of the turn pipeline: the turn's working directory (per topic, fixed, or ephemeral)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from hostd.core.assistants import AssistantConfig
from hostd_protocol.client_messages import TopicInfo
from hostd_protocol.errors import ConfigError


def plan_workdir(
    assistant: AssistantConfig, topic: TopicInfo, workspaces: Path
) -> tuple[Path | None, bool]:
    """(path, ephemeral): the turn's working directory; None + True means "make a temp dir"."""
    policy = assistant.workdir.policy
    if policy == "fixed":
        return Path(assistant.workdir.path).expanduser(), False
    if policy == "ephemeral":
        return None, True
    if topic.working_dir:
        return Path(topic.working_dir).expanduser(), False
    return workspaces / topic.id, False


@contextmanager
def turn_workdir(assistant: AssistantConfig, topic: TopicInfo, workspaces: Path) -> Iterator[Path]:
    """Step 8: the working directory, created if missing; an ephemeral one is removed after."""
    path, ephemeral = plan_workdir(assistant, topic, workspaces)
    if ephemeral:
        workspaces.mkdir(parents=True, exist_ok=True)
        temp = Path(tempfile.mkdtemp(prefix=f"ephemeral-{topic.id}-", dir=workspaces))
        try:
            yield temp
        finally:
            shutil.rmtree(temp, ignore_errors=True)
        return
    assert path is not None
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            f"cannot create working directory {path} for topic {topic.id} "
            f"(assistant {assistant.name!r}, {assistant.source or 'built-in'}): {exc}",
            details={"path": str(path)},
        ) from exc
    yield path
