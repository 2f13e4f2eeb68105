"""The `hostd acp` command: serve ACP on stdin/stdout for an editor (Zed, JetBrains,
Neovim), connected to the daemon (started when it is not running)."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from contextlib import AbstractAsyncContextManager


def register(sub: argparse._SubParsersAction, handlers: dict) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "acp",
        help="be an ACP agent on stdin/stdout for an editor (each session is a hostd topic)",
    )
    p.add_argument("--home", default=argparse.SUPPRESS, help="hostd folder (like HOSTD_HOME)")
    p.add_argument("--assistant", default="",
                   help="assistant of new sessions (else _meta.hostd.assistant, else default)")
    p.add_argument("--driver", default="", help="driver of new sessions (else the assistant's)")
    p.add_argument("--model", default="", help="model of new sessions")
    p.add_argument("--busy-intent", choices=("steer", "queue", "auto"), default="steer",
                   help="what a prompt sent while a turn runs does (default: steer)")
    handlers["acp"] = cmd_acp


def cmd_acp(args: argparse.Namespace) -> int:
    import trio

    from hostd import __version__
    from hostd.acp.agent import AcpAgent, AgentDefaults
    from hostd.cli.common import exit_for, fail, leaves, paths_from
    from hostd.client.async_client import Client, open_client

    defaults = AgentDefaults(
        assistant=args.assistant, driver=args.driver, model=args.model,
        busy_intent=args.busy_intent,
    )
    paths = paths_from(args)

    async def main() -> None:
        stdin = trio.lowlevel.FdStream(os.dup(0))
        stdout = trio.lowlevel.FdStream(os.dup(1))

        def connect() -> AbstractAsyncContextManager[Client]:
            # Also after the daemon stopped or crashed: started again, like at the start.
            return open_client(paths, client_name="hostd-acp", autostart=True)

        async with stdin, stdout:
            agent = AcpAgent(connect, defaults, __version__)

            async def receive() -> bytes:
                return await stdin.receive_some(65536)

            await agent.serve(receive, stdout.send_all)

    # stdout carries JSON-RPC only: anything printed by mistake goes to stderr.
    sys.stdout = sys.stderr
    if not os.isatty(0):
        # Started by an editor: Ctrl-C in a terminal reaches the whole foreground process group,
        # a terminal editor (acpx) included, which turns it into session/cancel for us; dying
        # on the signal would lose that cancel (the answer would go on). The editor ends us by
        # closing our input (or SIGTERM). At a terminal a person typing Ctrl-C means quit.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        trio.run(main)
    except BaseException as exc:
        code = exit_for(exc)
        if code is not None:
            return code
        oserr = next((e for e in leaves(exc) if isinstance(e, OSError)), None)
        if oserr is None:
            raise
        return fail(
            f"acp: cannot reach the daemon at {paths.socket_path}: "
            f"{oserr.strerror or oserr}; check --home / HOSTD_HOME"
        )
    return 0
