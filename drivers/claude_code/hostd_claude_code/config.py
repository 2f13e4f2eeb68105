"""The Claude Code driver's options and the CLI environment derived from them (no SDK here).

Rules this module guards:

- Every file the CLI writes stays inside the topic's folders: `HOME`, `CLAUDE_CONFIG_DIR`,
  `TMPDIR` and `CLAUDE_CODE_TMPDIR` all point under `claude_home` (default: the host's
  private state dir for the topic, else `<working_dir>/.hostd-claude`). The transcripts that
  resume needs live in `<claude_home>/.claude/projects/<cwd-slug>/`, so resuming in a new
  process works as long as the working dir (and so `claude_home`) is the same.
- One exception: a user logged in to Claude Code (claude.ai) has the CLI use their own
  Claude config dir as `CLAUDE_CONFIG_DIR`, so the login and its token refreshes stay one
  (see `credentials`); the transcripts then live where `claude` keeps its own.
- The user's own settings (`settings.json` of the config dir: hooks, permission rules, env)
  are not loaded by default: user hooks would run beside hostd's steering hooks and user
  permission rules would bypass hostd's approvals. Nor, by default, the working folder's
  `.claude/settings.json` / `settings.local.json`: a repository's env and hooks would run
  with the key, unasked (SDK mode has no trust question). A confined topic gets project +
  local from the host (`SPEC.folder_option`); an assistant file may opt a folder in.
- The CLI never inherits the driver's environment by accident: the SDK merges
  `os.environ` under `ClaudeAgentOptions.env`, so every variable that matters is set here
  explicitly.
- Options are validated once, at `Init`; a bad option is a clear `InvalidArgument` that the
  harness turns into `DriverFatal`.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

import msgspec

from hostd_claude_code.credentials import Credential, find_credential
from hostd_protocol.errors import InvalidArgument

PermissionMode = Literal["default", "acceptEdits", "plan", "bypassPermissions", "dontAsk"]
PERMISSION_MODES: tuple[str, ...] = get_args(PermissionMode)

#: The CLI creates Unix sockets under CLAUDE_CODE_TMPDIR; `sun_path` holds 108 bytes, and the
#: CLI appends its own names, so a longer temp dir moves to a private dir under /tmp.
MAX_TMPDIR_LEN = 60

#: Defaults that keep the embedded CLI quiet: no auto-update, telemetry, surveys or other
#: side traffic. `options.env` can override each one.
QUIET_ENV: dict[str, str] = {
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "DISABLE_BUG_COMMAND": "1",
    "CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY": "1",
}


class ClaudeCodeOptions(msgspec.Struct, frozen=True, kw_only=True):
    """`Init.options` understood by this driver. Unknown keys are ignored (and logged)."""

    #: CLI permission mode. "default" asks the host through `can_use_tool` (approvals).
    #: "bypassPermissions" as root needs `IS_SANDBOX=1`, which the driver then sets.
    permission_mode: PermissionMode = "default"
    #: Folder for the CLI's HOME, config dir and temp files. Default:
    #: `<working_dir>/.hostd-claude`.
    claude_home: str = ""
    #: Extra environment for the CLI (wins over everything the driver sets).
    env: dict[str, str] = {}
    allowed_tools: list[str] = []
    disallowed_tools: list[str] = []
    max_turns: int | None = None
    #: CLI setting sources ("user", "project", "local"); None loads all, as the CLI does.
    #: Default: none (user hooks and rules would fight hostd's; a repository's settings
    #: would run with the key). The host gives a confined topic project + local (`SPEC`).
    setting_sources: list[Literal["user", "project", "local"]] | None = msgspec.field(
        default_factory=list
    )
    add_dirs: list[str] = []
    effort: Literal["low", "medium", "high", "xhigh", "max"] | None = None
    #: Path of a `claude` executable to use instead of the one bundled in the SDK wheel.
    cli_path: str = ""
    #: Pass `--debug-to-stderr` to the CLI (its lines land in the driver's stderr tail).
    debug: bool = False
    #: Seconds an approval may stay unanswered before the driver denies it; 0: wait for the
    #: host (which owns the approval timeout).
    approval_timeout: float = 0.0
    #: Seconds to wait after the CLI's interrupt for its final result before the turn is cut.
    interrupt_grace: float = 5.0
    #: Lines of the CLI's stderr kept for error messages.
    stderr_tail_lines: int = 40


def parse_options(raw: dict[str, Any]) -> tuple[ClaudeCodeOptions, list[str]]:
    """Validate `Init.options`; returns the options and the names of ignored keys."""
    known = set(ClaudeCodeOptions.__struct_fields__)
    unknown = sorted(k for k in raw if k not in known)
    try:
        opts = msgspec.convert(
            {k: v for k, v in raw.items() if k in known}, ClaudeCodeOptions, strict=False
        )
    except msgspec.ValidationError as exc:
        raise InvalidArgument(f"invalid claude-code option: {exc}") from None
    if opts.interrupt_grace <= 0:
        raise InvalidArgument("invalid claude-code option: interrupt_grace must be > 0")
    return opts, unknown


@dataclass(frozen=True)
class CliPaths:
    """Where the CLI keeps its files for one topic."""

    cwd: Path
    home: Path
    config_dir: Path
    tmpdir: Path
    #: The temp dir is a private dir under the system temp (the topic's path is too long
    #: for Unix sockets); the driver removes it when it closes.
    private_tmpdir: bool = False


def cli_paths(working_dir: str, opts: ClaudeCodeOptions, state_dir: str = "") -> CliPaths:
    """Create (if needed) and return the CLI's folders for this working dir. `state_dir` is
    the host's private folder for the topic (`Init.state_dir`); without one the CLI's files
    go to `<working_dir>/.hostd-claude`."""
    cwd = Path(working_dir or os.getcwd()).resolve()
    if opts.claude_home:
        home = Path(opts.claude_home).expanduser().resolve()
    elif state_dir:
        home = Path(state_dir).resolve() / "claude"
    else:
        home = cwd / ".hostd-claude"
    config_dir = home / ".claude"
    tmpdir = home / "tmp"
    private = len(str(tmpdir)) > MAX_TMPDIR_LEN
    if private:
        tmpdir = Path(tempfile.mkdtemp(prefix="hostd-cc-"))
    for d in (cwd, home, config_dir, tmpdir):
        d.mkdir(parents=True, exist_ok=True)
    return CliPaths(
        cwd=cwd, home=home, config_dir=config_dir, tmpdir=tmpdir, private_tmpdir=private
    )


def cli_env(
    paths: CliPaths,
    opts: ClaudeCodeOptions,
    environ: dict[str, str] | None = None,
    *,
    is_root: bool | None = None,
    credential: Credential | None = None,
) -> dict[str, str]:
    """The environment for the CLI (applied over the driver's own by the SDK).
    `credential` defaults to what `find_credential` finds in `environ`."""
    environ = dict(os.environ if environ is None else environ)
    if credential is None:
        credential = find_credential(environ, opts.env)
    env = dict(QUIET_ENV)
    env.update(
        HOME=str(paths.home),
        CLAUDE_CONFIG_DIR=str(credential.config_dir or paths.config_dir),
        TMPDIR=str(paths.tmpdir),
        CLAUDE_CODE_TMPDIR=str(paths.tmpdir),
    )
    env.update(credential.env or {})
    if is_root is None:
        is_root = hasattr(os, "geteuid") and os.geteuid() == 0
    if is_root and opts.permission_mode == "bypassPermissions":
        # As root the CLI refuses bypassPermissions (exit 1) unless told it is sandboxed.
        env["IS_SANDBOX"] = "1"
    for key in QUIET_ENV:
        if key in environ:
            env[key] = environ[key]
    env.update(opts.env)
    return env
