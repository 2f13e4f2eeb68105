"""`python -m hostd_acp agents [--probe]`: list the configured ACP agents.

Without `--probe` it only says whether each agent's command is found (what `hostd drivers`
shows too). With `--probe` it starts each found agent, sends `initialize`, prints the
agent's name, version and ACP protocol version, and ends the agent's process group.
Exit code 0, or 1 when the agents file is invalid.
"""

from __future__ import annotations

import argparse
import os
import sys

import msgspec
import trio

from hostd_acp import __version__
from hostd_acp.agent_process import AgentGone, AgentProcess, AgentRpcError
from hostd_acp.config import (
    CONFIG_FILE,
    AgentConfig,
    agent_env,
    config_dir,
    load_agents,
    resolve_command,
)
from hostd_acp.schema import (
    ACP_PROTOCOL_VERSION,
    ClientCapabilities,
    InitializeParams,
    InitializeResult,
)
from hostd_protocol.errors import ConfigError


async def probe(name: str, agent: AgentConfig, command: str, timeout: float) -> str:
    """One line about `agent` from its `initialize` answer (or why there is none)."""

    async def ignore(*_: object) -> None:
        return None

    async def refuse(*_: object) -> None:
        raise AgentRpcError("probe", -32601, "not supported while probing")

    async with trio.open_nursery() as nursery:
        proc = AgentProcess(
            name,
            [command, *agent.args],
            env=agent_env(agent, os.environ),
            cwd=os.getcwd(),
            on_notification=ignore,
            on_request=refuse,
            on_drop=ignore,
            max_line=1024 * 1024,
        )
        try:
            await proc.start(nursery)
            with trio.fail_after(timeout):
                raw = await proc.request(
                    "initialize",
                    InitializeParams(
                        protocol_version=ACP_PROTOCOL_VERSION,
                        client_capabilities=ClientCapabilities(),
                        client_info={"name": "hostd", "version": __version__},
                    ),
                )
            info = msgspec.json.decode(raw, type=InitializeResult)
        except trio.TooSlowError:
            return f"no answer to initialize within {timeout:g} s"
        except AgentGone as exc:
            code = f" (exit code {exc.exit_code})" if exc.exit_code is not None else ""
            return f"{exc.message}{code}"
        except (AgentRpcError, msgspec.ValidationError) as exc:
            return f"bad initialize answer: {exc}"
        finally:
            await proc.aclose()
        who = info.agent_info
        label = f"{who.name} {who.version}".strip() if who is not None else "unnamed agent"
        ok = "" if info.protocol_version == ACP_PROTOCOL_VERSION else " (unsupported)"
        return f"{label}, ACP protocol {info.protocol_version}{ok}"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m hostd_acp agents")
    parser.add_argument("--probe", action="store_true", help="start each agent: initialize")
    parser.add_argument("--timeout", type=float, default=20.0)
    args = parser.parse_args(argv)
    path = config_dir() / CONFIG_FILE
    try:
        agents = load_agents(path)
    except ConfigError as exc:
        print(f"hostd-acp: {exc.message}", file=sys.stderr)
        return 1
    print(f"agents file: {path}{'' if path.exists() else ' (absent: built-in agents)'}")
    for name, agent in sorted(agents.agents.items()):
        command = resolve_command(agent.command, os.environ.get("PATH"))
        line = f"{name}: {agent.command} {' '.join(agent.args)}".rstrip()
        if command is None:
            print(f"{line} -- not found")
            continue
        status = trio.run(probe, name, agent, command, args.timeout) if args.probe else "found"
        print(f"{line} -- {status}")
    return 0
