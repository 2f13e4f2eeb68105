"""The chat's slash commands (pure): what a submitted input line asks for, and the help that
lists them."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["COMMANDS", "HELP", "Command", "parse_command"]

HELP = """\
[bold]Type[/bold] a message and press Enter. While an answer streams, what you type steers it
(or waits as a queued message if the driver cannot steer).
  [bold cyan]/stop[/bold cyan]          stop the answer (Ctrl-C); unsent messages come back as drafts
  [bold cyan]/discard N[/bold cyan]     drop unsent message N
  [bold cyan]/send N[/bold cyan]        send unsent message N now (stops the running answer)
  [bold cyan]/edit N[/bold cyan]        put unsent message N back on the input line
  [bold cyan]y[/bold cyan] / [bold cyan]n[/bold cyan]          allow once / deny a tool approval (also /allow, /deny [reason])
  [bold cyan]/regenerate[/bold cyan]    answer the last message again (stops a running answer)
  [bold cyan]/undo[/bold cyan]          remove the last message and its answer from the history
  [bold cyan]/fork[/bold cyan]          copy this topic (up to the last finished row) into a new one
  [bold cyan]/also T ...[/bold cyan]    more models answer each message (T: DRIVER, DRIVER/MODEL, /MODEL, @ASSISTANT)
  [bold cyan]/choose N[/bold cyan]      continue from answer N of the last message with several answers
  [bold cyan]/stop N[/bold cyan]        stop only answer N of the running message with several answers
  [bold cyan]/quit[/bold cyan]          leave (Ctrl-C twice, Ctrl-D); the daemon and the topic keep going
  [bold cyan]//text[/bold cyan]         send a message that starts with "/" (e.g. scripted directives)"""


@dataclass(frozen=True)
class Command:
    """A parsed input line: `name` "" means a plain message (`arg` holds it)."""

    name: str
    arg: str = ""


COMMANDS = frozenset(
    {
        "help",
        "quit",
        "stop",
        "discard",
        "send",
        "edit",
        "allow",
        "always",
        "deny",
        "regenerate",
        "undo",
        "fork",
        "also",
        "choose",
    }
)
_ALIASES = {"exit": "quit", "q": "quit", "?": "help", "h": "help"}


def parse_command(line: str, *, approval_open: bool = False) -> Command:
    """What a submitted line asks for. Unknown `/words` are errors, not messages."""
    text = line.strip()
    if not text:
        return Command("noop")
    if text.startswith("//"):
        return Command("", text[1:])
    if approval_open and text.lower() in ("y", "yes"):
        return Command("allow")
    if approval_open and text.lower() in ("n", "no"):
        return Command("deny")
    if approval_open and text.lower() in ("a", "always"):
        return Command("always")
    if not text.startswith("/"):
        return Command("", line)
    name, _, arg = text[1:].partition(" ")
    name = _ALIASES.get(name.lower(), name.lower())
    if name not in COMMANDS:
        return Command("unknown", name)
    return Command(name, arg.strip())
