"""Assistant and role configuration: `<config>/assistants/*.toml` and `<config>/roles.toml`.

Rules this module guards:

- An assistant is one TOML file; its name is the file's stem. Unknown keys are errors (a typo
  must not silently fall back to a default).
- Every error is a `ConfigError` whose message starts with `file:line:`. tomllib reports the
  line of a syntax error in its message; for a semantic error (wrong type, unknown key, bad
  value) we find the key's line ourselves (`key_line`), because tomllib keeps no positions.
- One bad assistant file never hides the good ones: `load_assistants` returns both.
- Pure: parsing only (the files are read by `hostd.shell.config`); no daemon state, no trio.

An assistant file::

    description = "Writes code"
    driver = "claude-code"           # optional when model is `use::<role>`
    model = "use::coding"            # a model name, or `use::<role>` (see roles.toml)
    system_prompt = "You are ..."
    history_size = 40                # stored messages sent to drivers that need history
    workdir = "per-topic"            # or "ephemeral", or { policy = "fixed", path = "~/src" }

    [options]                        # driver options (defaults; topics and sends override)
    permission_mode = "acceptEdits"

    [hooks]                          # optional python callables, "module:function"
    create = "my_hooks:on_create"
    next = "my_hooks:on_next"

roles.toml::

    [system]
    default = { driver = "claude-code", model = "claude-sonnet-4-5" }
    coding = { driver = "claude-code", model = "claude-opus-4-1" }

    [profiles.work]
    default = { driver = "openai", model = "gpt-5" }
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from hostd_protocol.errors import ConfigError

WorkdirPolicy = Literal["per-topic", "fixed", "ephemeral"]
WORKDIR_POLICIES: tuple[WorkdirPolicy, ...] = ("per-topic", "fixed", "ephemeral")

#: The prefix that makes a model name a role reference (resolved by `hostd.core.connector`).
ROLE_PREFIX = "use::"
DEFAULT_HISTORY_SIZE = 50
#: The assistant a topic without one uses. Its model is the `default` role, so a topic with
#: an explicit driver/model never needs a roles file.
DEFAULT_ASSISTANT_NAME = "default"

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_HOOK_RE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
_TOML_POS_RE = re.compile(r"\(at line (\d+), column (\d+)\)")
_ASSISTANT_KEYS = frozenset(
    {
        "description",
        "driver",
        "model",
        "system_prompt",
        "history_size",
        "workdir",
        "options",
        "hooks",
    }
)
_HOOK_KEYS = frozenset({"create", "next"})


# --- records ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Workdir:
    """Where a turn runs. `path` is used only by the `fixed` policy."""

    policy: WorkdirPolicy = "per-topic"
    path: str = ""


@dataclass(frozen=True)
class AssistantConfig:
    """One named assistant, as loaded from `<config>/assistants/<name>.toml`."""

    name: str
    description: str = ""
    driver: str = ""
    model: str = ""
    system_prompt: str = ""
    history_size: int = DEFAULT_HISTORY_SIZE
    workdir: Workdir = field(default_factory=Workdir)
    options: Mapping[str, Any] = field(default_factory=dict)
    create_hook: str = ""
    next_hook: str = ""
    #: The file it came from ("" for the built-in default), for error messages.
    source: str = ""

    @property
    def role(self) -> str | None:
        """The role name when `model` is `use::<role>`, else None."""
        if self.model.startswith(ROLE_PREFIX):
            return self.model[len(ROLE_PREFIX) :]
        return None


def default_assistant() -> AssistantConfig:
    """The assistant of a topic that names none: the `default` role, no prompt, no hooks."""
    return AssistantConfig(name=DEFAULT_ASSISTANT_NAME, model=ROLE_PREFIX + "default")


@dataclass(frozen=True)
class RoleTarget:
    """What a role maps to. Either part may be empty (a role may pick only a model)."""

    driver: str = ""
    model: str = ""


@dataclass(frozen=True)
class RolesConfig:
    """`roles.toml`: system roles and per-profile roles, each `role -> RoleTarget`."""

    system: Mapping[str, RoleTarget] = field(default_factory=dict)
    profiles: Mapping[str, Mapping[str, RoleTarget]] = field(default_factory=dict)
    source: str = ""


@dataclass(frozen=True)
class AssistantCatalog:
    """Every assistant file that loaded, and a `ConfigError` for each one that did not."""

    assistants: Mapping[str, AssistantConfig]
    errors: Sequence[ConfigError] = ()

    def get(self, name: str) -> AssistantConfig:
        """The assistant `name` ("" = the built-in default); raises `ConfigError` if unknown
        or if its file is broken (the error names file and line)."""
        if not name:
            return self.assistants.get(DEFAULT_ASSISTANT_NAME, default_assistant())
        if name in self.assistants:
            return self.assistants[name]
        for err in self.errors:
            if err.details.get("assistant") == name:
                raise err
        if name == DEFAULT_ASSISTANT_NAME:
            return default_assistant()
        known = ", ".join(sorted(self.assistants)) or "none"
        raise ConfigError(
            f"no assistant named {name!r} (known: {known}); add assistants/{name}.toml to the "
            f"config dir",
            details={"assistant": name},
        )


# --- positions ----------------------------------------------------------------------------------


def _split_key(text: str) -> list[str]:
    """Split a TOML (dotted, possibly quoted) key into its parts."""
    parts: list[str] = []
    for m in re.finditer(r'"((?:[^"\\]|\\.)*)"|\'([^\']*)\'|([A-Za-z0-9_-]+)', text):
        parts.append(next(g for g in m.groups() if g is not None))
    return parts


_HEADER_RE = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
_KEYLINE_RE = re.compile(r"""^\s*((?:"(?:[^"\\]|\\.)*"|'[^']*'|[A-Za-z0-9_.\- ]+?))\s*=""")


def key_line(text: str, path: Sequence[str]) -> int:
    """The 1-based line that defines `path` (e.g. ("hooks", "create")) in TOML `text`.

    Falls back to the longest defined prefix of the path (an inline table's key is reported at
    its table's line), and to line 1 when nothing matches. Heuristic but exact for the shapes
    config files use (headers, `key = value`, dotted keys).
    """
    want = list(path)
    best_len, best_line = 0, 1
    table: list[str] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        header = _HEADER_RE.match(line)
        if header:
            table = _split_key(header.group(1))
            full = table
        else:
            km = _KEYLINE_RE.match(line)
            if not km:
                continue
            full = table + _split_key(km.group(1))
        n = 0
        while n < min(len(full), len(want)) and full[n] == want[n]:
            n += 1
        # Only a line whose whole key is a prefix of the wanted path defines (part of) it.
        if n == len(full) and n > best_len:
            best_len, best_line = n, lineno
            if n == len(want):
                break
    return best_line


def config_error(
    file: Path | str, text: str, path: Sequence[str], message: str, **details: object
) -> ConfigError:
    """A `ConfigError` "file:line: message" pointing at the key `path`."""
    line = key_line(text, path)
    key = ".".join(path)
    return ConfigError(
        f"{file}:{line}: {key}: {message}" if key else f"{file}:{line}: {message}",
        details={"file": str(file), "line": line, "key": key, **details},
    )


def _parse_toml(file: Path, text: str, **details: object) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        # Python < 3.14 carries the position only in the message: "(at line 3, column 7)".
        msg = str(exc)
        m = _TOML_POS_RE.search(msg)
        line = int(m.group(1)) if m else 0
        col = int(m.group(2)) if m else 0
        short = _TOML_POS_RE.sub("", msg).strip()
        where = f"{file}:{line}:{col}" if m else f"{file}"
        raise ConfigError(
            f"{where}: invalid TOML: {short}",
            details={"file": str(file), "line": line, "column": col, **details},
        ) from None


# --- assistants ---------------------------------------------------------------------------------


def parse_assistant(name: str, text: str, file: Path | str = "<string>") -> AssistantConfig:
    """Parse one assistant file's text; raises `ConfigError` naming file and line."""
    file = Path(file)

    def err(path: Sequence[str], message: str) -> ConfigError:
        return config_error(file, text, path, message, assistant=name)

    if not _NAME_RE.match(name):
        raise ConfigError(
            f"{file}: assistant name {name!r} (the file name) must be letters, digits, '_', "
            f"'-' or '.'",
            details={"file": str(file), "line": 0, "assistant": name},
        )
    data = _parse_toml(file, text, assistant=name)
    for key in data:
        if key not in _ASSISTANT_KEYS:
            allowed = ", ".join(sorted(_ASSISTANT_KEYS))
            raise err([key], f"unknown key (allowed: {allowed})")

    def string(key: str) -> str:
        value = data.get(key, "")
        if not isinstance(value, str):
            raise err([key], f"must be a string, not {type(value).__name__}")
        return value

    description, driver, model = string("description"), string("driver"), string("model")
    system_prompt = string("system_prompt")
    if model.startswith(ROLE_PREFIX) and not model[len(ROLE_PREFIX) :]:
        raise err(["model"], "'use::' must name a role, e.g. 'use::default'")

    history_size = data.get("history_size", DEFAULT_HISTORY_SIZE)
    if isinstance(history_size, bool) or not isinstance(history_size, int) or history_size < 0:
        raise err(["history_size"], "must be a whole number >= 0")

    workdir = _parse_workdir(data.get("workdir", "per-topic"), err)

    options = data.get("options", {})
    if not isinstance(options, dict):
        raise err(["options"], "must be a table")

    hooks = data.get("hooks", {})
    if not isinstance(hooks, dict):
        raise err(["hooks"], "must be a table with 'create' and/or 'next'")
    for key, value in hooks.items():
        if key not in _HOOK_KEYS:
            raise err(["hooks", key], "unknown hook (allowed: create, next)")
        if not isinstance(value, str) or not _HOOK_RE.match(value):
            raise err(["hooks", key], f"must be 'module:function', got {value!r}")

    return AssistantConfig(
        name=name,
        description=description,
        driver=driver,
        model=model,
        system_prompt=system_prompt,
        history_size=history_size,
        workdir=workdir,
        options=options,
        create_hook=hooks.get("create", ""),
        next_hook=hooks.get("next", ""),
        source=str(file),
    )


def _parse_workdir(value: object, err: Callable[[Sequence[str], str], ConfigError]) -> Workdir:
    if isinstance(value, str):
        value = {"policy": value}
    if not isinstance(value, dict):
        raise err(["workdir"], "must be a policy name or a table { policy, path }")
    for key in value:
        if key not in ("policy", "path"):
            raise err(["workdir", key], "unknown key (allowed: policy, path)")
    policy = value.get("policy", "per-topic")
    if policy not in WORKDIR_POLICIES:
        raise err(
            ["workdir"], f"policy must be one of {', '.join(WORKDIR_POLICIES)}, not {policy!r}"
        )
    path = value.get("path", "")
    if not isinstance(path, str):
        raise err(["workdir", "path"], "must be a string")
    if policy == "fixed" and not path:
        raise err(["workdir"], "policy 'fixed' needs a path")
    if policy != "fixed" and path:
        raise err(["workdir", "path"], f"a path is only used by policy 'fixed', not {policy!r}")
    return Workdir(policy=policy, path=path)


# --- roles --------------------------------------------------------------------------------------


def parse_roles(text: str, file: Path | str = "<string>") -> RolesConfig:
    """Parse `roles.toml` text; raises `ConfigError` naming file and line."""
    file = Path(file)
    data = _parse_toml(file, text)

    def err(path: Sequence[str], message: str) -> ConfigError:
        return config_error(file, text, path, message)

    def role_map(table: object, path: list[str]) -> dict[str, RoleTarget]:
        if not isinstance(table, dict):
            raise err(path, "must be a table of role = { driver, model }")
        out: dict[str, RoleTarget] = {}
        for role, target in table.items():
            where = [*path, role]
            if not isinstance(target, dict):
                raise err(where, "must be a table { driver = ..., model = ... }")
            for key, value in target.items():
                if key not in ("driver", "model"):
                    raise err([*where, key], "unknown key (allowed: driver, model)")
                if not isinstance(value, str):
                    raise err([*where, key], "must be a string")
            driver, model = target.get("driver", ""), target.get("model", "")
            if not driver and not model:
                raise err(where, "needs a driver, a model, or both")
            if model.startswith(ROLE_PREFIX):
                raise err([*where, "model"], "a role cannot point at another role")
            out[role] = RoleTarget(driver=driver, model=model)
        return out

    for key in data:
        if key not in ("system", "profiles"):
            raise err([key], "unknown key (allowed: system, profiles)")
    system = role_map(data.get("system", {}), ["system"])
    profiles_raw = data.get("profiles", {})
    if not isinstance(profiles_raw, dict):
        raise err(["profiles"], "must be a table of [profiles.<name>] tables")
    profiles = {name: role_map(table, ["profiles", name]) for name, table in profiles_raw.items()}
    return RolesConfig(system=system, profiles=profiles, source=str(file))
