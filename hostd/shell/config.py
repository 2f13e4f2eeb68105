"""Reading the assistant and role files (`<config>/assistants/*.toml`, `<config>/roles.toml`).

The parsing is `hostd.core.assistants` (pure); this module is the file I/O around it.
"""

from __future__ import annotations

from pathlib import Path

from hostd.core.assistants import (
    AssistantCatalog,
    AssistantConfig,
    RolesConfig,
    parse_assistant,
    parse_roles,
)
from hostd.shell.paths import read_trusted_text
from hostd_protocol.errors import ConfigError


def load_assistant_file(file: Path) -> AssistantConfig:
    """Load one assistant file; raises `ConfigError` naming file and line."""
    try:
        text = read_trusted_text(file)
    except ConfigError as exc:
        exc.details["assistant"] = file.stem
        raise
    except OSError as exc:
        raise ConfigError(
            f"{file}: cannot read: {exc}", details={"file": str(file), "assistant": file.stem}
        ) from None
    return parse_assistant(file.stem, text, file)


def load_assistants(config_dir: Path) -> AssistantCatalog:
    """Every `<config_dir>/assistants/*.toml`, sorted by name; a missing dir is no assistants."""
    folder = config_dir / "assistants"
    loaded: dict[str, AssistantConfig] = {}
    errors: list[ConfigError] = []
    if folder.is_dir():
        for file in sorted(folder.glob("*.toml")):
            try:
                loaded[file.stem] = load_assistant_file(file)
            except ConfigError as exc:
                errors.append(exc)
    return AssistantCatalog(assistants=loaded, errors=errors)


def load_roles(config_dir: Path) -> RolesConfig:
    """`<config_dir>/roles.toml`, or an empty config when the file does not exist."""
    file = config_dir / "roles.toml"
    try:
        text = read_trusted_text(file)
    except FileNotFoundError:
        return RolesConfig(source=str(file))
    except OSError as exc:
        raise ConfigError(f"{file}: cannot read: {exc}", details={"file": str(file)}) from None
    return parse_roles(text, file)
