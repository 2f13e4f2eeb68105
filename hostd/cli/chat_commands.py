"""The chat's slash commands (pure): what a submitted input line asks for, and the help that
lists them.

A line starting with `/` is a chat command when its word is one (`/stop`, `/undo`, ...).
Any other `/word` goes to the topic's agent as a message, because agents have slash commands
of their own (Claude Code's `/compact`, the scripted driver's `/text` and `/tool`
directives; the ones an agent reports, `Transcript.commands`, are listed by `/help`); only a
word a letter or two away from a chat command (`/stpo`), and not one the agent reported, is
taken for a typo and asked about rather than sent. `//` at the start always sends the line.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hostd_protocol.common import Attachment

__all__ = ["COMMANDS", "HELP", "Command", "agent_help", "parse_command"]

HELP = """\
[bold]Type[/bold] a message and press Enter. While an answer streams, what you type steers it
(or waits as a queued message if the driver cannot steer).
  [bold cyan]/stop[/bold cyan]          stop the answer (Ctrl-C); unsent messages come back as drafts
  [bold cyan]/discard N[/bold cyan]     drop unsent message N
  [bold cyan]/send N[/bold cyan]        send unsent message N now (stops the running answer)
  [bold cyan]/edit N[/bold cyan]        put unsent message N back on the input line
  [bold cyan]y[/bold cyan] / [bold cyan]n[/bold cyan]          allow once / deny a tool approval (also /allow, /deny \\[reason])
  [bold cyan]/regenerate[/bold cyan]    answer the last message again (asks before it stops a running answer)
  [bold cyan]/undo[/bold cyan]          remove the last message and its answer (asks before it stops one)
  [bold cyan]/fork [N][/bold cyan]      copy this topic up to row N (U2, A2, or 2: message 2 and its
                 answer; default: the last finished row) into a new topic and chat there
  [bold cyan]/also T ...[/bold cyan]    more models answer each message (T: DRIVER, DRIVER/MODEL, /MODEL, @ASSISTANT)
  [bold cyan]/image PATH[/bold cyan]    send an image (PNG, JPEG, GIF, WebP) with the next message
                 (/image lists them, /image clear drops them)
  [bold cyan]/choose N[/bold cyan]      continue from answer N of the last message with several answers
  [bold cyan]/stop N[/bold cyan]        stop only answer N of the running message with several answers
  [bold cyan]/quit[/bold cyan]          leave (Ctrl-C twice, Ctrl-D); the daemon and the topic keep going
  [bold cyan]/other[/bold cyan]         any other /word goes to the agent as a message (its own slash
                 commands, the scripted driver's directives); //text always sends text"""


def agent_help(commands: Sequence[tuple[str, str]]) -> str:
    """The agent's own commands (name, description) for `/help` ("" when it reported none)."""
    if not commands:
        return ""
    lines = ["The agent's own commands (sent to it as messages):"]
    for name, description in commands:
        lines.append(f"  /{name}" + (f"  {description}" if description else ""))
    return "\n".join(lines)


@dataclass(frozen=True)
class Command:
    """A parsed input line: `name` "" means a plain message (`arg` holds it); "unknown" a
    likely typo of the chat command `arg` names (`hint`: the command it resembles)."""

    name: str
    arg: str = ""
    hint: str = ""
    #: The user already said yes to what the command would stop (`/undo`, `/regenerate`).
    confirmed: bool = False
    #: A message's images (`/image`), taken when it was typed.
    images: tuple[Attachment, ...] = ()


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
        "image",
        "choose",
    }
)
_ALIASES = {"exit": "quit", "q": "quit", "?": "help", "h": "help"}


def parse_command(
    line: str, *, approval_open: bool = False, agent_commands: Collection[str] = ()
) -> Command:
    """What a submitted line asks for: a chat command, a likely typo of one ("unknown"), or a
    message (plain text, `//text`, or a `/word` the chat does not know: the agent's)."""
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
    # Split at any blank, a newline too (`/text hi\n/tool x`: a script pasted whole).
    word, arg = [*text[1:].split(None, 1), "", ""][:2]
    name = _ALIASES.get(word.lower(), word.lower())
    if not name:
        return Command("help")  # a lone `/`
    if name in COMMANDS:
        return Command(name, arg.strip())
    if name in {c.lower() for c in agent_commands}:
        return Command("", line)  # one the agent says it offers: never taken for a typo
    names = COMMANDS | {a for a in _ALIASES if len(a) > 2}
    near = [c for c in sorted(names) if len(name) >= 3 and c.startswith(name)]
    near = near or difflib.get_close_matches(name, COMMANDS, n=1, cutoff=_TYPO_CUTOFF)
    if near:
        return Command("unknown", word, hint=_ALIASES.get(near[0], near[0]))
    return Command("", line)  # the agent's own slash command or directive


#: How alike a word must be to a chat command to be taken for its typo (or be the start of
#: one, `/regen`) (difflib's ratio:
#: `stpo`/`stop` 0.75, `udno`/`undo` 0.75; `tool`/`stop` 0.5, `text`/`edit` 0.5).
_TYPO_CUTOFF = 0.75
