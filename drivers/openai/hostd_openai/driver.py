"""The OpenAI-compatible driver: one HTTP client and one MCP tool catalog per driver process.

The harness (`hostd_protocol.driver_harness`) owns the frame loop, one-turn-at-a-time, steering
and approval bookkeeping; this module wires the rest:

- `init` validates the options, reads the API key from the one variable `api_key_env` names,
  creates the HTTP client and starts one task per MCP server (connect + list tools in the
  background, in the driver's own nursery).
- `prewarm` opens a kept-alive connection to the model server; the MCP servers are already
  connecting in the background (from `init`): prewarm waits for their first attempt only as
  a turn would, until `mcp_startup_wait` after `init`.
- `run_turn` waits for MCP servers still on their first connection attempt only until
  `mcp_startup_wait` (2 s) after `init`, so no turn waits longer and a turn sent later not at
  all; it then says which servers are not ready (a notice) and runs `agent_loop.AgentLoop`,
  which picks up a server that becomes ready mid-turn at its next model step.
- Stop is the harness default: cancelling the turn closes the HTTP stream and cancels running
  tool calls; the driver keeps no per-turn state, so the next send starts clean.
"""

from __future__ import annotations

import logging
import os
import sys

import msgspec
import trio

from hostd_openai import __version__
from hostd_openai.agent_loop import DRIVER_NAME, AgentLoop
from hostd_openai.chat_client import ChatClient
from hostd_openai.config import OpenAIOptions, parse_options
from hostd_openai.mcp_config import configured_servers
from hostd_openai.mcp_tools import ToolCatalog
from hostd_protocol.common import Capabilities, TurnStatus
from hostd_protocol.driver_harness import DriverBase, TurnContext, run_driver
from hostd_protocol.driver_messages import Init, Log, Notice
from hostd_protocol.errors import InvalidArgument

log = logging.getLogger("hostd_openai")

CAPABILITIES = Capabilities(
    inject_steering=True, compaction=True, approvals=True, warm=True, needs_history=True
)


class OpenAIDriver(DriverBase):
    """The agent loop over an OpenAI-compatible server, with MCP tools."""

    name = DRIVER_NAME
    version = __version__

    def __init__(self, nursery: trio.Nursery) -> None:
        self._nursery = nursery
        self._opts = OpenAIOptions()
        self._init: Init | None = None
        self._client: ChatClient | None = None
        self._catalog = ToolCatalog()
        #: Until when (trio clock) a turn may wait for MCP servers' first connection.
        self._mcp_deadline = 0.0
        self._deferred: list[Log] = []

    @property
    def catalog(self) -> ToolCatalog:
        """The MCP servers and their tools."""
        return self._catalog

    async def init(self, init: Init) -> Capabilities:
        opts, unknown = parse_options(init.options)
        if not init.model:
            raise InvalidArgument(
                "the openai driver needs a model name (the assistant's or topic's `model`)"
            )
        self._opts = opts
        self._init = init
        api_key = os.environ.get(opts.api_key_env) if opts.api_key_env else None
        self._client = ChatClient(opts, api_key or None)
        self._catalog = ToolCatalog.from_options(opts, configured_servers(opts))
        self._catalog.start(self._nursery)
        self._mcp_deadline = trio.current_time() + opts.mcp_startup_wait
        if unknown:
            msg = f"ignored unknown openai options: {', '.join(unknown)}"
            print(f"{DRIVER_NAME}: {msg}", file=sys.stderr)
            self._deferred.append(Log(level="warning", message=msg))
        return msgspec.structs.replace(CAPABILITIES, compaction=opts.compact_on_overflow)

    async def prewarm(self) -> None:
        assert self._client is not None, "init runs first"
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._client.warm)
            # Bounded by the same deadline as a turn's wait: `Warmed` says "ready", tools
            # included when the servers can make it, and never holds a send up longer.
            nursery.start_soon(self._catalog.wait_started, self._mcp_deadline)

    async def close(self) -> None:
        if self._client is not None:
            with trio.CancelScope(shield=True), trio.move_on_after(2):
                await self._client.aclose()
        # The MCP servers' processes are ended with the driver's tree once the session is
        # over (`run_driver`: SIGTERM, then SIGKILL), their tasks when it then cancels the
        # process nursery: a server that ignores end of input cannot hold the close.

    async def run_turn(self, turn: TurnContext) -> TurnStatus | None:
        init, client = self._init, self._client
        assert init is not None and client is not None, "init runs first"
        for event in self._deferred:
            await turn.emit(event)
        self._deferred = []
        # Servers still starting get a bounded moment, counted from init: only a turn sent
        # right after the process started waits at all, and never past the deadline.
        await self._catalog.wait_started(self._mcp_deadline)
        snapshot = self._catalog.snapshot()
        for server, why in sorted(snapshot.missing.items()):
            await turn.emit(
                Notice(
                    code="mcp_server_unavailable",
                    message=f"MCP server {server!r} is not ready ({why}); its tools are "
                    "missing until it is (they join at the next model step).",
                    turn_id=turn.turn_id,
                )
            )
        model = turn.send.options.get("model") or init.model
        if not isinstance(model, str):
            raise InvalidArgument(f"invalid openai send option: model={model!r}")
        loop = AgentLoop(
            turn,
            client=client,
            opts=self._opts,
            model=model,
            system_prompt=init.system_prompt,
            catalog=self._catalog,
            snapshot=snapshot,
        )
        await loop.run()
        return None


def main() -> None:
    """Entry point: `python -m hostd_openai`. The MCP servers' tasks live in the process's
    nursery (`run_driver`), cancelled after the session ended and the process tree (each
    stdio server included) was ended."""
    logging.basicConfig(
        stream=sys.stderr,
        level=os.environ.get("HOSTD_OPENAI_LOG_LEVEL", "WARNING").upper(),
        format="%(name)s: %(levelname)s: %(message)s",
    )
    run_driver(lambda process: OpenAIDriver(process.nursery))
