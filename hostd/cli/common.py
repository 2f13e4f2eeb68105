"""What the CLI commands share: paths from `--home`, where output goes, running one request
or one client session, and turning errors into one human line (with how to fix it).

One-shot commands (`topics`, `status`, `stop`, `new`, `send`, `history`, `usage`) neither
import trio nor rich: `request` goes through the blocking `hostd.client.sync_wire`, and `out()`
prints plain text (tables with `text_table`). Importing those two would cost more than the
whole command may take (docs/benchmarks.md, "cli"). The streaming commands use
`run_client` (trio) and `console()` (rich).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from hostd.shell.paths import Paths
from hostd_protocol.common import PlanChunk

if TYPE_CHECKING:
    from rich.console import Console

    from hostd_protocol.client_messages import TopicInfo
    from hostd_protocol.errors import HostdError

_console: Console | None = None


class Output(Protocol):
    """What one-shot commands print with: a rich `Console` or `PlainOutput`."""

    def print(self, *objects: Any, style: Any = None, markup: bool | None = None,
              end: str = "\n") -> None: ...


#: Control characters a terminal would act on (C0 but tab and newline, DEL, C1), each to a
#: visible stand-in: the Unicode control pictures (ESC -> U+241B), C1 -> U+FFFD.
_CONTROLS = {c: 0x2400 + c for c in range(0x20) if c not in (0x09, 0x0A)}
_CONTROLS[0x7F] = 0x2421
_CONTROLS.update({c: 0xFFFD for c in range(0x80, 0xA0)})


def terminal_safe(text: str) -> str:
    """`text` with every control character a terminal acts on made visible.

    Titles, answers, tool names and errors come from windows, models and the tools they run
    (a repository's file, a web page): printed raw, an escape sequence in them would retitle
    or clear the user's terminal, rewrite what it shows, or set its clipboard (OSC 52). What
    a human reads is made safe here (`export` too when it writes to a terminal); `--json`
    and `export` to a file or a pipe keep the exact text."""
    return text.replace("\r\n", "\n").translate(_CONTROLS)


class PlainOutput:
    """Text lines on stdout, no styles: what one-shot commands print with (control
    characters made visible: `terminal_safe`)."""

    def print(self, *objects: Any, style: Any = None, markup: bool | None = None,
              end: str = "\n") -> None:
        sys.stdout.write(terminal_safe(" ".join(str(o) for o in objects)) + end)


class TerminalSafe:
    """An `Output` that prints through `inner` (the rich console) with every string made
    `terminal_safe`: what the streaming commands print topic content with."""

    def __init__(self, inner: Output) -> None:
        self.inner = inner

    def print(self, *objects: Any, style: Any = None, markup: bool | None = None,
              end: str = "\n") -> None:
        safe = [terminal_safe(o) if isinstance(o, str) else o for o in objects]
        self.inner.print(*safe, style=style, markup=markup, end=end)


#: A plan entry's checkbox in plain text, by status.
PLAN_BOXES = {"completed": "[x]", "in_progress": "[~]", "pending": "[ ]"}


def no_display(env: Mapping[str, str] | None = None) -> bool:
    """No window can open here: Linux with neither DISPLAY nor WAYLAND_DISPLAY (an ssh
    session, a container, CI); `hostd app` and `hostd web --app/--open` say so in one line."""
    env = os.environ if env is None else env
    return sys.platform.startswith("linux") and not (env.get("DISPLAY") or env.get("WAYLAND_DISPLAY"))


#: What `no_display` means, for messages.
NO_DISPLAY = "no graphical display (DISPLAY / WAYLAND_DISPLAY unset)"


def driver_label(topic: TopicInfo, default: str = "") -> str:
    """What a topic runs on, as every command shows it: its driver, else `@assistant` when its
    assistant picks the driver (the topic's own driver field is empty then), else `default`
    (the default assistant's driver)."""
    if topic.driver:
        return topic.driver
    return f"@{topic.assistant}" if topic.assistant else default


def plan_checklist(plan: PlanChunk) -> str:
    """The agent's plan as plain-text checklist lines: `[x] done`, `[~] doing`, `[ ] to do`."""
    return "\n".join(f"{PLAN_BOXES.get(e.status, '[ ]')} {e.content}" for e in plan.entries)


def console() -> Console:
    """The rich console of the streaming commands (created, and rich imported, on first use)."""
    global _console
    if _console is None:
        from rich.console import Console

        _console = Console(highlight=False, soft_wrap=True)
    return _console


def set_console(c: Console | None) -> None:
    """Tests capture output with their own `Console(color_system=None, width=...)`."""
    global _console
    _console = c


def out() -> Output:
    """Where one-shot commands print: a test's capture console if one is set, else stdout."""
    return _console if _console is not None else PlainOutput()


def text_table(
    headers: Sequence[str] | None,
    rows: Iterable[Sequence[object]],
    *,
    right: Iterable[int] = (),
) -> str:
    """Rows as aligned plain-text columns (two spaces apart), under `headers` if given;
    columns whose index is in `right` are right-aligned. No trailing spaces."""
    cells = [[str(c) for c in row] for row in rows]
    if headers is not None:
        cells.insert(0, list(headers))
    if not cells:
        return ""
    widths = [max(len(r[i]) for r in cells) for i in range(len(cells[0]))]
    right_cols = set(right)
    lines = []
    for r in cells:
        line = "  ".join(
            c.rjust(w) if i in right_cols else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))
        )
        lines.append(line.rstrip())
    return "\n".join(lines)


def plain(obj: Any) -> Any:
    """`obj` as JSON-ready data, msgspec structs as dicts with *every* field (the wire omits
    defaults; a script reading `--json` should not have to know them) and their tag."""
    import msgspec

    if isinstance(obj, msgspec.Struct):
        config = obj.__struct_config__
        data: dict[str, Any] = {}
        if config.tag is not None and config.tag_field is not None:
            data[config.tag_field] = config.tag
        for name in obj.__struct_fields__:
            data[name] = plain(getattr(obj, name))
        return data
    if isinstance(obj, dict):
        return {str(k): plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [plain(v) for v in obj]
    return obj


def print_json(data: Any) -> None:
    """`data` as indented JSON on stdout: what `--json` prints (see `plain`)."""
    import msgspec

    text = msgspec.json.format(msgspec.json.encode(plain(data)), indent=2).decode()
    sys.stdout.write(text + "\n")


def paths_from(args: argparse.Namespace) -> Paths:
    return Paths.from_env(getattr(args, "home", None))


#: A streaming printer left stdout's line open (an answer's text without its newline, see
#: `set_line_open`): a failure then closes it first, so its line does not read as the end of
#: the answer on a terminal ("onehostd: lost the connection ...").
_line_open = False


def set_line_open(is_open: bool) -> None:
    """Say whether stdout's current line holds streamed text that has no newline yet."""
    global _line_open
    _line_open = is_open


def parse_options(items: Iterable[str]) -> dict[str, Any]:
    """`--option KEY=VALUE` values: JSON where they parse, else text. Raises `ValueError`
    (one line) for an item without `=`, and for a value that looks like a table or a list
    but is not JSON (the TOML way of writing one, `{scope = "turn"}`, would otherwise reach
    the daemon as text and be refused as "not a policy", with no word about JSON)."""
    import msgspec

    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--option wants KEY=VALUE, got {item!r}")
        try:
            out[key] = msgspec.json.decode(value)
        except msgspec.DecodeError:
            if value.lstrip().startswith(("{", "[")):
                raise ValueError(
                    f"--option {key}: {value!r} is not JSON; write tables and lists as JSON, "
                    f"e.g. --option '{key}={{\"scope\": \"turn\"}}'"
                ) from None
            out[key] = value
    return out


def fail(message: str, code: int = 1) -> int:
    if _line_open:
        set_line_open(False)
        out().print("")
    print(f"hostd: {message}", file=sys.stderr)
    return code


#: What `request`/`requests` return when no daemon runs and the caller said that is fine.
NOT_RUNNING: Any = object()


def request(
    args: argparse.Namespace, msg: Any, *, wait_closed: bool = False, if_not_running: str = ""
) -> Any:
    """Send one request over a blocking connection and return its result; or print the
    error and return 1. With `wait_closed`, return only once the daemon closed the
    connection (after `Shutdown`). With `if_not_running`, no daemon is not an error: print
    "hostd is not running: <if_not_running>" and return NOT_RUNNING."""
    results = requests(args, msg, wait_closed=wait_closed, if_not_running=if_not_running)
    return results if isinstance(results, int) or results is NOT_RUNNING else results[0]


def requests(
    args: argparse.Namespace, *msgs: Any, wait_closed: bool = False, if_not_running: str = ""
) -> Any:
    """Send requests one after the other over one blocking connection and return their
    results in order; or print the first error and return 1 (as `request`)."""
    from hostd.client.sync_wire import DaemonNotRunning, WireClient
    from hostd_protocol.errors import HostdError

    try:
        with WireClient.open(
            paths_from(args), client_name="hostd-cli", autostart=getattr(args, "autostart", False)
        ) as wire:
            results = [wire.request(msg) for msg in msgs]
            if wait_closed:
                wire.wait_closed()
            return results
    except DaemonNotRunning as exc:
        if if_not_running:
            out().print(f"hostd is not running: {if_not_running}", markup=False)
            return NOT_RUNNING
        return fail(exc.message)
    except HostdError as exc:
        return fail(one_line(exc))
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return 130


def leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions inside `exc`, exception groups flattened (trio nurseries wrap them)."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for sub in exc.exceptions for leaf in leaves(sub)]
    return [exc]


def exit_for(exc: BaseException, *, on_interrupt: str = "") -> int | None:
    """The exit code for an exception that ended a command, after printing its one line;
    None when it is not one we know (a bug: let it raise)."""
    from hostd.client.sync_wire import DaemonNotRunning
    from hostd_protocol.errors import HostdError

    found = leaves(exc)
    if any(isinstance(e, BrokenPipeError) for e in found):
        # Whoever read our output is gone (`hostd history T | head -1`): nothing to say to
        # them; stdout is pointed at /dev/null so the interpreter's final flush is quiet too
        # (what rich does for the streaming commands, and the Python docs advise).
        import os

        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    if any(isinstance(e, KeyboardInterrupt) for e in found):
        print(file=sys.stderr)
        if on_interrupt:
            print(f"hostd: {on_interrupt}", file=sys.stderr)
        return 130
    for e in found:
        if isinstance(e, DaemonNotRunning):
            return fail(e.message)
    for e in found:
        if isinstance(e, HostdError):
            return fail(one_line(e))
    return None


def one_line(e: HostdError) -> str:
    """The line a command prints for a hostd error. A connection that ended under a command
    (the daemon stopped or crashed) says so, and where to look: its own message alone
    ("hostd closed the connection") reads like a refusal."""
    from hostd.client.sync_wire import DaemonNotRunning
    from hostd_protocol.errors import ConnectionBroken, ConnectionClosed

    line = f"{e.message} [{e.code}]"
    if isinstance(e, ConnectionBroken | ConnectionClosed) and not isinstance(e, DaemonNotRunning):
        return (f"lost the connection to hostd: {line}; `hostd status` says whether the daemon "
                "still runs, `hostd logs` why it stopped")
    return line


def run_client(
    args: argparse.Namespace, fn: Callable[[Any], Awaitable[Any]], *, on_interrupt: str = ""
) -> Any:
    """Connect, run `fn(client)`, return its result; or print the error and return its exit
    code (130 after Ctrl-C, saying `on_interrupt` if given)."""
    import trio

    from hostd.client import open_client

    paths = paths_from(args)

    async def main() -> Any:
        async with open_client(
            paths, client_name="hostd-cli", autostart=getattr(args, "autostart", False)
        ) as client:
            return await fn(client)

    try:
        return trio.run(main)
    except BaseException as exc:
        code = exit_for(exc, on_interrupt=on_interrupt)
        if code is None:
            raise
        return code
