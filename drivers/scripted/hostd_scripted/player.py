"""What a scripted turn does: `Player` runs one turn's steps (one `do_<op>` per script
directive: content, tools, approvals, compaction, reaching outside for the sandbox tests,
control and failure modes), and the deterministic text the steps generate.
"""

from __future__ import annotations

import errno
import itertools
import os
import struct
import subprocess
import sys
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import trio

from hostd_protocol import child_process
from hostd_protocol.common import (
    CommandInfo,
    CompactionAnchor,
    PlanChunk,
    PlanEntry,
    PlanStatus,
    TextDelta,
    ThinkingDelta,
    ToolCall,
    ToolResult,
    Usage,
)
from hostd_protocol.driver_harness import TurnContext, TurnFailed
from hostd_protocol.driver_messages import (
    ChunkEvent,
    CommandsEvent,
    CompactionComplete,
    CompactionError,
    CompactionStart,
    DriverEvent,
    Log,
    Notice,
    UsageEvent,
)
from hostd_protocol.framing import Codec
from hostd_scripted.script import Script, Step

if TYPE_CHECKING:
    from hostd_scripted.driver import ScriptedDriver

__all__ = ["TOOL_OUTPUTS", "WORDS", "Player", "bench_text", "split_words", "words_text"]

#: Words the generated text is made of (deterministic, plausible-looking).
WORDS = (
    "the daemon owns each answer stream so closing a window never stops it while drivers "
    "translate vendor events into one small generic set and steering reaches the model "
    "at the next tool boundary without interrupting the turn"
).split()

#: Canned tool outputs, by tool name.
TOOL_OUTPUTS = {
    "Read": "# project\n\nA small daemon with a socket API, a store and pluggable drivers.\n",
    "Bash": "README.md\nhostd\ntests\n",
    "Grep": "hostd/supervisor.py:1: The driver supervisor\n",
}


def words_text(n_chars: int, offset: int = 0) -> str:
    """`n_chars` characters of deterministic prose, starting `offset` words in."""
    out: list[str] = []
    size = 0
    for word in itertools.islice(itertools.cycle(WORDS), offset, None):
        out.append(word)
        size += len(word) + 1
        if size >= n_chars:
            break
    return " ".join(out)[:n_chars]


def split_words(text: str, per_chunk: int = 3) -> list[str]:
    """Text as chunks of a few words each, spaces kept, so joining gives the text back."""
    parts = text.split(" ")
    chunks = []
    for i in range(0, len(parts), per_chunk):
        chunk = " ".join(parts[i : i + per_chunk])
        chunks.append(chunk if i + per_chunk >= len(parts) else chunk + " ")
    return [c for c in chunks if c]


def bench_text(size: int) -> str:
    """A bench chunk: `<CLOCK_MONOTONIC ns>:` then padding up to `size` characters.

    CLOCK_MONOTONIC is system-wide, so the host subtracts it from its own
    `time.monotonic_ns()` to get the chunk's driver -> host latency.
    """
    stamp = f"{time.monotonic_ns()}:"
    return stamp + "x" * max(0, size - len(stamp))


def _opt_float(opts: Mapping[str, Any], name: str, default: float) -> float:
    value = opts.get(name, default)
    try:
        return float(value)
    except (TypeError, ValueError):
        return default


def _opt_bool(opts: Mapping[str, Any], name: str, default: bool) -> bool:
    value = opts.get(name, default)
    return value if isinstance(value, bool) else default


class Player:
    """Runs one turn's steps; holds the turn's counters."""

    def __init__(
        self, driver: ScriptedDriver, turn: TurnContext, opts: Mapping[str, Any], script: Script
    ) -> None:
        self.driver = driver
        self.turn = turn
        self.opts = opts
        self.script = script
        self.rate = _opt_float(opts, "chunk_rate", 40.0)
        self.text_offset = 0
        #: The model call in progress (a tracing host sees one per message: the turn's
        #: start or a boundary up to the next tool call or the end), and its usage.
        self.call: str | None = None
        self.call_usage: Usage | None = None

    async def begin_call(self) -> None:
        if self.call is None:
            self.call = await self.turn.model_call_start(self.driver.model, "scripted")

    async def end_call(self, finish_reason: str = "", error: str = "") -> None:
        if self.call is not None:
            call, usage, self.call, self.call_usage = self.call, self.call_usage, None, None
            await self.turn.model_call_end(
                call, finish_reason=finish_reason, usage=usage, error=error
            )

    async def play(self, step: Step) -> None:
        handler = getattr(self, f"do_{step.op.replace('-', '_')}")
        await handler(step)

    # --- content ------------------------------------------------------------------------------

    async def stream(self, chunks: list[str], rate: float, *, thinking: bool = False) -> None:
        """Emit chunks at `rate` per second (0: as fast as the pipe takes them).

        Paced against a start time, not by sleeping between chunks, so the rate holds however
        long each emit takes.
        """
        start = trio.current_time()
        for i, text in enumerate(chunks):
            if rate > 0 and i:
                await trio.sleep_until(start + i / rate)
            chunk = ThinkingDelta(text=text) if thinking else TextDelta(text=text)
            await self.turn.chunk(chunk)

    async def do_text(self, step: Step) -> None:
        await self.stream(split_words(step.rest()), self.rate)

    async def do_echo(self, step: Step) -> None:
        await self.stream(split_words(self.script.prompt or "(empty message)"), self.rate)

    async def do_think(self, step: Step) -> None:
        await self.stream(split_words(step.rest() or "Thinking."), self.rate, thinking=True)

    async def do_chunks(self, step: Step) -> None:
        n = int(step.num("n", 10, pos=0))
        size = max(1, int(step.num("size", 8)))
        rate = step.num("rate", self.rate)
        text = words_text(n * size, self.text_offset)
        self.text_offset += n
        await self.stream([text[i * size : (i + 1) * size] for i in range(n)], rate)

    async def do_bench(self, step: Step) -> None:
        n = int(step.num("n", _opt_float(self.opts, "bench_chunks", 1000), pos=0))
        size = int(step.num("size", _opt_float(self.opts, "bench_chunk_size", 64)))
        rate = step.num("rate", _opt_float(self.opts, "bench_rate", 0.0))
        start = trio.current_time()
        for i in range(n):
            if rate > 0 and i:
                await trio.sleep_until(start + i / rate)
            await self.turn.chunk(TextDelta(text=bench_text(size)))

    async def do_tool(self, step: Step) -> None:
        """A tool call and its result, then the steer injection point and message boundary.

        The pause (`pause=`, default option `tool_pause`) is while the tool "runs": the time
        a demo has to steer. `wait-steer=S` instead waits up to S seconds for a steer, so
        tests need no timing.
        """
        name = step.arg(0, "Read")
        call_id = f"call-{next(self.driver._ids)}"
        tool_input: dict[str, Any] = {"file_path": "README.md"} if name == "Read" else {}
        await self.turn.chunk(ToolCall(call_id=call_id, name=name, input=tool_input))
        await self.end_call("tool_calls")
        wait_steer = step.num("wait-steer", 0.0)
        if wait_steer > 0:
            with trio.move_on_after(wait_steer):
                # The harness has no "steer arrived" event to wait on; a 5 ms poll inside a
                # test driver costs nothing and keeps the harness API small.
                while not self.turn.has_pending_steers:  # noqa: ASYNC110
                    await trio.sleep(0.005)
        else:
            pause = step.num("pause", _opt_float(self.opts, "tool_pause", 1.5))
            if pause > 0:
                await trio.sleep(pause)
        output = step.kw.get("output", TOOL_OUTPUTS.get(name, f"{name}: ok\n"))
        await self.turn.chunk(ToolResult(call_id=call_id, output=output))
        await self.boundary()

    async def boundary(self) -> None:
        """After a tool result: inject pending steers, start the next message."""
        steers = await self.turn.take_steers()
        await self.turn.message_start()
        await self.begin_call()
        if steers:
            said = "; ".join(s.text for s in steers)
            await self.stream(
                split_words(f"You said: {said}. Taking that into account."), self.rate
            )
            await self.stream([" "], 0)

    async def do_approve(self, step: Step) -> None:
        tool = step.arg(0, "Bash")
        call_id = f"call-{next(self.driver._ids)}"
        tool_input: dict[str, Any] = {"command": "ls"}
        await self.turn.chunk(ToolCall(call_id=call_id, name=tool, input=tool_input))
        await self.end_call("tool_calls")
        answer = await self.turn.request_approval(tool, tool_input, f"run {tool}: ls")
        if answer.allow:
            await self.turn.chunk(
                ToolResult(call_id=call_id, output=TOOL_OUTPUTS.get(tool, "ok\n"))
            )
            await self.boundary()
            await self.stream(split_words(f"approved: ran {tool}."), self.rate)
        else:
            reason = answer.reason or "no reason given"
            await self.turn.chunk(
                ToolResult(call_id=call_id, output=f"denied: {reason}", is_error=True)
            )
            await self.boundary()
            await self.stream(split_words(f"denied: did not run {tool} ({reason})."), self.rate)

    async def do_compact(self, step: Step) -> None:
        mode = step.arg(0, "")
        turn_id = self.turn.turn_id
        await self.turn.emit(CompactionStart(turn_id=turn_id, trigger="manual"))
        await trio.sleep(step.num("duration", 0.01))
        if mode == "error":
            await self.turn.emit(
                CompactionError(turn_id=turn_id, message="compaction failed (scripted)")
            )
        elif mode == "anchor":
            anchor = CompactionAnchor(
                trigger="manual",
                tokens_before=120_000,
                tokens_after=8_000,
                duration_ms=10,
                summary="Summary of the conversation so far (scripted).",
            )
            await self.turn.emit(CompactionComplete(turn_id=turn_id, anchor=anchor))
        else:
            await self.turn.emit(CompactionComplete(turn_id=turn_id))

    async def do_usage(self, step: Step) -> None:
        usage = Usage(
            input_tokens=int(step.num("input", 100, pos=0)),
            output_tokens=int(step.num("output", 20, pos=1)),
        )
        await self.turn.emit(UsageEvent(turn_id=self.turn.turn_id, usage=usage))
        self.call_usage = usage

    async def do_notice(self, step: Step) -> None:
        code, _, message = step.rest().partition(" ")
        await self.turn.emit(
            Notice(code=code or "scripted", message=message, turn_id=self.turn.turn_id)
        )

    async def do_plan(self, step: Step) -> None:
        """`/plan [x] done; [~] doing; [ ] to do`: one plan chunk (the whole plan)."""
        entries = []
        for item in step.rest().split(";"):
            item = item.strip()
            if not item:
                continue
            status: PlanStatus = "pending"
            for box, named in _PLAN_BOXES.items():
                if item.startswith(box):
                    status, item = named, item[len(box) :].strip()
                    break
            entries.append(PlanEntry(content=item, status=status))
        await self.turn.chunk(PlanChunk(entries=entries))

    async def do_commands(self, step: Step) -> None:
        """`/commands NAME[:HINT] ...`: the agent's command list (empty: no commands)."""
        commands = []
        for arg in step.args:
            name, _, hint = arg.partition(":")
            commands.append(
                CommandInfo(name=name, description=f"the scripted {name}", input_hint=hint)
            )
        await self.turn.emit(CommandsEvent(commands=commands))

    async def do_whoami(self, step: Step) -> None:
        d = self.driver
        text = f"resumed {d.resumed_from}" if d.resumed_from else f"new session {d.session_token}"
        await self.turn.chunk(TextDelta(text=text))

    async def do_traceparent(self, step: Step) -> None:
        await self.turn.chunk(TextDelta(text=f"traceparent {self.turn.traceparent or '(none)'}\n"))

    async def do_history(self, step: Step) -> None:
        # What the host sent as history (a stateless vendor, or a fresh session after a
        # rewind or fork): one line per message, so tests see what the model would see.
        lines = [f"{m.role}: {m.text}" for m in self.turn.send.history]
        await self.turn.chunk(TextDelta(text="\n".join(lines) or "(no history)"))

    async def do_env(self, step: Step) -> None:
        name = step.arg(0)
        value = os.environ.get(name)
        if value is not None:
            # On stderr too, so tests can check the host redacts secrets from the tail.
            print(f"scripted: env {name}={value}", file=sys.stderr, flush=True)
        await self.turn.chunk(TextDelta(text=f"{name}={'set' if value is not None else 'unset'}"))

    async def do_leak(self, step: Step) -> None:
        """Say the value of variable NAME (and pieces of it) through every channel a driver
        has, then end as `end=` says: `error` (TurnFailed quoting it, the default), `crash`
        (exit 3), `garbage` (bad frame bytes quoting it). For the host's redaction tests."""
        value = os.environ.get(step.arg(0), "")
        pieces = [value, value[2:-2], f"x{value[len(value) // 3 :]}y", value[:13]]
        said = " | ".join(pieces)
        turn_id = self.turn.turn_id
        await self.turn.chunk(TextDelta(text=f"the key is {said}"))
        await self.turn.chunk(ThinkingDelta(text=f"thinking of {said}"))
        call_id = f"call-{next(self.driver._ids)}"
        await self.turn.chunk(
            ToolCall(call_id=call_id, name="Bash", input={"command": f"echo {said}",
                                                          said: [said, {"k": said}]})
        )
        await self.turn.chunk(ToolResult(call_id=call_id, output=said, is_error=True))
        await self.turn.emit(Notice(code="leak", message=said, turn_id=turn_id))
        await self.turn.emit(Log(level="error", message=f"log {said}"))
        await self.turn.emit(CompactionStart(turn_id=turn_id, trigger="manual"))
        await self.turn.emit(CompactionError(turn_id=turn_id, message=f"compaction {said}"))
        # One stderr "line" well over the tail's 8 KiB, no newline, the value across the cut.
        sys.stderr.write("s" * 8180 + value + "t" * 300)
        sys.stderr.write("\n" + f"stderr {said}\n")
        sys.stderr.flush()
        end = step.kw.get("end", "error")
        if end == "crash":
            await trio.sleep(0.05)
            os._exit(3)
        if end == "garbage":
            await trio.sleep(0.05)
            self.driver._write_raw(f"garbage {said}\n".encode() * 4)
            await trio.sleep_forever()
        raise TurnFailed(f"vendor said: {said}", driver=self.driver.name)

    async def do_huge(self, step: Step) -> None:
        """One event of KIND carrying SIZE characters, as one frame (size tests): `text`,
        `thinking`, `tool` (a tool result), `input` (a tool call input), `notice`, `error`
        (the turn fails with it)."""
        kind = step.arg(0, "text")
        size = int(step.num("size", 1000, pos=1))
        body = words_text(size)
        if kind == "text":
            await self.turn.chunk(TextDelta(text=body))
        elif kind == "thinking":
            await self.turn.chunk(ThinkingDelta(text=body))
        elif kind in ("tool", "input"):
            call_id = f"call-{next(self.driver._ids)}"
            tool_input = {"content": body} if kind == "input" else {}
            await self.turn.chunk(ToolCall(call_id=call_id, name="Write", input=tool_input))
            await self.turn.chunk(ToolResult(call_id=call_id, output=body if kind == "tool" else "ok"))
        elif kind == "notice":
            await self.turn.emit(Notice(code="huge", message=body, turn_id=self.turn.turn_id))
        elif kind == "error":
            raise TurnFailed(body, driver=self.driver.name)
        else:
            raise TurnFailed(f"/huge: unknown kind {kind!r}", driver=self.driver.name)

    async def do_envkeys(self, step: Step) -> None:
        await self.turn.chunk(TextDelta(text=" ".join(sorted(os.environ))))

    async def do_child(self, step: Step) -> None:
        """Start a long-lived child process, as a vendor CLI would be (kill-the-group tests)."""
        proc = await trio.lowlevel.open_process(
            [sys.executable, "-c", "import time; time.sleep(300)"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.driver.children.append(proc)
        print(f"scripted: started child pid {proc.pid}", file=sys.stderr, flush=True)
        await self.turn.chunk(TextDelta(text=f"child {proc.pid}"))

    # --- reaching outside (sandbox tests): each answers what happened, never fails the turn --

    async def do_readfile(self, step: Step) -> None:
        """`/readfile PATH`: `read N bytes: <start>` or `read-error <ERRNO>`."""
        try:
            data = await trio.Path(step.arg(0)).read_bytes()
        except OSError as exc:
            text = f"read-error {_errno_name(exc)}"
        else:
            text = f"read {len(data)} bytes: {data[:80].decode('utf-8', 'replace')}"
        await self.turn.chunk(TextDelta(text=text))

    async def do_writefile(self, step: Step) -> None:
        """`/writefile PATH [text=TEXT]`: `wrote PATH` or `write-error <ERRNO>`."""
        path = step.arg(0)
        body = step.kw.get("text", "written by hostd-scripted")
        try:
            await trio.Path(path).write_text(body)
        except OSError as exc:
            text = f"write-error {_errno_name(exc)}"
        else:
            text = f"wrote {path}"
        await self.turn.chunk(TextDelta(text=text))

    async def do_connect(self, step: Step) -> None:
        """`/connect HOST PORT`: `connected HOST:PORT` or `connect-error <ERRNO>` (5 s bound)."""
        host, port = step.arg(0, "127.0.0.1"), int(step.arg(1, "0"))
        sock = trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_STREAM)
        try:
            with trio.fail_after(5):
                await sock.connect((host, port))
        except OSError as exc:
            text = f"connect-error {_errno_name(exc)}"
        except trio.TooSlowError:
            text = "connect-error timeout"
        else:
            text = f"connected {host}:{port}"
        finally:
            sock.close()
        await self.turn.chunk(TextDelta(text=text))

    async def do_sh(self, step: Step) -> None:
        """`/sh COMMAND`: run COMMAND with `sh -c` as a tool would (60 s bound, its tree ended
        after); answers `exit N: <the end of its stdout and stderr>`."""
        def sh() -> str:
            try:
                done = child_process.run(["sh", "-c", step.rest()], timeout=60)
            except subprocess.TimeoutExpired:
                return "exit timeout"
            except OSError as exc:
                return f"exit error {_errno_name(exc)}"
            out = (done.stdout + done.stderr).decode("utf-8", "replace").strip()
            return f"exit {done.returncode}: {out[-400:]}"

        text = await trio.to_thread.run_sync(sh)
        await self.turn.chunk(TextDelta(text=text))

    async def do_pwd(self, step: Step) -> None:
        """`/pwd`: `cwd <the process's working directory>` and a newline (workspace tests)."""
        await self.turn.chunk(TextDelta(text=f"cwd {os.getcwd()}\n"))

    async def do_orphan(self, step: Step) -> None:
        """`/orphan MARKER`: a child in its own session (out of the driver's process group,
        not waited for) that sleeps 600 s with MARKER in its argv, so a test can look for it
        after the driver is gone. Answers `orphan <pid>` (a pid in the driver's namespace)."""
        proc = await trio.lowlevel.open_process(
            [sys.executable, "-c", "import time; time.sleep(600)", step.arg(0, "hostd-orphan")],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.driver.orphans.append(proc)
        await self.turn.chunk(TextDelta(text=f"orphan {proc.pid}"))

    async def do_stderr(self, step: Step) -> None:
        print(step.rest(), file=sys.stderr, flush=True)

    # --- control and failure ------------------------------------------------------------------

    async def do_sleep(self, step: Step) -> None:
        await trio.sleep(step.num("seconds", 0.1, pos=0))

    async def do_error(self, step: Step) -> None:
        raise TurnFailed(step.rest() or "scripted error", driver=self.driver.name)

    async def do_crash(self, step: Step) -> None:
        # Let what was emitted so far reach the host first: a crash *mid-turn*, after output.
        await trio.sleep(0.02)
        self.driver._crash(int(step.num("code", 3, pos=0)), "/crash")

    async def do_hang(self, step: Step) -> None:
        """Never answer, and ignore interrupts (the host must kill us)."""
        print("scripted: hanging (ignoring interrupts)", file=sys.stderr, flush=True)
        with trio.CancelScope(shield=True):
            await trio.sleep_forever()

    async def do_burst(self, step: Step) -> None:
        """N small chunk frames in one write (at most 4 KiB, so the pipe delivers them
        atomically): the host must hand them on as one batch."""
        n = int(step.num("n", 50, pos=0))
        with trio.CancelScope(shield=True):
            await trio.sleep(0.05)  # let the harness writer flush what came before
        codec: Codec[DriverEvent] = Codec(DriverEvent)
        data = codec.encode_frames(
            ChunkEvent(turn_id=self.turn.turn_id, chunk=TextDelta(text=f"{i:03d}"))
            for i in range(n)
        )
        if len(data) > 4096:
            raise TurnFailed(f"/burst {n} is {len(data)} bytes; at most 4096", driver="scripted")
        self.driver._write_raw(data)

    async def do_freeze(self, step: Step) -> None:
        """Block the whole process (its event loop too): it stops reading stdin, so the
        host's writes back up. For tests of bounded writes and the kill escalation."""
        # Let the harness writer flush what was emitted, even if a Close or Interrupt
        # arrives meanwhile (that is what the tests want to see ignored).
        with trio.CancelScope(shield=True):
            await trio.sleep(0.05)
        # Written directly, so the host sees "frozen" only once we really are.
        frozen = ChunkEvent(turn_id=self.turn.turn_id, chunk=TextDelta(text="frozen"))
        self.driver._write_raw(Codec(DriverEvent).encode_frame(frozen))
        print("scripted: freezing (blocking the event loop)", file=sys.stderr, flush=True)
        time.sleep(step.num("seconds", 300, pos=0))  # noqa: ASYNC251 - blocking on purpose

    async def do_wait(self, step: Step) -> None:
        """Wait until interrupted (a long turn that stops cleanly)."""
        await trio.sleep_forever()

    async def do_garbage(self, step: Step) -> None:
        await trio.sleep(0.02)
        print("scripted: writing garbage to the frame channel", file=sys.stderr, flush=True)
        self.driver._write_raw(b"this is not a frame\n" * 4)
        await trio.sleep_forever()

    async def do_oversized(self, step: Step) -> None:
        await trio.sleep(0.02)
        print("scripted: announcing an oversized frame", file=sys.stderr, flush=True)
        self.driver._write_raw(struct.pack(">I", 0xFFFF_FFF0) + b"\x00" * 16)
        await trio.sleep_forever()

    async def do_stray(self, step: Step) -> None:
        """Events for a turn that does not exist."""
        await self.turn.emit(ChunkEvent(turn_id="no-such-turn", chunk=TextDelta(text="stray")))
        await self.turn.emit(UsageEvent(turn_id="no-such-turn", usage=Usage(input_tokens=1)))

    async def do_late(self, step: Step) -> None:
        """An event for this turn after its `TurnEnd`."""
        trio.lowlevel.spawn_system_task(_late_event, self.turn)


async def _late_event(turn: TurnContext) -> None:
    try:
        await trio.sleep(0.05)
        await turn.emit(ChunkEvent(turn_id=turn.turn_id, chunk=TextDelta(text="late")))
    except (trio.ClosedResourceError, trio.BrokenResourceError):
        pass


_PLAN_BOXES: dict[str, PlanStatus] = {
    "[x]": "completed",
    "[~]": "in_progress",
    "[ ]": "pending",
}


def _errno_name(exc: OSError) -> str:
    return errno.errorcode.get(exc.errno or 0, str(exc.errno)) if exc.errno else type(exc).__name__
