"""Which ACP agents exist (user config) and the driver's options (no I/O beyond reading files).

Agents are named in `<hostd config dir>/acp-agents.toml` (the hostd config dir is
`$HOSTD_HOME/config` when `HOSTD_HOME` is set, else platformdirs' user config dir for
"hostd", e.g. `~/.config/hostd`)::

    [agents.claude]
    command = "claude-agent-acp"          # a name looked up on PATH, or a path
    args = []
    env = ["ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"]  # variables passed on from the driver
    [agents.claude.set_env]               # fixed values (never secrets: the file is plain)
    DISABLE_TELEMETRY = "1"

    [agents.gemini]
    command = "gemini"
    args = ["--experimental-acp"]
    env = ["GEMINI_API_KEY", "GOOGLE_API_KEY"]

Built-in entries for `claude` and `gemini` exist without a file; a file entry of the same
name replaces the built-in one. A topic selects an agent with the option `agent=NAME`
(`hostd new --driver acp --option agent=gemini`, or `[options] agent = "gemini"` in an
assistant file); without it the driver uses `default_agent` from the file, else `claude`.

Rules this module guards:

- Every error is a `ConfigError` whose message names the file (and the agent) and says what
  is wrong; unknown keys are errors (a typo must not silently change what runs).
- The agents file names commands to run, so it is read only if it is ours (or root's), not
  writable by group or others, and not a symbolic link (as hostd reads its own config).
- An agent's environment is built from names, never copied wholesale: the agent sees the
  minimal variables, the ones its entry names, and `set_env`.
"""

from __future__ import annotations

import os
import shutil
import stat
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec

from hostd_protocol.errors import ConfigError, InvalidArgument

CONFIG_FILE = "acp-agents.toml"
HOME_ENV = "HOSTD_HOME"

#: Variables every agent gets (enough to run node/python and find its files).
BASE_ENV: tuple[str, ...] = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "TZ", "TMPDIR")


class AgentConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One ACP agent: how to start it."""

    command: str
    args: list[str] = []
    #: Names of variables passed on from the driver's environment when set.
    env: list[str] = []
    #: Fixed variables for the agent.
    set_env: dict[str, str] = {}
    description: str = ""


class AgentsFile(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    default_agent: str = ""
    agents: dict[str, AgentConfig] = {}


#: The Claude CLI's variables (see notes on running it offline) and the usual proxies.
_CLAUDE_ENV = [
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_MODEL",
    "ANTHROPIC_SMALL_FAST_MODEL",
    "CLAUDE_CONFIG_DIR",
    "CLAUDE_CODE_MAX_RETRIES",
    "CLAUDE_CODE_EXECUTABLE",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
    "DISABLE_AUTOUPDATER",
    "DISABLE_TELEMETRY",
    "DISABLE_ERROR_REPORTING",
    "HTTPS_PROXY",
    "HTTP_PROXY",
    "NO_PROXY",
]

BUILTIN_AGENTS: dict[str, AgentConfig] = {
    "claude": AgentConfig(
        command="claude-agent-acp",
        env=_CLAUDE_ENV,
        set_env={
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_ERROR_REPORTING": "1",
        },
        description="Claude Code through claude-agent-acp (npm @agentclientprotocol/claude-agent-acp)",
    ),
    "gemini": AgentConfig(
        command="gemini",
        args=["--experimental-acp"],
        env=["GEMINI_API_KEY", "GOOGLE_API_KEY", "GOOGLE_CLOUD_PROJECT", "HTTPS_PROXY"],
        description="Gemini CLI in ACP mode",
    ),
}

DEFAULT_AGENT = "claude"


def config_dir(environ: Mapping[str, str] | None = None) -> Path:
    """hostd's config dir, derived the way the daemon derives it (hostd/paths.py)."""
    env = os.environ if environ is None else environ
    home = env.get(HOME_ENV, "")
    if home:
        return Path(home).expanduser().absolute() / "config"
    import platformdirs

    return Path(platformdirs.user_config_dir("hostd"))


def data_dir(environ: Mapping[str, str] | None = None) -> Path:
    """hostd's data dir, derived the way the daemon derives it (hostd/shell/paths.py)."""
    env = os.environ if environ is None else environ
    home = env.get(HOME_ENV, "")
    if home:
        return Path(home).expanduser().absolute() / "data"
    import platformdirs

    return Path(platformdirs.user_data_dir("hostd"))


#: Where the driver remembers what each agent said in `initialize` (for `hostd drivers`).
SEEN_FILE = "acp-agents-seen.json"


def read_seen(path: Path) -> dict[str, str]:
    """Agent name -> "name version" last seen in `initialize`; empty when unreadable or not
    a file of ours that only we can write."""
    try:
        data = msgspec.json.decode(_read_trusted(path), type=dict[str, str])
    except (OSError, ConfigError, msgspec.DecodeError):
        return {}
    return data


def _read_trusted(path: Path) -> bytes:
    """A file's bytes only if it is ours (or root's), nobody else can write it, and it is not
    a link (the agents file decides which command runs). Raises `ConfigError` or
    `FileNotFoundError`."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if os.path.islink(path):
            raise ConfigError(f"{path}: is a symbolic link; refusing to load it") from None
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError(f"{path}: not a regular file")
        if st.st_uid not in (os.getuid(), 0) or st.st_mode & 0o022:
            raise ConfigError(
                f"{path}: owned by uid {st.st_uid} with mode {oct(stat.S_IMODE(st.st_mode))}: "
                "someone else could have written it; refusing to load it (make it yours and "
                "not writable by others)"
            )
        return fh.read()


def remember_seen(path: Path, agent: str, label: str) -> None:
    """Record `label` for `agent` (atomic replace, private file); errors are ignored."""
    seen = read_seen(path)
    if seen.get(agent) == label:
        return
    seen[agent] = label
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(msgspec.json.encode(seen))
        os.replace(tmp, path)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def load_agents(path: Path) -> AgentsFile:
    """The agents file merged over the built-ins; a missing file is just the built-ins."""
    try:
        raw = _read_trusted(path)
    except FileNotFoundError:
        return AgentsFile(agents=dict(BUILTIN_AGENTS))
    try:
        data = tomllib.loads(raw.decode("utf-8", errors="replace"))
        parsed = msgspec.convert(data, AgentsFile)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    except msgspec.ValidationError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    for name, agent in parsed.agents.items():
        if not agent.command.strip():
            raise ConfigError(f"{path}: agent {name!r}: command is empty")
    return AgentsFile(
        default_agent=parsed.default_agent, agents={**BUILTIN_AGENTS, **parsed.agents}
    )


def resolve_command(command: str, path_env: str | None) -> str | None:
    """The executable `command` runs, or None when it is not found."""
    if os.sep in command:
        return command if os.access(command, os.X_OK) and os.path.isfile(command) else None
    return shutil.which(command, path=path_env)


def agent_env(agent: AgentConfig, environ: Mapping[str, str]) -> dict[str, str]:
    """The agent's environment: base variables, the named ones, then `set_env`."""
    env = {name: environ[name] for name in BASE_ENV if name in environ}
    for name in agent.env:
        if name in environ:
            env[name] = environ[name]
    for name, value in agent.set_env.items():
        # A value from the environment (e.g. a test's CLAUDE_CODE_MAX_RETRIES) wins over
        # the file's default only for names the entry also lists in `env`.
        if name not in agent.env or name not in environ:
            env[name] = value
    return env


class AcpOptions(msgspec.Struct, frozen=True, kw_only=True):
    """`Init.options` understood by this driver (its spec's `options_type`: the daemon
    refuses other names for a topic). Unknown keys that still arrive (an assistant file's
    options) are ignored and logged. `spec.OPTIONS_HELP` explains each."""

    #: The agent to run, by name in the agents file (or built-in).
    agent: str = ""
    #: The ACP session mode to select (`session/set_mode`) after a session opens or resumes,
    #: by id or name; empty: the agent's own default. For claude-agent-acp these are Claude
    #: Code's permission modes: `default` asks the host for every tool (hostd approvals),
    #: while its own default, `auto`, lets a model classifier decide.
    mode: str = ""
    #: Seconds to wait for `initialize` (and for `session/new` / load / resume).
    initialize_timeout: float = 20.0
    #: Seconds to wait after `session/cancel` for the prompt's own answer.
    interrupt_grace: float = 5.0
    #: Seconds a permission request may stay unanswered before the driver rejects it; 0:
    #: wait for the host (which owns the approval timeout).
    approval_timeout: float = 0.0
    #: Serve `fs/read_text_file` and `fs/write_text_file` (inside the working dir only).
    fs: bool = True
    #: Largest file `fs/read_text_file` returns / `fs/write_text_file` accepts, in bytes.
    fs_max_bytes: int = 1024 * 1024
    #: Largest single message from the agent, in bytes; longer lines are dropped and logged.
    max_message_bytes: int = 8 * 1024 * 1024
    #: Lines of the agent's stderr kept for error messages.
    stderr_tail_lines: int = 40
    #: MCP servers for the agent's session, in ACP's own shape (`session/new`'s
    #: `mcpServers`: stdio `{name, command, args, env}` or `{type: "http", name, url,
    #: headers}`); `hostd acp` passes an editor's here.
    mcp_servers: list[dict[str, Any]] = []


def parse_options(raw: Mapping[str, Any]) -> tuple[AcpOptions, list[str]]:
    """Validate `Init.options`; returns the options and the names of ignored keys."""
    known = set(AcpOptions.__struct_fields__)
    unknown = sorted(k for k in raw if k not in known)
    try:
        opts = msgspec.convert(
            {k: v for k, v in raw.items() if k in known}, AcpOptions, strict=False
        )
    except msgspec.ValidationError as exc:
        raise InvalidArgument(f"invalid acp option: {exc}") from None
    for name in ("initialize_timeout", "interrupt_grace"):
        if getattr(opts, name) <= 0:
            raise InvalidArgument(f"invalid acp option: {name} must be > 0")
    if opts.fs_max_bytes <= 0 or opts.max_message_bytes < 1024:
        raise InvalidArgument("invalid acp option: byte limits must be positive (>= 1 KiB)")
    return opts, unknown


def select_agent(agents: AgentsFile, name: str, source: Path) -> tuple[str, AgentConfig]:
    """The agent a topic asked for (or the default); a clear error when unknown."""
    chosen = name or agents.default_agent or DEFAULT_AGENT
    agent = agents.agents.get(chosen)
    if agent is None:
        known = ", ".join(sorted(agents.agents)) or "none"
        raise ConfigError(
            f"no ACP agent named {chosen!r} (configured: {known}); add it to {source}"
        )
    return chosen, agent
