"""`hostd chat [TOPIC]`, the command: its options, which topic it opens (named, the latest
with -c, one picked from a list with --pick, or a new one with a usable driver), offering to
start the daemon, and running `chat_app.ChatApp` on it. Errors end it with one line and a
non-zero exit code.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

import trio
from rich.console import Console
from rich.text import Text

from hostd.cli.chat_app import ChatApp, Quit
from hostd.cli.chat_input import chat_history, raw_terminal
from hostd.cli.common import parse_options
from hostd.client import Client, DaemonNotRunning, open_client, start_daemon
from hostd.shell.paths import Paths
from hostd_protocol.client_messages import TopicInfo
from hostd_protocol.errors import HostdError, UnknownTopic

__all__ = ["chat_main", "cmd_chat"]


def _parse_options(items: list[str]) -> dict[str, Any]:
    try:
        return parse_options(items)
    except ValueError as exc:
        raise Quit(2, str(exc)) from None


def _read_line(fd: int) -> str:
    """One line from `fd`, read a byte at a time: what follows it stays unread for the chat
    (Python's buffered `input()` would swallow piped lines meant as messages)."""
    data = b""
    while True:
        byte = os.read(fd, 1)
        if not byte or byte == b"\n":
            return data.decode(errors="replace")
        data += byte


async def _choose_topic(client: Client, *, latest: bool) -> str:
    """`chat -c`: the topic updated last; `chat --pick`: one chosen from a numbered list."""
    topics = sorted(await client.list_topics(), key=lambda t: t.updated_at, reverse=True)
    if not topics:
        raise Quit(1, "no topics yet: `hostd chat` starts one")
    if latest:
        return str(topics[0].id)
    shown = topics[:20]
    for n, t in enumerate(shown, 1):
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(t.updated_at))
        title = t.title or "(untitled)"
        print(f"{n:>3}  {when}  {title[:50]:<50}  {t.id}  {t.working_dir}")
    print(f"topic [1-{len(shown)}]: ", end="", flush=True)
    answer = (await trio.to_thread.run_sync(_read_line, sys.stdin.fileno())).strip()
    if answer.isdigit() and 1 <= int(answer) <= len(shown):
        return str(shown[int(answer) - 1].id)
    match = [str(t.id) for t in topics if t.id == answer]
    if match:
        return match[0]
    raise Quit(1, f"no topic {answer!r} in the list")


async def _open_topic(client: Client, args: argparse.Namespace) -> TopicInfo:
    """The topic named on the command line (or the latest with -c, or one picked from the
    list with --pick), or a new one; with a usable driver."""
    if getattr(args, "cont", False) or getattr(args, "pick", False):
        args.topic = await _choose_topic(client, latest=bool(getattr(args, "cont", False)))
    if args.topic:
        try:
            topic = await client.get_topic(args.topic)
        except UnknownTopic:
            raise Quit(
                1,
                f"no topic {args.topic!r}: `hostd topics` lists them; "
                "`hostd chat --driver NAME` starts a new one",
            ) from None
    else:
        topic = await client.create_topic(
            title=args.title,
            driver=args.driver,
            model=args.model,
            assistant=args.assistant,
            working_dir=args.working_dir,
            options=_parse_options(args.option),
        )
    if topic.driver:
        drivers = {d.name: d for d in await client.list_drivers()}
        info = drivers.get(topic.driver)
        if info is None:
            known = ", ".join(sorted(drivers)) or "none"
            raise Quit(
                1,
                f"driver {topic.driver!r} is not installed (installed: {known}); "
                "install its package, or pick one with --driver",
            )
        if not info.available:
            raise Quit(
                1,
                f"driver {topic.driver!r} is unavailable: {info.reason or 'it failed to load'}. "
                "Fix that, or pick another driver (`hostd drivers`).",
            )
    return topic


def _fail(message: str) -> None:
    """A failure's one line, on stderr and never wrapped (as every other command says it)."""
    print(f"hostd chat: {message}", file=sys.stderr)


def _offer_to_start(console: Console, paths: Paths, exc: DaemonNotRunning) -> bool:
    """Ask (on a terminal) whether to start the daemon; start it if yes."""
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        _fail(exc.message)
        return False
    console.print(Text(f"hostd is not running (socket {paths.socket_path}).", style="yellow"))
    try:
        answer = console.input("Start it now in the background? [Y/n] ").strip().lower()
    except (EOFError, KeyboardInterrupt):
        return False
    if answer not in ("", "y", "yes"):
        console.print("Start it later with [bold]hostd serve --detach[/bold].")
        return False
    try:
        start_daemon(paths)
    except HostdError as err:
        console.print(Text(err.message, style="red"))  # "could not start hostd: WHY"
        return False
    return True


async def chat_main(args: argparse.Namespace, console: Console, paths: Paths) -> int:
    client_name = f"hostd chat {os.getpid()}"
    stdin_fd: int | None = None
    try:
        stdin_fd = sys.stdin.fileno()
    except (OSError, ValueError, AttributeError):
        stdin_fd = None
    interactive = stdin_fd is not None and os.isatty(stdin_fd)
    async with open_client(
        paths, client_name=client_name, autostart=getattr(args, "autostart", False)
    ) as client:
        topic = await _open_topic(client, args)
        if interactive:
            assert stdin_fd is not None
            with raw_terminal(stdin_fd):
                return await _chat(client, topic, console, paths, client_name, stdin_fd, interactive)
        return await _chat(client, topic, console, paths, client_name, stdin_fd, interactive)


async def _chat(
    client: Client,
    topic: TopicInfo,
    console: Console,
    paths: Paths,
    client_name: str,
    stdin_fd: int | None,
    interactive: bool,
) -> int:
    """One `ChatApp` after the other: `/fork` switches to the new topic in this terminal,
    with the input line and what was typed after the command."""
    history = chat_history(paths.data_dir / "chat-history") if interactive else None
    carried: ChatApp | None = None
    while True:
        async with client.attach(topic.id) as sub:
            app = ChatApp(
                client,
                sub,
                console,
                client_name=client_name,
                input_fd=stdin_fd,
                interactive=interactive,
                history=history,
                editor=carried.editor if carried is not None else None,
                leftover=carried.leftover if carried is not None else None,
            )
            try:
                stored = await client.usage(topic.id)
                app.stored_usage = {t.turn_id: t.usage for t in stored.turns}
            except HostdError:
                pass  # an older daemon: the footer starts from this window's turns
            code = await app.run()
        if not app.switch_to:
            return code
        topic = await client.get_topic(app.switch_to)
        carried = app


def cmd_chat(args: argparse.Namespace) -> int:
    console = Console(highlight=False)
    paths = Paths.from_env(getattr(args, "home", None))
    # Like `claude` and `opencode`: a new topic's agent works where the command runs.
    args.working_dir = os.path.abspath(args.working_dir or os.getcwd())
    try:
        _parse_options(args.option)  # a malformed --option is said before any connection
    except Quit as exc:
        _fail(exc.message)
        return exc.code
    for attempt in range(2):
        try:
            return trio.run(chat_main, args, console, paths)
        except DaemonNotRunning as exc:
            if attempt or not _offer_to_start(console, paths, exc):
                return 1
        except Quit as exc:
            if exc.message and exc.code:
                _fail(exc.message)
            elif exc.message:
                console.print(Text(f"hostd chat: {exc.message}", style="red"))
            return exc.code
        except HostdError as exc:
            _fail(f"{exc.message} [{exc.code}]")
            return 1
        except KeyboardInterrupt:
            return 130
    return 1
