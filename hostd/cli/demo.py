"""`hostd demo`: hostd's main job, shown end to end with no API key.

What it does, in order (each step is checked, not just shown):

1. start a daemon (`python -m hostd serve`) in a fresh temporary HOSTD_HOME, default driver
   `scripted`, and wait for its readiness line (the `--ready-fd` pipe, not a guess);
2. open two windows (two client connections) on one topic, drawn side by side;
3. window A asks a question; the scripted answer reaches a tool call and waits there for a
   steer (`wait-steer`, so the demo needs no timing); window B steers mid-answer;
4. both windows end with the same U1 / A1a / U2 / A2 history; a late third window catches up
   from the snapshot alone;
5. the daemon is stopped and started again on the same home, and the history read back from
   disk must equal what the windows saw ("the store has them");
6. the daemon is stopped; the temporary home is removed.

Exit 0 only if every check passed, with a final `PASS:` line; otherwise `FAIL:` and why.
A daemon the demo started never outlives it (terminate, then kill, on every exit path).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import msgspec
import trio
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from hostd.cli.chat_render import render_window, roll_labels, row_text, total_usage
from hostd.client import Client, Subscription, open_client
from hostd.shell.paths import Paths
from hostd_protocol import child_process
from hostd_protocol.client_messages import MessageRow, RowAppended, TurnEnded
from hostd_protocol.common import ToolCall
from hostd_protocol.errors import HostdError

#: The answer the scripted driver plays: thinking, text, a tool call that waits (up to 10 s)
#: for a steer, then more text after the boundary (where the driver quotes the steer).
DEMO_SCRIPT = "\n".join(
    [
        "/think The user wants an overview; read the README first, then answer briefly.",
        "/text Let me read the project's **README** first, so the answer matches your code.",
        "/tool Read wait-steer=10",
        "/text In short: **hostd** owns every answer stream. Windows attach to a topic as "
        "equals, drivers translate vendor SDKs into one small event set, and every row is "
        "stored as it streams, so closing a window loses nothing.",
        "/usage 1200 180",
    ]
)
QUESTION = "What is this project, in two sentences?"
STEER = "Also mention steering"
EXPECTED_LABELS = ["U1", "A1a", "U2", "A2"]

#: Bounds: the whole demo must finish well under a minute.
DAEMON_START_TIMEOUT = 20.0
TURN_TIMEOUT = 30.0
STOP_TIMEOUT = 10.0
#: Below this terminal width the two windows are drawn one above the other.
SIDE_BY_SIDE_WIDTH = 100


class DemoFailed(Exception):
    """A step did not do what it should; the message says which and why."""


# --- the daemon the demo owns ---------------------------------------------------------------


@dataclass
class DemoDaemon:
    paths: Paths
    process: child_process.Child
    log_path: Path

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


@asynccontextmanager
async def run_daemon(home: Path, log_name: str = "daemon.out") -> AsyncIterator[DemoDaemon]:
    """`python -m hostd serve` under `home` until the block ends; never left running."""
    paths = Paths.under(home)
    log_path = home / log_name
    read_fd, write_fd = os.pipe()
    env = {**os.environ, "HOSTD_HOME": str(home), "HOSTD_LOG_LEVEL": "WARNING"}
    argv = [
        sys.executable,
        "-m",
        "hostd",
        "serve",
        "--default-driver",
        "scripted",
        "--ready-fd",
        str(write_fd),
    ]
    with _open_log(log_path) as log:
        try:
            # Stops (SIGTERM: graceful) if the demo dies before it stops the daemon.
            process = await child_process.spawn(
                argv,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log.fileno(),
                stderr=log.fileno(),
                pass_fds=(write_fd,),
                pdeathsig=signal.SIGTERM,
            )
        finally:
            os.close(write_fd)
    daemon = DemoDaemon(paths, process, log_path)
    try:
        line = await _read_ready_line(read_fd)
        word, _, rest = line.partition(" ")
        if word != "ready":
            reason = rest or line or f"it exited with code {process.returncode}"
            raise DemoFailed(f"the daemon did not start: {reason}\n{daemon.log_tail()}")
        yield daemon
    finally:
        with trio.CancelScope(shield=True):
            await _stop_process(process)


def _open_log(path: Path) -> IO[bytes]:
    # The daemon's stdout/stderr: kept in the temporary home, shown when it fails to start.
    return open(path, "ab")


async def _read_ready_line(fd: int) -> str:
    stream = trio.lowlevel.FdStream(fd)  # owns (and closes) the fd
    data = b""
    try:
        with trio.move_on_after(DAEMON_START_TIMEOUT):
            while b"\n" not in data:
                chunk = await stream.receive_some(4096)
                if not chunk:
                    break
                data += chunk
    finally:
        await stream.aclose()
    if not data:
        return f"error no readiness line within {DAEMON_START_TIMEOUT:.0f} s"
    return data.decode(errors="replace").strip()


async def _stop_process(process: child_process.Child) -> None:
    """SIGTERM (graceful: turns stopped, store flushed), then SIGKILL if it hangs."""
    process.signal(signal.SIGTERM)
    with trio.move_on_after(STOP_TIMEOUT):
        await process.wait()
    process.end_tree()
    await process.wait()


@dataclass
class TurnRef:
    """The demo's turn, known once window A's send is answered."""

    turn_id: str = ""
    known: trio.Event = field(default_factory=trio.Event)


# --- one window -----------------------------------------------------------------------------


@dataclass
class Window:
    """One client connection attached to the topic, as the demo draws it."""

    name: str
    client: Client
    sub: Subscription
    style: str
    #: Set at the first tool call (where the demo steers), or when the turn ended without one.
    steer_point: trio.Event = field(default_factory=trio.Event)
    done: trio.Event = field(default_factory=trio.Event)

    def rows(self) -> list[MessageRow]:
        rows: list[MessageRow] = self.sub.transcript.rows()
        return rows

    def panel(self) -> RenderableType:
        t = self.sub.transcript
        return render_window(
            f"window {self.name}",
            self.rows(),
            t.topic,
            t.state,
            usage=total_usage(t.usage.values()),
            approvals=len(t.approvals()),
            border_style=self.style,
        )

    async def follow(self, redraw: Callable[[], None], turn: TurnRef) -> None:
        """Apply events until the demo's turn ends; flag the first tool call."""
        ended = False
        redraw()
        async for item in self.sub:
            if isinstance(item, RowAppended) and isinstance(item.chunk, ToolCall):
                self.steer_point.set()
            redraw()
            if isinstance(item, TurnEnded):
                # The send's reply (with the turn id) may come after the turn's first events.
                await turn.known.wait()
                ended = ended or item.turn_id == turn.turn_id
            # The state change to idle follows the turn end: wait for it, so the last frame
            # shows the topic idle.
            if ended and self.sub.transcript.state != "answering":
                break
        self.steer_point.set()
        self.done.set()


def comparable(rows: list[MessageRow]) -> list[dict[str, Any]]:
    """Rows as the demo compares them: without `updated_at`, which events do not carry."""
    out = []
    for row in rows:
        d = msgspec.to_builtins(row)
        d.pop("updated_at", None)
        out.append(d)
    return out


def history_shape(rows: list[MessageRow]) -> list[str]:
    labels = roll_labels(rows)
    return [labels.get(r.id, r.role) for r in rows]


# --- the story ------------------------------------------------------------------------------


@dataclass
class Check:
    what: str
    ok: bool
    detail: str = ""


@dataclass
class DemoResult:
    checks: list[Check] = field(default_factory=list)
    windows: dict[str, list[MessageRow]] = field(default_factory=dict)
    stored: list[MessageRow] = field(default_factory=list)
    daemon_pids: list[int] = field(default_factory=list)
    error: str = ""

    @property
    def ok(self) -> bool:
        return not self.error and bool(self.checks) and all(c.ok for c in self.checks)

    def check(self, what: str, ok: bool, detail: str = "") -> None:
        self.checks.append(Check(what, ok, detail))


class Demo:
    def __init__(self, console: Console, home: Path) -> None:
        self.console = console
        self.home = home
        self.result = DemoResult()

    def say(self, step: str, text: str) -> None:
        line = Text(f"{step} ", style="bold green")
        line.append(Text.from_markup(text))
        self.console.print(line)

    async def run(self) -> DemoResult:
        c = self.console
        c.print(
            Panel(
                Text.assemble(
                    ("hostd demo", "bold"),
                    ": one daemon, two windows on one topic, a steer mid-answer.\n",
                    ("The scripted driver plays the model, so no API key is needed.", "dim"),
                ),
                border_style="green",
                expand=False,
            )
        )
        async with run_daemon(self.home) as daemon:
            self.result.daemon_pids.append(daemon.process.pid)
            self.say(
                "1.",
                f"daemon started (pid {daemon.process.pid}) in a temporary home "
                f"{self.home}, driver [bold]scripted[/bold]",
            )
            topic_id = await self._two_windows(daemon)
            await self._late_window(daemon, topic_id)
        # Restart on the same home: whatever the windows saw must come back from disk.
        async with run_daemon(self.home, "daemon2.out") as daemon2:
            self.result.daemon_pids.append(daemon2.process.pid)
            await self._stored(daemon2, topic_id)
            self.say(
                "6.",
                f"daemon restarted (pid {daemon2.process.pid}) on the same home: "
                "the history was read back from disk",
            )
        self.say("7.", "daemon stopped; nothing left running")
        return self.result

    async def _two_windows(self, daemon: DemoDaemon) -> str:
        paths = daemon.paths
        async with (
            open_client(paths, client_name="window A") as a,
            open_client(paths, client_name="window B") as b,
        ):
            topic = await a.create_topic(
                title="demo", driver="scripted", options={"scenario": DEMO_SCRIPT, "chunk_rate": 60}
            )
            async with a.attach(topic.id) as sa, b.attach(topic.id) as sb:
                wa = Window("A", a, sa, "blue")
                wb = Window("B", b, sb, "magenta")
                self.say("2.", f"two windows attached to topic [bold]{topic.id}[/bold]")
                with Live(
                    self._screen(wa, wb),
                    console=self.console,
                    auto_refresh=True,
                    refresh_per_second=12,
                    transient=False,
                ) as live:

                    def redraw() -> None:
                        live.update(self._screen(wa, wb))

                    await self._turn(wa, wb, redraw, topic.id)
                    redraw()
                    live.refresh()
                self.console.print()
            rows_a, rows_b = wa.rows(), wb.rows()
        self.result.windows = {"A": rows_a, "B": rows_b}
        shape = history_shape(rows_a)
        self.result.check(
            "the answer rolled at the steer", shape == EXPECTED_LABELS, " / ".join(shape)
        )
        self.result.check(
            "windows A and B hold the same history", comparable(rows_a) == comparable(rows_b)
        )
        self.result.check(
            "every row finished as success", all(r.status == "success" for r in rows_a)
        )
        return topic.id

    async def _turn(
        self, wa: Window, wb: Window, redraw: Callable[[], None], topic_id: str
    ) -> None:
        turn = TurnRef()
        with trio.fail_after(TURN_TIMEOUT):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(wa.follow, redraw, turn)
                nursery.start_soon(wb.follow, redraw, turn)
                sent = await wa.client.send(topic_id, QUESTION, "start")
                turn.turn_id = sent.turn_id
                turn.known.set()
                self.live_say("3.", f"window A asks: “{QUESTION}” → {sent.disposition}")
                await wb.steer_point.wait()
                steer = await wb.client.send(topic_id, STEER, "auto")
                self.live_say("4.", f"window B steers mid-answer: “{STEER}” → {steer.disposition}")
                if steer.disposition != "steered":
                    raise DemoFailed(f"the steer was {steer.disposition}, not steered")
        self.say(
            "5.",
            "the answer rolled at the tool boundary: A1a closed, U2 placed, A2 "
            "continued; both windows saw it live",
        )

    def live_say(self, step: str, text: str) -> None:
        # Printed above the live panels (rich's Live moves its region down).
        self.say(step, text)

    def _screen(self, wa: Window, wb: Window) -> RenderableType:
        if self.console.width < SIDE_BY_SIDE_WIDTH:
            return Group(wa.panel(), wb.panel())
        grid = Table.grid(expand=True, padding=(0, 1))
        grid.add_column(ratio=1)
        grid.add_column(ratio=1)
        grid.add_row(wa.panel(), wb.panel())
        return grid

    async def _late_window(self, daemon: DemoDaemon, topic_id: str) -> None:
        with trio.fail_after(10):
            async with (
                open_client(daemon.paths, client_name="window C") as late,
                late.attach(topic_id) as sub,
            ):
                rows: list[MessageRow] = sub.transcript.rows()
        self.result.check(
            "a late window catches up from the snapshot alone",
            comparable(rows) == comparable(self.result.windows["A"]),
        )

    async def _stored(self, daemon: DemoDaemon, topic_id: str) -> None:
        with trio.fail_after(10):
            async with open_client(daemon.paths, client_name="demo check") as client:
                page = await client.history(topic_id)
        self.result.stored = page.rows
        self.result.check(
            "after a daemon restart the store has the same history",
            comparable(page.rows) == comparable(self.result.windows["A"]),
            " / ".join(history_shape(page.rows)),
        )


def _summary(result: DemoResult) -> RenderableType:
    table = Table.grid(padding=(0, 1))
    for check in result.checks:
        mark = Text("✓", style="bold green") if check.ok else Text("✗", style="bold red")
        table.add_row(mark, check.what, Text(check.detail, style="dim"))
    return table


#: The checkout hostd runs from, if it does (an editable install); None from the wheels.
_CHECKOUT = Path(__file__).resolve().parents[2]


def _in_checkout() -> bool:
    return (_CHECKOUT / "scripts" / "test").is_file() and (_CHECKOUT / "docs").is_dir()


def _next_steps(*, in_checkout: bool | None = None) -> RenderableType:
    """What to try next; the checkout's scripts and docs only where they exist (installed
    from the wheels there are none)."""
    lines = [
        ("hostd serve --detach", "run your own daemon (stop it with `hostd stop`)"),
        ("hostd chat --driver scripted", "chat in the terminal; type while it answers to steer"),
        ("hostd web --open", "the same topics in the browser"),
        ("hostd drivers", "see which drivers are installed (Claude Code needs its CLI)"),
    ]
    if in_checkout if in_checkout is not None else _in_checkout():
        lines += [
            ("scripts/test", "run the whole test suite"),
            ("docs/protocol.md", "the wire protocol, for UI and driver authors"),
        ]
    else:
        lines.append(("hostd protocol-schema", "the wire protocol's JSON Schema, for UI authors"))
    table = Table.grid(padding=(0, 2))
    for cmd, what in lines:
        table.add_row(Text(cmd, style="bold cyan"), what)
    return Panel(
        table, title="where to go next", title_align="left", border_style="dim", expand=False
    )


def explain(exc: BaseException) -> str:
    """One human line for what ended the demo (nurseries wrap errors in groups: unwrap)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, DemoFailed):
        return str(exc)
    if isinstance(exc, trio.TooSlowError):
        return f"the demo's turn did not finish within {TURN_TIMEOUT:.0f} s"
    if isinstance(exc, HostdError):
        return f"{exc.message!s} [{exc.code!s}]"
    return f"{type(exc).__name__}: {exc}"


def write_report(path: str, result: DemoResult) -> None:
    """A JSON record of what the demo saw (tests assert on it)."""
    report = {
        "ok": result.ok,
        "error": result.error,
        "checks": [{"what": c.what, "ok": c.ok, "detail": c.detail} for c in result.checks],
        "labels": {name: history_shape(rows) for name, rows in result.windows.items()},
        "windows": {name: comparable(rows) for name, rows in result.windows.items()},
        "stored": comparable(result.stored),
        "stored_text": [row_text(r) for r in result.stored],
        "daemon_pids": result.daemon_pids,
    }
    Path(path).write_bytes(msgspec.json.encode(report))


def run_demo(console: Console, *, report: str | None = None) -> int:
    """Run the demo; return the exit code (0 only when every check passed)."""
    home = Path(
        tempfile.mkdtemp(prefix="hostd-demo-", dir="/tmp" if os.path.isdir("/tmp") else None)
    )  # short: AF_UNIX paths are ~104 bytes at most
    demo = Demo(console, home)
    try:
        try:
            trio.run(demo.run)
        except KeyboardInterrupt:
            demo.result.error = "interrupted"
        except Exception as exc:  # the demo is a check: say what broke, never a bare traceback
            demo.result.error = explain(exc)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    result = demo.result
    console.print()
    console.print(_summary(result))
    if report:
        write_report(report, result)
    if result.ok:
        console.print(_next_steps())
        console.print(Text("PASS: both windows agree: A1a / U2 / A2 stored", style="bold green"))
        return 0
    why = result.error or "; ".join(c.what for c in result.checks if not c.ok)
    console.print(Text(f"FAIL: {why}", style="bold red"))
    return 1


def cmd_demo(args: argparse.Namespace) -> int:
    return run_demo(Console(highlight=False), report=getattr(args, "report", None))


__all__ = ["DEMO_SCRIPT", "cmd_demo", "run_demo"]
