"""hostd driver for Claude Code, built on claude-agent-sdk (which runs the bundled claude CLI).

The package imports nothing heavy: `spec` is loaded by the daemon at start-up, and the SDK is
imported only when the driver process prewarms or runs its first turn.
"""

__version__ = "0.1.0"
