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
    yield ensure_workdir(path, topic, assistant)


def ensure_workdir(path: Path, topic: TopicInfo, assistant: AssistantConfig) -> Path:
    """`path`, created if missing; `ConfigError` saying what to change when it cannot be used
    (a file is in the way, no permission, ...)."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        fixed = assistant.workdir.policy == "fixed"
        where = f"assistant {assistant.name!r} ({assistant.source})" if fixed else f"topic {topic.id}"
        raise ConfigError(
            f"working directory {str(path)!r} cannot be used: {exc.strerror or exc}; "
            f"set another working directory for {where}",
            details={"path": str(path), "topic_id": topic.id},
        ) from exc
    return path
