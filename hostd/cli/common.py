"""What the CLI commands share: paths from `--home`, the console, running one client call,
and turning errors into one human line (with how to fix it)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from rich.console import Console

from hostd.paths import Paths

_console: Console | None = None


def console() -> Console:
    global _console
    if _console is None:
        _console = Console(highlight=False, soft_wrap=True)
    return _console


def set_console(c: Console | None) -> None:
    """Tests capture output with their own `Console(color_system=None, width=...)`."""
    global _console
    _console = c


def paths_from(args: argparse.Namespace) -> Paths:
    return Paths.from_env(getattr(args, "home", None))


def fail(message: str, code: int = 1) -> int:
    Console(stderr=True, highlight=False, soft_wrap=True).print(f"hostd: {message}", markup=False)
    return code


def run_client(args: argparse.Namespace, fn: Callable[[Any], Awaitable[Any]]) -> Any:
    """Connect, run `fn(client)`, return its result; or print the error and return 1."""
    import trio

    from hostd.client import DaemonNotRunning, open_client
    from hostd_protocol.errors import HostdError

    paths = paths_from(args)

    async def main() -> Any:
        async with open_client(
            paths, client_name="hostd-cli", autostart=getattr(args, "autostart", False)
        ) as client:
            return await fn(client)

    try:
        return trio.run(main)
    except DaemonNotRunning as exc:
        return fail(exc.message)
    except HostdError as exc:
        return fail(f"{exc.message} [{exc.code}]")
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return 130
