"""Which credential the Claude CLI will use, found without the SDK and without the network.

Rules this module guards:

- The user's own Claude Code login is used with no extra step. In order:
  1. an API key or token in the driver's environment (`ANTHROPIC_API_KEY`,
     `CLAUDE_CODE_OAUTH_TOKEN`, `ANTHROPIC_AUTH_TOKEN`), or a cloud provider switch
     (`CLAUDE_CODE_USE_BEDROCK` / `CLAUDE_CODE_USE_VERTEX`): the daemon's environment,
     filtered by the spec's `ENV`, or the topic's `env` option;
  2. a claude.ai login: `<config>/.credentials.json` with a `claudeAiOauth` entry, where
     `<config>` is `$CLAUDE_CONFIG_DIR`, else `~/.claude` (what `claude` itself reads);
  3. an Anthropic Console key saved by `/login`: `primaryApiKey` in `~/.claude.json`
     (or `<config>/.claude.json` when `CLAUDE_CONFIG_DIR` is set).
- A claude.ai login is *not copied*: OAuth refresh tokens rotate, so a copy would log the
  user's own `claude` out at the next refresh. The CLI instead gets the user's config dir as
  its `CLAUDE_CONFIG_DIR` (it locks that store for concurrent writers itself), while `HOME`,
  temp files and everything else stay in the topic's private folder.
- A Console key is read and handed to the CLI as `ANTHROPIC_API_KEY` (it never rotates).
- hostd writes no credential anywhere; it only reads the files above. A credentials file
  other users can read is reported (`CredentialStatus.warning`).
- `check(environ)` is the `DriverSpec.check` hook: the daemon calls it with the environment
  the driver would get, and `hostd drivers` / `hostd new` show its answer.
"""

from __future__ import annotations

import json
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from hostd_protocol.driver_spec import CredentialStatus, ProxiedCredential

CredentialKind = Literal["api-key", "token", "cloud", "login", "console-key", "none"]

#: The one-line fix shown when no credential is found (also in `auth_required` errors).
LOGIN_FIX = (
    "log in once with `claude` (then /login), or set ANTHROPIC_API_KEY in the daemon's "
    "environment; then restart the daemon (`hostd stop`)"
)

#: What the CLI prints (as the turn's result) when it has no usable credential.
NOT_LOGGED_IN_MARKERS = (
    "Not logged in",
    "Please run /login",
    "Invalid API key",
    "authentication_error",
    "OAuth token has expired",
)

_TOKEN_VARS = ("CLAUDE_CODE_OAUTH_TOKEN", "ANTHROPIC_AUTH_TOKEN")
_CLOUD_VARS = ("CLAUDE_CODE_USE_BEDROCK", "CLAUDE_CODE_USE_VERTEX")


@dataclass(frozen=True)
class Credential:
    """The credential found, and what the CLI's environment needs for it."""

    kind: CredentialKind
    #: Where it came from, in words ("ANTHROPIC_API_KEY in the daemon's environment").
    source: str
    #: For a claude.ai login: the user's Claude config dir, given to the CLI as its own.
    config_dir: Path | None = None
    #: Variables to add to the CLI's environment (a Console key).
    env: Mapping[str, str] | None = None
    #: A problem worth saying even though the credential works (e.g. file mode).
    warning: str = ""


def user_config_dir(environ: Mapping[str, str]) -> Path | None:
    """Where the user's `claude` keeps its login: `$CLAUDE_CONFIG_DIR`, else `~/.claude`."""
    if environ.get("CLAUDE_CONFIG_DIR"):
        return Path(environ["CLAUDE_CONFIG_DIR"]).expanduser()
    home = environ.get("HOME")
    return Path(home) / ".claude" if home else None


def _global_config_file(environ: Mapping[str, str]) -> Path | None:
    if environ.get("CLAUDE_CONFIG_DIR"):
        return Path(environ["CLAUDE_CONFIG_DIR"]).expanduser() / ".claude.json"
    home = environ.get("HOME")
    return Path(home) / ".claude.json" if home else None


def _read_json(path: Path) -> dict[str, object] | None:
    try:
        if not path.is_file() or path.stat().st_size > 1024 * 1024:
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _mode_warning(path: Path) -> str:
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except OSError:
        return ""
    if mode & 0o077:
        return f"{path} is readable by other users (mode {mode:o}): chmod 600 {path}"
    return ""


def find_credential(
    environ: Mapping[str, str], extra_env: Mapping[str, str] | None = None
) -> Credential:
    """The credential the CLI will use with `environ` (the driver's) and `extra_env` (the
    topic's `env` option, which wins)."""
    env = {**environ, **(extra_env or {})}
    if env.get("ANTHROPIC_API_KEY"):
        where = "the topic's env option" if extra_env and "ANTHROPIC_API_KEY" in extra_env else (
            "the daemon's environment"
        )
        return Credential("api-key", f"API key (ANTHROPIC_API_KEY in {where})")
    for name in _TOKEN_VARS:
        if env.get(name):
            return Credential("token", f"token ({name} in the daemon's environment)")
    for name in _CLOUD_VARS:
        if env.get(name) not in (None, "", "0", "false"):
            return Credential("cloud", f"cloud provider ({name})")
    config_dir = user_config_dir(env)
    if config_dir is not None:
        creds_file = config_dir / ".credentials.json"
        data = _read_json(creds_file)
        if data is not None and isinstance(data.get("claudeAiOauth"), dict):
            return Credential(
                "login",
                f"Claude Code login ({creds_file})",
                config_dir=config_dir,
                warning=_mode_warning(creds_file),
            )
    global_file = _global_config_file(env)
    if global_file is not None:
        data = _read_json(global_file)
        key = data.get("primaryApiKey") if data is not None else None
        if isinstance(key, str) and key:
            return Credential(
                "console-key",
                f"Claude Code login, Console API key ({global_file})",
                env={"ANTHROPIC_API_KEY": key},
                warning=_mode_warning(global_file),
            )
    return Credential("none", "none")


#: Where the CLI sends its requests when `ANTHROPIC_BASE_URL` is not set.
DEFAULT_BASE_URL = "https://api.anthropic.com"
#: Credential kinds the daemon keeps out of a confined sandbox (`proxy_credential`).
PROXIED_KINDS: tuple[CredentialKind, ...] = ("api-key", "console-key", "token")
#: Topic `env` entries that change where the CLI goes or what it sends: with any of them
#: the topic chose its own credential, and the daemon's is not involved.
_TOPIC_OVERRIDES = ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "ANTHROPIC_AUTH_TOKEN",
                    "CLAUDE_CODE_OAUTH_TOKEN", *_CLOUD_VARS)


def confinement(kind: CredentialKind, proxied: bool) -> str:
    """What a confined topic's tools can see of the credential, in a few words for
    `hostd drivers` (docs/claude-code-driver.md has the table)."""
    if proxied:
        return "confined (network none/loopback): kept out of the sandbox"
    if kind == "login":
        return "confined: readable by tools (a login is not proxied)"
    return "confined: readable by tools (only API keys and tokens are proxied)"


def proxy_credential(
    environ: Mapping[str, str], options: Mapping[str, object]
) -> ProxiedCredential | None:
    """`DriverSpec.credential_proxy`: for an API key (the daemon's `ANTHROPIC_API_KEY`, or
    the Console key in `~/.claude.json`) or a long-lived token (`CLAUDE_CODE_OAUTH_TOKEN`,
    `ANTHROPIC_AUTH_TOKEN`: a bearer), what the daemon needs to keep it out of a confined
    sandbox. None for a claude.ai login (its refresh stays with the CLI), a cloud provider,
    or a topic whose `env` option sets its own credential or base URL."""
    extra = options.get("env")
    if isinstance(extra, Mapping) and any(name in extra for name in _TOPIC_OVERRIDES):
        return None
    if any(environ.get(name) not in (None, "", "0", "false") for name in _CLOUD_VARS):
        return None
    cred = find_credential(environ)
    header, key_env = "x-api-key", "ANTHROPIC_API_KEY"
    if cred.kind == "api-key":
        value = environ["ANTHROPIC_API_KEY"]
    elif cred.kind == "console-key" and cred.env:
        value = cred.env["ANTHROPIC_API_KEY"]
    elif cred.kind == "token":
        # A long-lived bearer token (`claude setup-token`, or a gateway's): it does not
        # rotate, so the daemon can hold it as it holds a key.
        key_env = next(name for name in _TOKEN_VARS if environ.get(name))
        header, value = "authorization", f"Bearer {environ[key_env]}"
    else:
        return None
    return ProxiedCredential(
        upstream=environ.get("ANTHROPIC_BASE_URL") or DEFAULT_BASE_URL,
        header=header,
        value=value,
        base_url_env="ANTHROPIC_BASE_URL",
        key_env=key_env,
        remove_env=tuple(n for n in ("ANTHROPIC_API_KEY", *_TOKEN_VARS) if n != key_env),
        # Not `SPEC.sandbox_read`: `~/.claude.json` holds the Console key, and a login in
        # `~/.claude` is not what this session uses.
        sandbox_read=(),
    )


def check(environ: Mapping[str, str]) -> CredentialStatus:
    """`DriverSpec.check`: the credential the driver will use with `environ`, or the fix."""
    cred = find_credential(environ)
    if cred.kind == "none":
        return CredentialStatus(ok=False, summary="not logged in", fix=LOGIN_FIX)
    where = confinement(cred.kind, proxy_credential(environ, {}) is not None)
    return CredentialStatus(ok=True, summary=f"{cred.source}; {where}", warning=cred.warning)


def is_login_failure(text: str) -> bool:
    """Whether the CLI's error text says it has no usable credential."""
    return any(marker in text for marker in NOT_LOGGED_IN_MARKERS)
