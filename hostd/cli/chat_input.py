"""Keyboard input for `hostd chat`: a sans-IO line editor, and the terminal plumbing around it.

The editor (`LineEditor.feed(text) -> list[InputEvent]`) is pure: keys in, events out, so it is
tested without a terminal. The plumbing puts a tty in a non-canonical, no-echo, no-signal mode
(the live screen draws the input line itself, and Ctrl-C arrives as a key, so "once stops,
twice quits" is decided here rather than by a signal racing the screen), and reads stdin
without threads through `trio.lowlevel.wait_readable`. Piped stdin is read as lines.

Why not readline in a thread: a canonical-mode tty echoes what is typed wherever the cursor
is, and rich's Live moves the cursor on every frame, so typed text would be smeared over the
answer. Owning the line keeps the screen coherent in tmux and plain terminals alike.
"""

from __future__ import annotations

import codecs
import os
import termios
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import trio

__all__ = [
    "EndOfInput",
    "InputEvent",
    "Interrupt",
    "LineEditor",
    "Submit",
    "raw_terminal",
    "read_chunks",
]


@dataclass(frozen=True)
class Submit:
    """Enter: the line the user typed."""

    text: str


@dataclass(frozen=True)
class Interrupt:
    """Ctrl-C."""


@dataclass(frozen=True)
class EndOfInput:
    """Ctrl-D on an empty line, or the end of piped input."""


InputEvent = Submit | Interrupt | EndOfInput

_CTRL_C = "\x03"
_CTRL_D = "\x04"
_CTRL_U = "\x15"
_CTRL_W = "\x17"
_BACKSPACES = ("\x7f", "\x08")
_ESC = "\x1b"


class LineEditor:
    """The input line: printable keys append, Backspace / Ctrl-U / Ctrl-W edit, Enter submits.

    Escape sequences (arrows, function keys) are swallowed whole, so they never land in a
    message as garbage. `text` is what the screen shows.
    """

    def __init__(self) -> None:
        self.text = ""
        self._esc = ""  # an escape sequence being skipped, across feeds

    def set(self, text: str) -> None:
        """Replace the line (e.g. a draft offered back with /edit)."""
        self.text = text

    def feed(self, data: str) -> list[InputEvent]:
        events: list[InputEvent] = []
        for ch in data:
            if self._esc:
                self._esc += ch
                if _escape_done(self._esc):
                    self._esc = ""
                continue
            if ch == _ESC:
                self._esc = ch
            elif ch in ("\r", "\n"):
                events.append(Submit(self.text))
                self.text = ""
            elif ch == _CTRL_C:
                events.append(Interrupt())
            elif ch == _CTRL_D:
                if not self.text:
                    events.append(EndOfInput())
            elif ch in _BACKSPACES:
                self.text = self.text[:-1]
            elif ch == _CTRL_U:
                self.text = ""
            elif ch == _CTRL_W:
                self.text = self.text.rstrip()
                cut = self.text.rfind(" ")
                self.text = self.text[: cut + 1] if cut >= 0 else ""
            elif ch == "\t":
                self.text += " "
            elif ch.isprintable():
                self.text += ch
        return events


def _escape_done(seq: str) -> bool:
    """Whether `seq` (starting with ESC) is a complete escape sequence."""
    if len(seq) < 2:
        return False
    kind = seq[1]
    if kind == "[":  # CSI: parameters, then a final byte in @..~
        return len(seq) > 2 and "@" <= seq[-1] <= "~"
    if kind == "O":  # SS3: one more character
        return len(seq) >= 3
    return True  # Alt+key: ESC and one character


@contextmanager
def raw_terminal(fd: int) -> Iterator[None]:
    """Keys one at a time, no echo, Ctrl-C as a key; output processing (\\n -> \\r\\n) kept.

    Restores the previous mode on exit, whatever happened.
    """
    saved = termios.tcgetattr(fd)
    mode = termios.tcgetattr(fd)
    mode[3] &= ~(termios.ICANON | termios.ECHO | termios.ISIG | termios.IEXTEN)
    mode[0] &= ~(termios.IXON | termios.ICRNL)
    mode[6][termios.VMIN] = 1
    mode[6][termios.VTIME] = 0
    termios.tcsetattr(fd, termios.TCSADRAIN, mode)
    try:
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


async def _read_some(fd: int) -> bytes:
    try:
        await trio.lowlevel.wait_readable(fd)
    except OSError:
        # Not pollable (a regular file redirected to stdin): reading it does not block long.
        return await trio.to_thread.run_sync(os.read, fd, 4096)
    return os.read(fd, 4096)


async def read_chunks(fd: int) -> AsyncIterator[str]:
    """Decoded text from `fd` as it arrives, until end of file."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    while True:
        data = await _read_some(fd)
        if not data:
            tail = decoder.decode(b"", final=True)
            if tail:
                yield tail
            return
        text = decoder.decode(data)
        if text:
            yield text
