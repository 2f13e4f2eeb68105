"""The `hostd.drivers` entry point of the Claude Code driver. Must not import the SDK."""

from __future__ import annotations

from hostd_claude_code import __version__
from hostd_protocol.common import DriverMode
from hostd_protocol.driver_spec import DriverSpec

#: Environment the CLI may need from the daemon. Only these reach the driver process; the
#: driver then builds the CLI's own environment (HOME, CLAUDE_CONFIG_DIR, TMPDIR) itself.
ENV: tuple[str, ...] = (
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "CLAUDE_CODE_OAUTH_TOKEN",
    # Where the user's own `claude` keeps its login (see `credentials`).
    "CLAUDE_CONFIG_DIR",
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_MODEL",
    "ANTHROPIC_SMALL_FAST_MODEL",
    "ANTHROPIC_CUSTOM_HEADERS",
    "CLAUDE_CODE_USE_BEDROCK",
    "CLAUDE_CODE_USE_VERTEX",
    "AWS_REGION",
    "AWS_PROFILE",
    "CLOUD_ML_REGION",
    "ANTHROPIC_VERTEX_PROJECT_ID",
    "HTTPS_PROXY",
    "HTTP_PROXY",
    "NO_PROXY",
    "PATH",
    "LANG",
    "CLAUDE_CODE_MAX_RETRIES",
    "CLAUDE_CODE_AUTO_COMPACT_WINDOW",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
    "DISABLE_AUTOUPDATER",
    "DISABLE_TELEMETRY",
    "DISABLE_ERROR_REPORTING",
    "IS_SANDBOX",
)

#: `hostd drivers claude-code` (docs/claude-code-driver.md has the whole table).
OPTIONS_HELP: tuple[tuple[str, str], ...] = (
    ("permission_mode", "default (ask through hostd approvals), acceptEdits, plan, "
     "bypassPermissions, dontAsk"),
    ("claude_home", "folder for the CLI's HOME, config and temp files (default: hostd's "
     "private folder for the topic)"),
    ("env", "extra environment for the CLI (a table of strings)"),
    ("allowed_tools", "tools never asked about (list)"),
    ("disallowed_tools", "tools the CLI may not use (list)"),
    ("max_turns", "agent-loop limit per turn"),
    ("setting_sources", 'settings files to load: subset of ["user", "project", "local"] '
     '(default []; confined: ["project", "local"]; "project"/"local"/null only from '
     "an assistant file on an unconfined topic)"),
    ("add_dirs", "extra directories the CLI may access (list)"),
    ("effort", "low, medium, high, xhigh, max"),
    ("cli_path", "another claude executable instead of the bundled one (assistant files "
     "only)"),
    ("debug", "CLI debug lines into the driver's stderr tail (true/false)"),
    ("approval_timeout", "seconds before the driver denies an unanswered approval (0: host)"),
    ("interrupt_grace", "seconds the CLI gets to end an interrupted turn (default 5)"),
    ("stderr_tail_lines", "CLI stderr lines kept for error messages (default 40)"),
)

SPEC = DriverSpec(
    name="claude-code",
    module="hostd_claude_code",
    description="Claude Code through claude-agent-sdk (the bundled claude CLI)",
    version=__version__,
    env=ENV,
    check="hostd_claude_code.credentials:check",
    # An API key stays outside a confined sandbox: the daemon's credential proxy adds it.
    credential_proxy="hostd_claude_code.credentials:proxy_credential",
    options_type="hostd_claude_code.config:ClaudeCodeOptions",
    options_help=OPTIONS_HELP,
    # A window's `env` may not send the daemon's key or login elsewhere (the daemon adds
    # proxies, CA bundles and preloads to these).
    env_option="env",
    redirect_env=(
        "ANTHROPIC_BASE_URL",
        "ANTHROPIC_BEDROCK_BASE_URL",
        "ANTHROPIC_VERTEX_BASE_URL",
    ),
    # Another `claude` executable runs with the daemon's key in its environment: a window
    # may not pick one (an assistant file may).
    assistant_only=("cli_path",),
    # A repository's `.claude/settings.json` / `settings.local.json` (env, hooks, key
    # helper) would run with the daemon's key, unasked in SDK mode: not loaded unless an
    # assistant file says so, or the topic is confined (the key stays behind the proxy).
    folder_option="setting_sources",
    folder_values=("project", "local"),
    confined_folder_values=("project", "local"),
    images=True,  # image blocks in the user message
    # Claude Code's permission modes, switched per message (`Send.options`).
    modes=(
        DriverMode(id="default", name="Ask", description="every tool asks through hostd"),
        DriverMode(id="acceptEdits", name="Accept edits", description="file edits run unasked"),
        DriverMode(id="plan", name="Plan", description="plan only, change nothing"),
        DriverMode(
            id="bypassPermissions", name="Bypass permissions", description="no tool asks"
        ),
    ),
    mode_option="permission_mode",
    # The user's own `claude` login (see `credentials`): read-only under a confined sandbox,
    # so the CLI answers with the user's login but cannot change it (token refreshes then
    # happen outside the sandbox, by the user's own `claude`). Not bound at all when the
    # daemon holds an API key for the session (`credential_proxy`).
    sandbox_read=("$CLAUDE_CONFIG_DIR", "~/.claude", "~/.claude.json"),
)
