"""The `hostd.drivers` entry point of the Claude Code driver. Must not import the SDK."""

from __future__ import annotations

from hostd_claude_code import __version__
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

SPEC = DriverSpec(
    name="claude-code",
    module="hostd_claude_code",
    description="Claude Code through claude-agent-sdk (the bundled claude CLI)",
    version=__version__,
    env=ENV,
    check="hostd_claude_code.credentials:check",
)
