"""A small deterministic ACP agent for the ACP driver's tests (trio + stdlib json).

Run as `python tests/acp/agent.py [flags]`; it speaks ACP v1 on stdin/stdout. What a prompt
does depends on its text (first word):

    hello            two message chunks and a thought, end_turn, usage
    count            one chunk, then waits for session/cancel -> stopReason cancelled
    count-late       like count, and one more update after answering the cancel
    tool             tool_call (empty input) + update with input + request_permission;
                     allowed: completed result + "Tool ran."; rejected: failed + "Tool refused."
    tool-hang        like tool, but once allowed the tool runs until session/cancel
    withdraw FIFO    request_permission, withdrawn with `$/cancel_request` once FIFO is written;
                     says "withdrawn: " and the outcome (or error code) it was answered with
    crash            one chunk, a stderr line, exit code 3
    garbage          a line that is not JSON, then a normal answer
    huge             one update of 10 MB, then "after huge"
    stranger         an update for another session id, then "ok"
    unsupported      calls terminal/create on the client and reports the error it got
    read PATH        fs/read_text_file; answers with the content or the error
    write PATH TEXT  fs/write_text_file; answers "written" or the error
    recall           lists this session's earlier prompts (works after load / resume)
    model            names the session's model (session/new offers "fast" and "smart")
    mode             names the session's mode (session/new offers "ask" and "auto", in "auto")
    anything else    "echo: <text>"

Images in a prompt (it takes them unless --no-images) are said first: "images: <mimeType>
<base64 length>, ...; ".

Flags: --protocol N (initialize answers version N), --no-initialize (never answers),
--init-delay S, --no-resume, --no-load, --ignore-eof (keeps running when stdin closes, as
claude-agent-acp does) and --child (starts a `sleep` child in its own process group, as an
agent's CLI child would be).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import trio

PROTOCOL = 1


#: The command list the agent sends after `session/new`.
COMMANDS_UPDATE: dict[str, Any] = {
    "sessionUpdate": "available_commands_update",
    "availableCommands": [
        {"name": "review", "description": "Review the changes", "input": {"hint": "path"}},
        {"name": "init", "description": "Write AGENTS.md"},
    ],
}


class Agent:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.out = trio.lowlevel.FdStream(os.dup(1))
        self.lock = trio.Lock()
        self.ids = itertools.count(1000)
        self.waiting: dict[int, trio.MemorySendChannel[dict[str, Any]]] = {}
        self.cancels: dict[str, trio.Event] = {}
        self.history: dict[str, list[str]] = {}
        self.models: dict[str, str] = {}
        self.modes: dict[str, str] = {}
        self.mcp: dict[str, list[str]] = {}
        self.store = Path.cwd() / ".acp-test-agent"

    # --- wire -----------------------------------------------------------------------------

    async def write(self, obj: dict[str, Any] | bytes) -> None:
        data = obj if isinstance(obj, bytes) else json.dumps(obj).encode() + b"\n"
        async with self.lock:
            await self.out.send_all(data)

    async def update(self, sid: str, update: dict[str, Any]) -> None:
        await self.write(
            {
                "jsonrpc": "2.0",
                "method": "session/update",
                "params": {"sessionId": sid, "update": update},
            }
        )

    async def say(self, sid: str, text: str, kind: str = "agent_message_chunk") -> None:
        await self.update(sid, {"sessionUpdate": kind, "content": {"type": "text", "text": text}})

    async def call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        rid = next(self.ids)
        send, recv = trio.open_memory_channel[dict[str, Any]](1)
        self.waiting[rid] = send
        await self.write({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        return await recv.receive()

    # --- sessions -------------------------------------------------------------------------

    def _save(self, sid: str) -> None:
        self.store.mkdir(exist_ok=True)
        (self.store / f"{sid}.json").write_text(json.dumps(self.history[sid]))

    def _load(self, sid: str) -> bool:
        path = self.store / f"{sid}.json"
        if not path.exists():
            return False
        self.history[sid] = json.loads(path.read_text())
        return True

    async def handle(self, msg: dict[str, Any], nursery: trio.Nursery) -> None:
        method = msg.get("method")
        if method is None:
            send = self.waiting.pop(msg.get("id"), None)  # type: ignore[arg-type]
            if send is not None:
                await send.send(msg)
            return
        params = msg.get("params") or {}
        rid = msg.get("id")
        if method == "initialize":
            if self.args.no_initialize:
                return
            await trio.sleep(self.args.init_delay)
            caps: dict[str, Any] = {
                "loadSession": not self.args.no_load,
                "promptCapabilities": {"image": not self.args.no_images},
            }
            if not self.args.no_resume:
                caps["sessionCapabilities"] = {"resume": {}, "close": {}}
            await self.reply(
                rid,
                {
                    "protocolVersion": self.args.protocol,
                    "agentCapabilities": caps,
                    "agentInfo": {"name": "acp-test-agent", "version": "1.2.3"},
                    "authMethods": [],
                },
            )
        elif method == "session/new":
            sid = f"sess-{uuid.uuid4().hex[:12]}"
            self.mcp[sid] = [s.get("name", "") for s in params.get("mcpServers") or []]
            self.history[sid] = []
            self._save(sid)
            self.models[sid] = "fast"
            self.modes[sid] = "auto"
            await self.reply(
                rid, {"sessionId": sid, "models": self._models(sid), "modes": self._modes(sid)}
            )
            # As claude-agent-acp does: the command list right after the answer.
            await self.update(sid, COMMANDS_UPDATE)
        elif method in ("session/load", "session/resume"):
            sid = params.get("sessionId", "")
            if not self._load(sid):
                await self.error(rid, -32002, f"session not found: {sid}")
                return
            if method == "session/load":
                for text in self.history[sid]:
                    await self.say(sid, text, "user_message_chunk")
                    await self.say(sid, f"(replayed answer to {text})")
            self.models.setdefault(sid, "fast")
            self.modes.setdefault(sid, "auto")  # a new process: the agent's default again
            await self.reply(rid, {"models": self._models(sid), "modes": self._modes(sid)})
        elif method == "session/set_model":
            self.models[params.get("sessionId", "")] = params.get("modelId", "")
            await self.reply(rid, {})
        elif method == "session/set_mode":
            mode = params.get("modeId", "")
            if mode not in ("ask", "auto"):
                await self.error(rid, -32602, f"unknown mode {mode}")
                return
            self.modes[params.get("sessionId", "")] = mode
            await self.reply(rid, {})
        elif method == "session/close":
            await self.reply(rid, {})
        elif method == "session/cancel":
            event = self.cancels.get(params.get("sessionId", ""))
            if event is not None:
                event.set()
        elif method == "session/prompt":
            nursery.start_soon(self.prompt, rid, params)
        elif rid is not None:
            await self.error(rid, -32601, f"method not found: {method}")

    def _modes(self, sid: str) -> dict[str, Any]:
        return {
            "availableModes": [{"id": "ask", "name": "Ask"}, {"id": "auto", "name": "Auto"}],
            "currentModeId": self.modes[sid],
        }

    def _models(self, sid: str) -> dict[str, Any]:
        return {
            "availableModels": [
                {"modelId": "fast", "name": "Fast"},
                {"modelId": "smart", "name": "Smart"},
            ],
            "currentModelId": self.models[sid],
        }

    async def reply(self, rid: Any, result: Any) -> None:
        await self.write({"jsonrpc": "2.0", "id": rid, "result": result})

    async def error(self, rid: Any, code: int, message: str) -> None:
        await self.write({"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": message}})

    # --- prompts --------------------------------------------------------------------------

    async def prompt(self, rid: Any, params: dict[str, Any]) -> None:
        sid = params.get("sessionId", "")
        if sid not in self.history:
            await self.error(rid, -32002, f"unknown session {sid}")
            return
        text = "".join(
            b.get("text", "") for b in params.get("prompt", []) if b.get("type") == "text"
        )
        images = [
            f"{b.get('mimeType')} {len(b.get('data', ''))}"
            for b in params.get("prompt", []) if b.get("type") == "image"
        ]
        if images:  # said first, whatever the text asks
            await self.say(sid, f"images: {', '.join(images)}; ")
        earlier = list(self.history[sid])
        self.history[sid].append(text)
        self._save(sid)
        cancelled = self.cancels[sid] = trio.Event()
        word, _, rest = text.partition(" ")
        reason = await self.run(sid, word, rest, text, earlier, cancelled)
        result: dict[str, Any] = {"stopReason": reason}
        if reason == "end_turn":
            result["usage"] = {"inputTokens": 10, "outputTokens": 5, "totalTokens": 15}
        await self.reply(rid, result)
        if word == "count-late":
            await self.say(sid, "LATE")

    async def run(
        self, sid: str, word: str, rest: str, text: str, earlier: list[str], cancelled: trio.Event
    ) -> str:
        if word == "hello":
            await self.say(sid, "pondering", "agent_thought_chunk")
            await self.say(sid, "Hello")
            await self.say(sid, " from the test agent.")
        elif word in ("count", "count-late"):
            await self.say(sid, "1\n")
            await cancelled.wait()
            return "cancelled"
        elif word in ("tool", "tool-hang"):
            return await self.tool(sid, word == "tool-hang", cancelled)
        elif word == "withdraw":
            await self.withdraw(sid, Path(rest))
        elif word == "crash":
            await self.say(sid, "about to crash")
            print("test agent: crashing on purpose", file=sys.stderr, flush=True)
            os._exit(3)
        elif word == "garbage":
            await self.write(b"this is not json\n")
            await self.say(sid, "after garbage")
        elif word == "huge":
            await self.say(sid, "x" * (10 * 1024 * 1024))
            await self.say(sid, "after huge")
        elif word == "stranger":
            await self.say("sess-nobody", "not for you")
            await self.say(sid, "ok")
        elif word == "unsupported":
            answer = await self.call("terminal/create", {"sessionId": sid, "command": "ls"})
            await self.say(sid, f"client said: {answer.get('error', {}).get('message', answer)}")
        elif word == "read":
            answer = await self.call("fs/read_text_file", {"sessionId": sid, "path": rest})
            if "error" in answer:
                await self.say(sid, f"error: {answer['error']['message']}")
            else:
                await self.say(sid, f"content: {answer['result']['content']}")
        elif word == "write":
            path, _, body = rest.partition(" ")
            answer = await self.call(
                "fs/write_text_file", {"sessionId": sid, "path": path, "content": body}
            )
            await self.say(
                sid, f"error: {answer['error']['message']}" if "error" in answer else "written"
            )
        elif word == "plan":
            for statuses in (("in_progress", "pending"), ("completed", "in_progress")):
                entries = [
                    {"content": step, "status": status, "priority": "high"}
                    for step, status in zip(("read", "write"), statuses, strict=True)
                ]
                await self.update(sid, {"sessionUpdate": "plan", "entries": entries})
                await self.say(sid, f"{statuses[0]}. ")
        elif word == "mode":
            await self.say(sid, f"mode: {self.modes.get(sid, '')}")
        elif word == "mcp":
            await self.say(sid, "mcp servers: " + ", ".join(self.mcp.get(sid, [])))
        elif word == "model":
            await self.say(sid, f"model: {self.models.get(sid, '')}")
        elif word == "recall":
            await self.say(sid, "earlier: " + " | ".join(earlier))
        else:
            await self.say(sid, f"echo: {text}")
        return "end_turn"

    async def withdraw(self, sid: str, trigger: Path) -> None:
        rid = next(self.ids)
        send, recv = trio.open_memory_channel[dict[str, Any]](1)
        self.waiting[rid] = send
        call = {"toolCallId": "call-w", "title": "rm -r build", "kind": "execute"}
        params = {
            "sessionId": sid,
            "toolCall": {**call, "rawInput": {"command": "rm -r build"}},
            "options": [
                {"optionId": "allow", "name": "Allow", "kind": "allow_once"},
                {"optionId": "reject", "name": "Reject", "kind": "reject_once"},
            ],
        }
        await self.update(sid, {"sessionUpdate": "tool_call", **call, "status": "pending"})
        request = {"jsonrpc": "2.0", "id": rid, "method": "session/request_permission"}
        await self.write({**request, "params": params})
        # A FIFO: the read returns once the test writes it (every window shows the request).
        await trio.Path(trigger).read_text()
        await self.write(
            {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": rid}}
        )
        answer = await recv.receive()
        outcome = (answer.get("result") or {}).get("outcome", {}).get("outcome")
        await self.say(sid, f"withdrawn: {outcome or answer.get('error', {}).get('code')}")

    async def tool(self, sid: str, hang: bool, cancelled: trio.Event) -> str:
        call = {"toolCallId": "call-1", "title": "touch x", "kind": "execute"}
        await self.update(
            sid, {"sessionUpdate": "tool_call", **call, "status": "pending", "rawInput": {}}
        )
        await self.update(
            sid,
            {
                "sessionUpdate": "tool_call_update",
                "toolCallId": "call-1",
                "rawInput": {"command": "touch x"},
            },
        )
        answer = await self.call(
            "session/request_permission",
            {
                "sessionId": sid,
                "toolCall": {**call, "rawInput": {"command": "touch x"}},
                "options": [
                    {"optionId": "always", "name": "Always Allow", "kind": "allow_always"},
                    {"optionId": "allow", "name": "Allow", "kind": "allow_once"},
                    {"optionId": "reject", "name": "Reject", "kind": "reject_once"},
                ],
            },
        )
        outcome = (answer.get("result") or {}).get("outcome", {})
        if outcome.get("outcome") == "cancelled" or cancelled.is_set():
            return "cancelled"
        if outcome.get("optionId") not in ("allow", "always"):
            await self.update(
                sid,
                {
                    "sessionUpdate": "tool_call_update",
                    "toolCallId": "call-1",
                    "status": "failed",
                    "content": [
                        {"type": "content", "content": {"type": "text", "text": "refused"}}
                    ],
                },
            )
            await self.say(sid, "Tool refused.")
            return "end_turn"
        await self.update(
            sid,
            {"sessionUpdate": "tool_call_update", "toolCallId": "call-1", "status": "in_progress"},
        )
        if hang:
            await cancelled.wait()
            await self.update(
                sid,
                {
                    "sessionUpdate": "tool_call_update",
                    "toolCallId": "call-1",
                    "status": "failed",
                    "content": [
                        {"type": "content", "content": {"type": "text", "text": "interrupted"}}
                    ],
                },
            )
            return "cancelled"
        await self.update(
            sid,
            {
                "sessionUpdate": "tool_call_update",
                "toolCallId": "call-1",
                "status": "completed",
                "content": [{"type": "content", "content": {"type": "text", "text": "done"}}],
            },
        )
        await self.say(
            sid, "Tool ran." if outcome.get("optionId") == "allow" else "Tool ran (always)."
        )
        return "end_turn"


async def main(args: argparse.Namespace) -> None:
    agent = Agent(args)
    stdin = trio.lowlevel.FdStream(os.dup(0))
    async with trio.open_nursery() as nursery:
        buf = b""
        while True:
            data = await stdin.receive_some(65536)
            if not data:
                break
            buf += data
            *lines, buf = buf.split(b"\n")
            for line in lines:
                if line.strip():
                    await agent.handle(json.loads(line), nursery)
        if args.ignore_eof:
            await trio.sleep_forever()
        nursery.cancel_scope.cancel()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--protocol", type=int, default=PROTOCOL)
    parser.add_argument("--no-initialize", action="store_true")
    parser.add_argument("--init-delay", type=float, default=0.0)
    parser.add_argument("--no-resume", action="store_true")
    parser.add_argument("--no-load", action="store_true")
    parser.add_argument("--ignore-eof", action="store_true")
    parser.add_argument("--child", action="store_true")
    parser.add_argument("--no-images", action="store_true")
    parsed = parser.parse_args()
    if parsed.child:
        # A child in our process group, as claude-agent-acp's Claude CLI is.
        subprocess.Popen(["sleep", "300"], stdin=subprocess.DEVNULL)
    trio.run(main, parsed)
