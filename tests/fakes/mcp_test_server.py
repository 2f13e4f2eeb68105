"""A real MCP server (stdio, the official `mcp` package) with tools that misbehave on purpose.

Run as `python -m tests.fakes.mcp_test_server --state DIR` (stdio), or with `--http PORT` as a
streamable HTTP server on 127.0.0.1:PORT/mcp. Tools:

- `echo(text)`: returns the text.
- `flaky(key, failures)`: the server process dies (exit 1, mid-call) the first `failures`
  times it is called with `key`, then answers `ok <key> after <n> failures`. Counts live in
  files under `--state`, so they survive the restarts. This is the "server that dies
  mid-call" the driver must retry.
- `broken(path)`: always fails as a tool (`isError`): a final failure the model must read.
- `slow(seconds)`: sleeps, then answers `slept <seconds>` (timeouts, stop during a tool).
- `huge(size)`: returns `size` characters (result clipping).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time
from pathlib import Path

import anyio
from mcp.server.mcpserver import Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

#: A 1x1 PNG.
TINY_PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010802000000907753de0000000c4944415408d763"
    "f8cfc000000301010018dd8db00000000049454e44ae426082"
)


def build(state: Path) -> MCPServer:
    server = MCPServer("hostd-test-tools", log_level="WARNING")

    @server.tool()
    def echo(text: str) -> str:
        """Return the text unchanged."""
        return text

    @server.tool()
    def flaky(key: str, failures: int = 2) -> str:
        """Crash the server `failures` times for this key, then succeed."""
        counter = state / f"flaky-{key}"
        seen = int(counter.read_text()) if counter.exists() else 0
        if seen < failures:
            counter.write_text(str(seen + 1))
            sys.stderr.write(f"flaky: dying on purpose ({seen + 1}/{failures})\n")
            sys.stderr.flush()
            os._exit(1)
        return f"ok {key} after {seen} failures"

    @server.tool()
    def broken(path: str) -> str:
        """Always fails: permission denied."""
        raise ToolError(f"permission denied: {path}")

    @server.tool()
    async def slow(seconds: float = 30.0) -> str:
        """Sleep, then answer."""
        await anyio.sleep(seconds)
        return f"slept {seconds:g}"

    @server.tool()
    def env_sha256(name: str) -> str:
        """The SHA-256 of environment variable `name` (to check a secret arrived unseen)."""
        return hashlib.sha256(os.environ.get(name, "").encode()).hexdigest()

    @server.tool()
    def env_value(name: str) -> str:
        """Environment variable `name` as is (a server that leaks a secret)."""
        return os.environ.get(name, "")

    @server.tool()
    def picture(caption: str = "a red dot") -> list[str | Image]:
        """A tiny PNG and its caption."""
        return [caption, Image(data=TINY_PNG, format="png")]

    @server.tool()
    def huge(size: int = 200_000) -> str:
        """Return `size` characters."""
        return ("0123456789" * (size // 10 + 1))[:size]

    return server


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--state", required=True)
    parser.add_argument("--http", type=int, default=0, help="serve streamable HTTP on this port")
    parser.add_argument("--sse", type=int, default=0, help="serve SSE on this port")
    parser.add_argument(
        "--wait-for", default="", help="answer nothing until this file exists (a late server)"
    )
    args = parser.parse_args()
    while args.wait_for and not Path(args.wait_for).exists():
        time.sleep(0.02)
    state = Path(args.state)
    state.mkdir(parents=True, exist_ok=True)
    if args.http:
        build(state).run("streamable-http", host="127.0.0.1", port=args.http)
    elif args.sse:
        build(state).run("sse", host="127.0.0.1", port=args.sse)
    else:
        build(state).run("stdio")


if __name__ == "__main__":
    main()
