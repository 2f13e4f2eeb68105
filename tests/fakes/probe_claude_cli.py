"""Probe: drive the real claude-agent-sdk (+ its bundled `claude` CLI) against the
fake Messages API, under trio, offline. Prints what it observes.

    /tmp/ccprobe/bin/python tests/fakes/probe_claude_cli.py [-v]

Exit status 0 when every check passed. Findings: docs/claude-sdk-findings.md.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import Any

# The repository root, so the fake's modules import as `tests.fakes.*`.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import trio

from tests.fakes.anthropic_api import (
    FakeAnthropicAPI,
    Rule,
    hang,
    has_tool_result,
    overloaded,
    prompt_too_long,
    text,
    thinking,
    tool_use,
    user_says,
    user_text_contains,
)

t0 = time.perf_counter()
import claude_agent_sdk as sdk  # noqa: E402
from claude_agent_sdk import (  # noqa: E402
    AssistantMessage,
    ClaudeAgentOptions,
    ClaudeSDKClient,
    HookMatcher,
    PermissionResultAllow,
    PermissionResultDeny,
    ResultMessage,
    StreamEvent,
    SystemMessage,
    TextBlock,
    ThinkingBlock,
    ToolPermissionContext,
    ToolResultBlock,
    ToolUseBlock,
    UserMessage,
)

IMPORT_S = time.perf_counter() - t0
VERBOSE = "-v" in sys.argv
RESULTS: list[tuple[str, bool, str]] = []


def check(name: str, ok: bool, detail: str = "") -> None:
    RESULTS.append((name, ok, detail))
    print(f"  [{'PASS' if ok else 'FAIL'}] {name} {detail}")


def short(v: Any, n: int = 120) -> str:
    s = repr(v)
    return s if len(s) <= n else s[: n - 3] + "..."


def describe(msg: Any) -> str:
    """One line per SDK message."""
    name = type(msg).__name__
    if isinstance(msg, StreamEvent):
        ev = msg.event
        extra = ev.get("delta", {}).get("type") or ev.get("content_block", {}).get("type") or ""
        return f"StreamEvent {ev.get('type')} {extra} parent={msg.parent_tool_use_id}"
    if isinstance(msg, SystemMessage):
        keys = sorted(k for k in msg.data if k not in ("type", "subtype", "uuid", "session_id"))
        return f"{name}(subtype={msg.subtype!r}) data keys={keys[:14]}"
    if isinstance(msg, AssistantMessage):
        return (
            f"AssistantMessage content={[type(b).__name__ for b in msg.content]} stop_reason={msg.stop_reason} "
            f"message_id={msg.message_id} parent={msg.parent_tool_use_id} error={msg.error}"
        )
    if isinstance(msg, UserMessage):
        c = msg.content if isinstance(msg.content, str) else [type(b).__name__ for b in msg.content]
        return (
            f"UserMessage content={short(c, 90)} tool_use_result={short(msg.tool_use_result, 60)}"
        )
    if isinstance(msg, ResultMessage):
        return (
            f"ResultMessage subtype={msg.subtype} is_error={msg.is_error} num_turns={msg.num_turns} "
            f"stop_reason={msg.stop_reason} terminal_reason={msg.terminal_reason} "
            f"api_error_status={msg.api_error_status} result={short(msg.result, 60)}"
        )
    return f"{name} {short(msg)}"


def _tool_result_content(req: Any) -> Any:
    for m in reversed(req.messages):
        for b in m["content"] if isinstance(m["content"], list) else []:
            if b.get("type") == "tool_result":
                return b.get("content")
    return None


def make_env(base_url: str, root: Path) -> dict[str, str]:
    (root / "tmp").mkdir(exist_ok=True)
    env = {
        "ANTHROPIC_BASE_URL": base_url,
        "ANTHROPIC_API_KEY": "dummy",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "DISABLE_BUG_COMMAND": "1",
        "CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY": "1",
        "HOME": str(root),
        "CLAUDE_CONFIG_DIR": str(root / ".claude"),
        "TMPDIR": str(root / "tmp"),
        "CLAUDE_CODE_TMPDIR": str(root / "tmp"),
        "CLAUDE_CODE_MAX_RETRIES": "2",
    }
    if os.geteuid() == 0:
        env["IS_SANDBOX"] = "1"  # else bypassPermissions as root makes the CLI exit 1
    return env


async def run_turn(
    client: ClaudeSDKClient,
    prompt: str,
    *,
    interrupt_after_deltas: int | None = None,
    timeout: float = 60,
    label: str = "",
) -> dict[str, Any]:
    """Send one prompt and collect messages until ResultMessage."""
    out: dict[str, Any] = {"msgs": [], "deltas": 0, "t_first_delta": None, "interrupt_s": None}
    start = time.perf_counter()
    with trio.fail_after(timeout):
        await client.query(prompt)
        async for msg in client.receive_response():
            out["msgs"].append(msg)
            if VERBOSE:
                print(f"    {time.perf_counter() - start:6.3f}s {describe(msg)}")
            if (
                isinstance(msg, StreamEvent)
                and msg.event.get("type") == "content_block_delta"
                and msg.event["delta"].get("type") == "text_delta"
            ):
                out["deltas"] += 1
                if out["t_first_delta"] is None:
                    out["t_first_delta"] = time.perf_counter() - start
                if interrupt_after_deltas is not None and out["deltas"] == interrupt_after_deltas:
                    ti = time.perf_counter()
                    await client.interrupt()
                    out["interrupt_s"] = time.perf_counter() - ti
    out["elapsed"] = time.perf_counter() - start
    out["result"] = out["msgs"][-1]
    kinds = []
    for m in out["msgs"]:
        k = type(m).__name__
        if isinstance(m, SystemMessage):
            k += f"[{m.subtype}]"
        if not kinds or kinds[-1][0] != k:
            kinds.append([k, 1])
        else:
            kinds[-1][1] += 1
    print(
        f"  {label}: {out['elapsed']:.2f}s, first text delta {out['t_first_delta'] and round(out['t_first_delta'], 3)}s;"
        f" sequence: " + ", ".join(f"{k}x{n}" if n > 1 else k for k, n in kinds)
    )
    return out


def fields_of(obj: Any) -> str:
    if is_dataclass(obj):
        return ", ".join(f"{f.name}={short(getattr(obj, f.name), 50)}" for f in fields(obj))
    return short(obj)


async def main() -> int:
    print(f"claude_agent_sdk {sdk.__version__}, import took {IMPORT_S:.2f}s")
    root = Path(tempfile.mkdtemp(prefix="ccp", dir="/tmp"))
    work = root / "work"
    work.mkdir()
    hook_calls: list[tuple[str, dict, Any, Any]] = []
    perm_calls: list[tuple[str, dict, ToolPermissionContext]] = []

    async def pre_tool_use(input_data: dict, tool_use_id: str | None, context: Any) -> dict:
        hook_calls.append(("PreToolUse", dict(input_data), tool_use_id, context))
        cmd = input_data.get("tool_input", {}).get("command", "")
        if "steer" in cmd:
            return {
                "hookSpecificOutput": {
                    "hookEventName": "PreToolUse",
                    "additionalContext": "STEER-MARKER: the user also asks: say bye",
                }
            }
        return {}

    async def post_tool_use(input_data: dict, tool_use_id: str | None, context: Any) -> dict:
        hook_calls.append(("PostToolUse", dict(input_data), tool_use_id, context))
        return {}

    async def can_use_tool(tool_name: str, tool_input: dict, ctx: ToolPermissionContext):
        perm_calls.append((tool_name, dict(tool_input), ctx))
        if "forbidden" in tool_input.get("command", ""):
            return PermissionResultDeny(message="not allowed by probe", interrupt=False)
        # rewrite the command: proves updated_input is honoured
        return PermissionResultAllow(
            updated_input={**tool_input, "command": "echo rewritten-by-can-use-tool"}
        )

    rules = [
        Rule(user_says("hello"), text("Hello there, this is a streamed answer.", chunks=5)),
        Rule(
            user_says("run echo"),
            tool_use("Bash", {"command": "echo hi", "description": "Print hi"}),
        ),
        Rule(
            user_says("run steer"),
            tool_use("Bash", {"command": "echo steer", "description": "steer test"}),
        ),
        # `echo` is read-only and auto-allowed (can_use_tool is NOT asked); `touch` asks
        Rule(
            user_says("run touch"),
            tool_use("Bash", {"command": "touch allowed.txt", "description": "x"}),
        ),
        Rule(
            user_says("run forbidden"),
            tool_use("Bash", {"command": "touch forbidden.txt", "description": "x"}),
        ),
        Rule(
            has_tool_result, lambda req: text("Tool said: " + short(_tool_result_content(req), 60))
        ),
        Rule(user_says("long answer"), text("word " * 40, chunks=40, delay=0.1)),
        Rule(user_says("think"), thinking("Pondering deeply.", "Thought done.")),
        Rule(user_says("fail"), overloaded()),
        Rule(
            user_text_contains("what did I say"),
            lambda req: text("You said: " + " | ".join(req.user_texts[:-1])),
        ),
    ]
    ok = True
    with FakeAnthropicAPI(rules) as api:
        env = make_env(api.base_url, root)
        print(f"fake API at {api.base_url}; temp root {root}")
        stderr_lines: list[str] = []
        opts = ClaudeAgentOptions(
            cwd=str(work),
            env=env,
            permission_mode="bypassPermissions",
            include_partial_messages=True,
            hooks={
                "PreToolUse": [HookMatcher(matcher="Bash", hooks=[pre_tool_use])],
                "PostToolUse": [HookMatcher(matcher=None, hooks=[post_tool_use])],
            },
            stderr=stderr_lines.append,
        )
        tc = time.perf_counter()
        client = ClaudeSDKClient(opts)
        await client.connect()
        print(f"connect() took {time.perf_counter() - tc:.2f}s")
        session_id = None
        try:
            # (a) text turn with partial messages
            print("(a) text turn")
            r = await run_turn(client, "hello", label="text")
            msgs = r["msgs"]
            init = next(
                (m for m in msgs if isinstance(m, SystemMessage) and m.subtype == "init"), None
            )
            se = [m for m in msgs if isinstance(m, StreamEvent)]
            check(
                "a: init SystemMessage",
                init is not None,
                f"data keys={sorted(init.data)[:40]}" if init else "",
            )
            if init:
                session_id = init.data.get("session_id")
                print(
                    f"     init: session_id={session_id} model={init.data.get('model')} "
                    f"permissionMode={init.data.get('permissionMode')} tools={init.data.get('tools')}"
                )
            check("a: StreamEvents", bool(se), f"types={[m.event['type'] for m in se]}")
            if se:
                print(f"     StreamEvent fields: {fields_of(se[0])}")
            check("a: 5 text deltas", r["deltas"] == 5, f"got {r['deltas']}")
            am = [m for m in msgs if isinstance(m, AssistantMessage)]
            check(
                "a: AssistantMessage text",
                bool(am)
                and isinstance(am[-1].content[0], TextBlock)
                and am[-1].content[0].text == "Hello there, this is a streamed answer.",
            )
            if am:
                print(f"     AssistantMessage fields: {fields_of(am[-1])}")
            res = r["result"]
            check(
                "a: ResultMessage success",
                isinstance(res, ResultMessage) and res.subtype == "success" and not res.is_error,
            )
            print(f"     ResultMessage fields: {fields_of(res)}")
            others = sorted({m.subtype for m in msgs if isinstance(m, SystemMessage)})
            print(f"     SystemMessage subtypes seen: {others}")
            for m in msgs:
                if isinstance(m, SystemMessage) and m.subtype != "init":
                    print(f"     SystemMessage {m.subtype}: {short(m.data, 200)}")
                    break
            req = api.message_requests[-1]
            print(
                f"     request: path={req.path} query={req.query} model={req.model} tools={len(req.body.get('tools') or [])} "
                f"messages={len(req.messages)} user blocks={len(req.messages[0]['content'])} "
                f"body keys={sorted(req.body)} headers={sorted(req.headers)}"
            )

            # (b) tool turn
            print("(b) Bash tool turn")
            n_before = len(api.message_requests)
            r = await run_turn(client, "run echo", label="tool")
            msgs = r["msgs"]
            tub = [
                b
                for m in msgs
                if isinstance(m, AssistantMessage)
                for b in m.content
                if isinstance(b, ToolUseBlock)
            ]
            trb = [
                (m, b)
                for m in msgs
                if isinstance(m, UserMessage) and not isinstance(m.content, str)
                for b in m.content
                if isinstance(b, ToolResultBlock)
            ]
            check("b: ToolUseBlock", bool(tub), fields_of(tub[0]) if tub else "")
            check(
                "b: ToolResultBlock hi",
                bool(trb) and "hi" in str(trb[0][1].content),
                f"{fields_of(trb[0][1])} | UserMessage.parent_tool_use_id={trb[0][0].parent_tool_use_id} "
                f"tool_use_result={short(trb[0][0].tool_use_result, 150)}"
                if trb
                else "",
            )
            check(
                "b: final text",
                isinstance(r["result"], ResultMessage)
                and "Tool said" in (r["result"].result or ""),
                f"result={short(r['result'].result)} num_turns={r['result'].num_turns}",
            )
            print(f"     requests this turn: {len(api.message_requests) - n_before}")
            starts = [
                m
                for m in msgs
                if isinstance(m, StreamEvent) and m.event.get("type") == "message_start"
            ]
            print(
                f"     message_start events this turn: {len(starts)} parents={[m.parent_tool_use_id for m in starts]}"
            )
            for name, inp, tid, ctx in hook_calls:
                print(
                    f"     hook {name}: tool_use_id={tid} context={ctx!r} input keys={sorted(inp)}"
                )
            check(
                "b: hooks called",
                [h[0] for h in hook_calls] == ["PreToolUse", "PostToolUse"],
                f"{[h[0] for h in hook_calls]}",
            )

            # (c) PreToolUse additionalContext -> system-reminder after tool_result in next request
            print("(c) PreToolUse additionalContext steering")
            r = await run_turn(client, "run steer", label="steer")
            follow = [q for q in api.message_requests if q.last_user_has_tool_result][-1]
            rem = follow.system_reminders_after_tool_result
            check(
                "c: reminder after tool_result",
                any("STEER-MARKER" in t for t in rem),
                short(rem, 300),
            )
            tool_req = [
                q
                for q in api.message_requests
                if q.last_user_text == "run steer" and not q.last_user_has_tool_result
            ][-1]
            print(
                f"     model={follow.model} anthropic-beta={follow.headers.get('anthropic-beta')}"
            )
            print(
                f"     tail roles/blocks: {[(m['role'], [b.get('type') for b in m['content']]) for m in follow.messages[-3:]]}"
            )
            check(
                "c: not in the request that asked for the tool",
                "STEER-MARKER" not in str(tool_req.body.get("messages")),
            )

            # thinking
            print("(x) thinking reply")
            r = await run_turn(client, "think", label="thinking")
            tb = [
                b
                for m in r["msgs"]
                if isinstance(m, AssistantMessage)
                for b in m.content
                if isinstance(b, ThinkingBlock)
            ]
            check("x: ThinkingBlock", bool(tb), fields_of(tb[0]) if tb else "")
            tdeltas = [
                m.event["delta"]["type"]
                for m in r["msgs"]
                if isinstance(m, StreamEvent) and m.event.get("type") == "content_block_delta"
            ]
            print(f"     delta types: {tdeltas}")

            # (d) interrupt mid-stream
            print("(d) interrupt mid-stream")
            r = await run_turn(client, "long answer", interrupt_after_deltas=3, label="interrupt")
            res = r["result"]
            check(
                "d: interrupted result",
                isinstance(res, ResultMessage) and res.is_error,
                f"subtype={res.subtype} terminal_reason={res.terminal_reason} interrupt() took {r['interrupt_s']:.3f}s",
            )
            check("d: fewer deltas than 40", r["deltas"] < 40, f"deltas={r['deltas']}")
            after = r["msgs"][
                [
                    i
                    for i, m in enumerate(r["msgs"])
                    if isinstance(m, StreamEvent) and m.event.get("type") == "content_block_delta"
                ][2]
                + 1 :
            ]
            print("     after interrupt: " + " ; ".join(describe(m) for m in after))
            await trio.sleep(0.3)
            lr = [q for q in api.message_requests if q.last_user_text == "long answer"][-1]
            check("d: server saw disconnect", lr.client_disconnected, f"finished={lr.finished}")
            r = await run_turn(client, "hello", label="after-interrupt")
            check(
                "d: next send works",
                isinstance(r["result"], ResultMessage) and not r["result"].is_error,
            )
            hist = api.message_requests[-1].messages
            print(
                f"     history after interrupt: {[(m['role'], short([b.get('text', b.get('type')) for b in m['content']] if isinstance(m['content'], list) else m['content'], 70)) for m in hist[-4:]]}"
            )

            # 529
            print("(y) HTTP 529 with CLAUDE_CODE_MAX_RETRIES=2")
            r = await run_turn(client, "fail", label="529", timeout=90)
            retries = [
                m for m in r["msgs"] if isinstance(m, SystemMessage) and m.subtype == "api_retry"
            ]
            res = r["result"]
            check("y: api_retry messages", len(retries) >= 1, short([m.data for m in retries], 300))
            check(
                "y: error result",
                isinstance(res, ResultMessage) and res.is_error,
                f"subtype={res.subtype} api_error_status={res.api_error_status} result={short(res.result)}",
            )
            am = [m for m in r["msgs"] if isinstance(m, AssistantMessage)]
            if am:
                print(
                    f"     AssistantMessage.error={am[-1].error} text={short(am[-1].content, 150)}"
                )
        finally:
            td = time.perf_counter()
            await client.disconnect()
            print(f"disconnect() took {time.perf_counter() - td:.2f}s")

        # (e) resume in a new client
        print("(e) resume in a new client")
        n_before = len(api.message_requests)
        opts2 = ClaudeAgentOptions(
            cwd=str(work),
            env=env,
            permission_mode="bypassPermissions",
            include_partial_messages=True,
            resume=session_id,
        )
        async with ClaudeSDKClient(opts2) as c2:
            r = await run_turn(c2, "what did I say", label="resume")
        new = api.message_requests[n_before:]
        check(
            "e: history re-sent",
            bool(new) and "hello" in new[-1].user_texts and "run echo" in new[-1].user_texts,
            f"user texts={new[-1].user_texts if new else None}",
        )
        init2 = next(
            (m for m in r["msgs"] if isinstance(m, SystemMessage) and m.subtype == "init"), None
        )
        check(
            "e: same session id",
            init2 is not None
            and init2.data.get("session_id") == session_id
            and r["result"].session_id == session_id,
            f"init={init2 and init2.data.get('session_id')} result={r['result'].session_id}",
        )

        # (c2) same steering check with a model that gets the <system-reminder> form
        print("(c2) PreToolUse additionalContext with model=claude-sonnet-4-5")
        hook_calls.clear()
        opts_s = ClaudeAgentOptions(
            cwd=str(work),
            env=env,
            permission_mode="bypassPermissions",
            model="claude-sonnet-4-5",
            hooks={"PreToolUse": [HookMatcher(matcher="Bash", hooks=[pre_tool_use])]},
        )
        async with ClaudeSDKClient(opts_s) as cs:
            await run_turn(cs, "run steer", label="steer-sonnet")
        follow = [q for q in api.message_requests if q.last_user_has_tool_result][-1]
        rem = follow.system_reminders_after_tool_result
        check(
            "c2: <system-reminder> after tool_result",
            any("STEER-MARKER" in t and t.startswith("<system-reminder>") for t in rem),
            short(rem, 300),
        )
        print(
            f"     model={follow.model} tail roles/blocks: "
            f"{[(m['role'], [b.get('type') for b in m['content']]) for m in follow.messages[-2:]]}"
        )

        # can_use_tool
        print("(f) can_use_tool (permission_mode='default')")
        perm_opts = ClaudeAgentOptions(
            cwd=str(work),
            env=env,
            permission_mode="default",
            include_partial_messages=False,
            can_use_tool=can_use_tool,
        )
        async with ClaudeSDKClient(perm_opts) as c3:
            r = await run_turn(c3, "run echo", label="echo (auto-allowed)")
            check("f: read-only echo does not ask", not perm_calls)
            r = await run_turn(c3, "run touch", label="allow")
            trb = [
                b
                for m in r["msgs"]
                if isinstance(m, UserMessage) and not isinstance(m.content, str)
                for b in m.content
                if isinstance(b, ToolResultBlock)
            ]
            check(
                "f: can_use_tool called",
                bool(perm_calls),
                f"args=({perm_calls[0][0]!r}, {perm_calls[0][1]}, ToolPermissionContext({fields_of(perm_calls[0][2])}))"
                if perm_calls
                else "",
            )
            check(
                "f: allow with updated_input",
                bool(trb) and "rewritten-by-can-use-tool" in str(trb[0].content),
                short(trb and trb[0].content),
            )
            r = await run_turn(c3, "run forbidden", label="deny")
            trb = [
                b
                for m in r["msgs"]
                if isinstance(m, UserMessage) and not isinstance(m.content, str)
                for b in m.content
                if isinstance(b, ToolResultBlock)
            ]
            check(
                "f: deny -> error tool_result",
                bool(trb) and trb[0].is_error is True,
                f"{short(trb and fields_of(trb[0]), 200)}; result.permission_denials={short(r['result'].permission_denials, 200)}",
            )

        # compaction
        print("(g) /compact")
        opts4 = ClaudeAgentOptions(
            cwd=str(work),
            env=env,
            permission_mode="bypassPermissions",
            include_partial_messages=True,
            resume=session_id,
        )
        async with ClaudeSDKClient(opts4) as c4:
            r = await run_turn(c4, "/compact", label="compact")
            creq = [q for q in api.message_requests if q.is_summary_request]
            check(
                "g: summary request seen",
                bool(creq),
                f"tools in summary request={len(creq[-1].body.get('tools') or []) if creq else None}",
            )
            sys_ = [
                (m.subtype, m.data.get("status"), m.data.get("compact_result"))
                for m in r["msgs"]
                if isinstance(m, SystemMessage)
            ]
            print(f"     system messages: {sys_}")
            cb = [
                m
                for m in r["msgs"]
                if isinstance(m, SystemMessage) and m.subtype == "compact_boundary"
            ]
            check(
                "g: compact_boundary",
                bool(cb),
                short(cb and cb[0].data.get("compact_metadata"), 300),
            )

        # steer by query() while a tool runs (CLI merges it into the tool_result message)
        print("(h) query() while the Bash tool runs")
        api.add_rule(
            user_says("run slow"),
            tool_use("Bash", {"command": "sleep 2; echo slow", "description": "slow"}),
            first=True,
        )
        async with ClaudeSDKClient(
            ClaudeAgentOptions(
                cwd=str(work),
                env=env,
                permission_mode="bypassPermissions",
                include_partial_messages=True,
            )
        ) as c5:
            n_before = len(api.message_requests)
            await c5.query("run slow")
            sent = False
            results = 0
            with trio.fail_after(60):
                async for m in c5.receive_messages():
                    if (
                        not sent
                        and isinstance(m, AssistantMessage)
                        and any(isinstance(b, ToolUseBlock) for b in m.content)
                    ):
                        await trio.sleep(0.5)
                        await c5.query("also mention cheese")
                        sent = True
                    if isinstance(m, ResultMessage):
                        results += 1
                        print(f"     {describe(m)}")
                        # wait briefly for a possible second result
                        if results == 1:
                            with trio.move_on_after(3):
                                async for m2 in c5.receive_messages():
                                    if isinstance(m2, ResultMessage):
                                        results += 1
                                        print(f"     {describe(m2)}")
                                        break
                        break
            new = api.message_requests[n_before:]
            merged = [t for q in new for t in q.texts_after_tool_result if "cheese" in t]
            print(f"     requests={len(new)} results={results} merged={short(merged, 300)}")
            check("h: mid-tool query merged into tool_result message", bool(merged))
        await probe_extra(api, env, work)
    for line in stderr_lines[:20]:
        print("  stderr:", line)
    shutil.rmtree(root, ignore_errors=True)
    failed = [n for n, o, _ in RESULTS if not o]
    print(
        f"\n{len(RESULTS) - len(failed)}/{len(RESULTS)} checks passed"
        + (f"; FAILED: {failed}" if failed else "")
    )
    return 0 if ok and not failed else 1


async def probe_extra(api: FakeAnthropicAPI, env: dict[str, str], work: Path) -> None:
    """Hang + interrupt, reader/writer in separate trio tasks, auto and reactive
    compaction, CLI killed mid-turn."""
    base = dict(
        cwd=str(work), env=env, permission_mode="bypassPermissions", include_partial_messages=True
    )

    # (d2) hang reply + interrupt, with reader and writer in different trio tasks
    print("(d2/i) Hang reply, interrupt from another trio task; disconnect from a third")
    h = hang("Thinking about it")
    api.add_rule(user_says("hang please"), h, times=1, first=True)
    client = ClaudeSDKClient(ClaudeAgentOptions(**base))
    await client.connect()
    got: list[Any] = []
    first_delta = trio.Event()
    result_seen = trio.Event()

    async def reader() -> None:
        async for m in client.receive_messages():  # one long-lived reader for the whole session
            got.append(m)
            if isinstance(m, StreamEvent) and m.event.get("type") == "content_block_delta":
                first_delta.set()
            if isinstance(m, ResultMessage):
                result_seen.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(reader)
        await client.query("hang please")
        with trio.fail_after(30):
            await first_delta.wait()
        started = await trio.to_thread.run_sync(h.wait_started, 5)
        ti = time.perf_counter()
        await client.interrupt()
        dt = time.perf_counter() - ti
        with trio.fail_after(10):
            await result_seen.wait()
        res = [m for m in got if isinstance(m, ResultMessage)][-1]
        check(
            "d2: hang started, interrupted",
            started and res.is_error and res.terminal_reason == "aborted_streaming",
            f"interrupt() {dt:.3f}s, result {res.subtype}/{res.terminal_reason}",
        )
        await trio.sleep(0.3)
        hreq = [q for q in api.message_requests if q.reply_kind == "hang"][-1]
        check("d2: server saw disconnect during hang", hreq.client_disconnected)
        # second turn on the same reader task
        result_seen = trio.Event()
        await client.query("hello")
        with trio.fail_after(30):
            await result_seen.wait()
        check(
            "i: second turn via long-lived reader task",
            not [m for m in got if isinstance(m, ResultMessage)][-1].is_error,
        )

        async def closer() -> None:
            await client.disconnect()

        nursery.start_soon(closer)  # disconnect from another task: the reader ends cleanly
    check("i: reader task ended after disconnect() from another task", True)

    # (j) auto-compaction: usage.input_tokens above the threshold
    print("(j) auto-compaction via reported input_tokens (CLAUDE_CODE_AUTO_COMPACT_WINDOW=100000)")
    api.add_rule(
        user_says("big context"), text("Big answer.", input_tokens=90_000), times=1, first=True
    )
    env_j = {**env, "CLAUDE_CODE_AUTO_COMPACT_WINDOW": "100000"}
    async with ClaudeSDKClient(ClaudeAgentOptions(**{**base, "env": env_j})) as c:
        # with a single exchange the CLI refuses ("fixed prefix > threshold",
        # compact_result="failed", compact_error="too_few_groups"): build some history first
        for w in ("one", "two", "three"):
            await run_turn(c, w, label=f"warmup-{w}")
        await run_turn(c, "big context", label="big")
        r = await run_turn(c, "after big", label="after-big")
        cb = [
            m for m in r["msgs"] if isinstance(m, SystemMessage) and m.subtype == "compact_boundary"
        ]
        check(
            "j: auto compact_boundary",
            bool(cb) and cb[0].data["compact_metadata"].get("trigger") == "auto",
            short(cb and cb[0].data["compact_metadata"], 200),
        )
        sys_ = [
            (m.subtype, m.data.get("status"), m.data.get("compact_result"))
            for m in r["msgs"]
            if isinstance(m, SystemMessage)
        ]
        print(
            f"     system messages: {sys_}; final result={r['result'].subtype} is_error={r['result'].is_error}"
            f" result={short(r['result'].result)}"
        )

    # (j2) reactive compaction: 400 prompt is too long
    print("(j2) reactive compaction: 400 'prompt is too long'")
    api.add_rule(user_says("too long"), prompt_too_long(), times=1, first=True)
    async with ClaudeSDKClient(ClaudeAgentOptions(**base)) as c:
        await run_turn(c, "hello", label="warmup")
        n0 = len(api.message_requests)
        r = await run_turn(c, "too long", label="too-long")
        kinds = [q.reply_kind for q in api.message_requests[n0:]]
        sys_ = [
            (m.subtype, m.data.get("status"), m.data.get("compact_result"))
            for m in r["msgs"]
            if isinstance(m, SystemMessage)
        ]
        print(f"     server replies: {kinds}; system messages: {sys_}")
        check(
            "j2: reactive compaction then success",
            "compact_summary" in kinds and not r["result"].is_error,
            f"result={r['result'].subtype}/{r['result'].is_error} {short(r['result'].result)}",
        )

    # (k) CLI process killed mid-turn
    print("(k) CLI killed mid-turn")
    h2 = hang("About to die")
    api.add_rule(user_says("die"), h2, times=1, first=True)
    c = ClaudeSDKClient(ClaudeAgentOptions(**base))
    await c.connect()
    err: BaseException | None = None
    seen: list[str] = []
    tk = 0.0
    try:
        await c.query("die")
        with trio.fail_after(30):
            async for m in c.receive_messages():
                seen.append(type(m).__name__)
                if (
                    isinstance(m, StreamEvent)
                    and m.event.get("type") == "content_block_delta"
                    and not tk
                ):
                    proc = c._transport._process  # private: only to simulate a crash
                    tk = time.perf_counter()
                    proc.kill()
        print("     receive_messages() ended without raising")
    except Exception as e:
        err = e
    finally:
        h2.release()
        dk = time.perf_counter() - tk
        await c.disconnect()
    check(
        "k: crash surfaces as exception from receive_messages()",
        err is not None,
        f"{type(err).__name__}: {short(str(err), 150)} after {dk:.3f}s; exit_code={getattr(err, 'exit_code', None)}",
    )


if __name__ == "__main__":
    sys.exit(trio.run(main))
