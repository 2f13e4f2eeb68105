"""Secrets by reference (`DriverSpec.secret_options`): which values a driver gets for the
`${NAME}` references in its options, from `<config>/secrets.env` or the daemon's environment.

Rules this module guards:

- `secrets.env` is `NAME=value` lines (`#` comments, blank lines, optional `export `, one
  pair of matching quotes around a value). It must be a regular file (not a link) owned by
  the user with no access for group or others (0600): otherwise it is refused with a
  `ConfigError` naming the file and the fix, and nothing of it is used.
- A reference is honoured only when the local user allowed it: `secrets.env` defines the
  name, or one of the user's assistant files refers to it. Options come from windows, which
  also pick where the value is sent (an MCP server's `url`), so a reference to any other
  variable of the daemon's environment is refused (`PermissionDenied`, one line saying what
  to add), at create-topic and again before a process starts. Which *server* a window may
  send a reference to (one an assistant file defines) is `window_options`' rule.
- The value comes from `secrets.env` first, then the daemon's environment; a name found in
  neither is not passed (the driver says which reference is unset). Values go only into the
  driver's environment and its redaction list: never into options, rows, logs or events.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from hostd_protocol.driver_spec import DriverSpec
from hostd_protocol.errors import ConfigError, PermissionDenied
from hostd_protocol.secret_refs import references

__all__ = [
    "SECRETS_FILE",
    "SecretSource",
    "check_references",
    "driver_secrets",
    "file_references",
    "read_secrets",
    "references_in",
]


class SecretSource(Protocol):
    """What resolving references needs from the configuration (the daemon's `ConfigCache`)."""

    def secrets(self) -> dict[str, str]:
        """The secrets file's entries (raises `ConfigError` for an unsafe file)."""
        ...

    def configured_refs(self) -> frozenset[str]:
        """The names the user's assistant files refer to."""
        ...


SECRETS_FILE = "secrets.env"
#: A bigger secrets file is not one.
MAX_SECRETS_BYTES = 1 << 20
#: A file an option names (`secret_file_options`) is read this far for references.
MAX_REFERENCING_FILE_BYTES = 1 << 20


def read_secrets(config_dir: Path) -> dict[str, str]:
    """`<config_dir>/secrets.env` as a dict ({} when there is none); see the module rules."""
    path = config_dir / SECRETS_FILE
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ConfigError(
            f"{path}: cannot read it ({exc.strerror or exc}); it must be a regular file "
            "(not a link) you own, mode 0600",
            details={"path": str(path)},
        ) from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
            raise ConfigError(
                f"{path}: not a regular file you own; hostd uses no secrets from it",
                details={"path": str(path)},
            )
        if st.st_mode & 0o077:
            raise ConfigError(
                f"{path}: others may read it (mode {oct(stat.S_IMODE(st.st_mode))}); run "
                f"`chmod 600 {path}`: hostd uses no secrets from it until then",
                details={"path": str(path)},
            )
        data = f.read(MAX_SECRETS_BYTES + 1)
    if len(data) > MAX_SECRETS_BYTES:
        raise ConfigError(
            f"{path}: larger than {MAX_SECRETS_BYTES} bytes", details={"path": str(path)}
        )
    out: dict[str, str] = {}
    for number, raw in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export ") :].lstrip()
        name, sep, value = line.partition("=")
        name, value = name.strip(), value.strip()
        if not sep or not name.isidentifier() or not name.isascii():
            # The line may hold a secret: only its number is said.
            raise ConfigError(
                f"{path}, line {number}: expected NAME=value", details={"path": str(path)}
            )
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        out[name] = value
    return out


def references_in(spec: DriverSpec, options: Mapping[str, Any]) -> set[str]:
    """The names the options refer to: in `secret_options`, and in the files that
    `secret_file_options` name (unreadable ones count as none: the driver reports them)."""
    names: set[str] = set()
    for option in spec.secret_options:
        names |= references(options.get(option))
    for option in spec.secret_file_options:
        names |= file_references(options.get(option))
    return names


def file_references(path: Any) -> set[str]:
    """The names a file an option names refers to (none when unreadable: the driver says)."""
    if not isinstance(path, str) or not path:
        return set()
    try:
        with open(os.path.expanduser(path), "rb") as f:
            text = f.read(MAX_REFERENCING_FILE_BYTES).decode("utf-8", "replace")
    except OSError:
        return set()
    return references(text)


def check_references(
    spec: DriverSpec, options: Mapping[str, Any], source: SecretSource
) -> tuple[set[str], dict[str, str]]:
    """The names the options refer to and the secrets file's entries (not read when nothing
    is referred to: an unsafe file only matters to options that use it); `PermissionDenied`
    for a name the user did not allow."""
    if not (spec.secret_options or spec.secret_file_options):
        return set(), {}
    names = references_in(spec, options)
    if not names:
        return set(), {}
    secrets = source.secrets()
    configured = source.configured_refs()
    for name in sorted(names):
        if name in secrets or name in configured:
            continue
        raise PermissionDenied(
            f"${{{name}}} in the options of driver {spec.name!r} is not allowed: options from "
            f"a window may refer to the names defined in {SECRETS_FILE} in the config dir "
            f"(mode 0600), or to a name an assistant file refers to (add {name}=... to "
            f"{SECRETS_FILE}, or `${{{name}}}` to an assistant's [options]; `hostd paths` "
            "shows where)",
            details={"driver": spec.name, "variable": name},
        )
    return names, secrets


def driver_secrets(
    spec: DriverSpec,
    options: Mapping[str, Any],
    source: SecretSource,
    base_env: Mapping[str, str],
) -> dict[str, str]:
    """The variables (name -> value) this driver gets for its references (see the rules)."""
    names, secrets = check_references(spec, options, source)
    out: dict[str, str] = {}
    for name in names:
        value = secrets.get(name, base_env.get(name))
        if value is not None:
            out[name] = value
    return out
