"""Keyboard input for `hostd chat`: a line editor fed with raw keys, and the terminal plumbing.

The editor (`LineEditor.feed(text) -> list[InputEvent]`) is pure: keys in, events out, so it is
tested without a terminal. It is built from prompt_toolkit's parts rather than its prompt:
`Vt100Parser` turns bytes into keys (escape sequences, bracketed paste, split across reads),
`Buffer` does the editing (cursor, words, lines) and a `History` (a `FileHistory` in the data
folder for the real chat) remembers what was sent. rich's live screen still draws everything,
the input line included: a prompt_toolkit application would fight it for the cursor, and a
canonical-mode tty would echo typed text wherever rich last moved the cursor.

Keys: Enter sends; Alt-Enter, Ctrl-J or a trailing backslash before Enter start a new line;
a paste (bracketed paste) is inserted whole, newlines included, and never sends by itself;
Up / Down walk the history (or move between lines of a multi-line message); Left / Right /
Home / End / Ctrl-A / Ctrl-E move; Backspace, Delete, Ctrl-W (word), Ctrl-U / Ctrl-K (to the
start / end of the line) delete; Ctrl-C interrupts; Ctrl-D on an empty message ends input.

The plumbing puts a tty in a non-canonical, no-echo, no-signal mode with bracketed paste on
(Ctrl-C arrives as a key, so "once stops, twice quits" is decided here rather than by a
signal racing the screen), and reads stdin without threads through
`trio.lowlevel.wait_readable`. Piped stdin is read as lines (`piped=True`: a newline sends).
"""

from __future__ import annotations

import codecs
import os
import sys
import termios
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import trio
from prompt_toolkit.buffer import Buffer
from prompt_toolkit.document import Document
from prompt_toolkit.history import History, InMemoryHistory
from prompt_toolkit.input.vt100_parser import Vt100Parser
from prompt_toolkit.key_binding import KeyPress
from prompt_toolkit.keys import Keys

__all__ = [
    "EndOfInput",
    "chat_history",
    "InputEvent",
    "Interrupt",
    "LineEditor",
    "Submit",
    "raw_terminal",
    "read_chunks",
]


@dataclass(frozen=True)
class Submit:
    """Enter: the message the user typed (may hold newlines)."""

    text: str


@dataclass(frozen=True)
class Interrupt:
    """Ctrl-C."""


@dataclass(frozen=True)
class EndOfInput:
    """Ctrl-D on an empty message, or the end of piped input."""


InputEvent = Submit | Interrupt | EndOfInput

#: Bracketed paste on / off (the terminal then wraps a paste in ESC[200~ ... ESC[201~).
PASTE_ON = "\x1b[?2004h"
PASTE_OFF = "\x1b[?2004l"


class LineEditor:
    """The message being typed: keys in, `InputEvent`s out; `text` and `cursor` are what the
    screen shows. `piped`: input is lines from a pipe, so a newline sends."""

    def __init__(self, history: History | None = None, *, piped: bool = False) -> None:
        self.history = history if history is not None else InMemoryHistory()
        self.piped = piped
        self._buffer = Buffer(multiline=True)
        self._keys: list[KeyPress] = []
        self._parser = Vt100Parser(self._keys.append)
        self._escape = False  # the previous key was a lone Escape (Alt-<key>)
        #: History walk: the entries (newest first), where we are, and the draft kept aside.
        self._walk: list[str] | None = None
        self._walk_at = -1
        self._draft = ""

    @property
    def text(self) -> str:
        return self._buffer.text

    @property
    def cursor(self) -> int:
        return self._buffer.cursor_position

    def set(self, text: str) -> None:
        """Replace the message (e.g. a draft offered back with /edit), cursor at its end."""
        self._buffer.set_document(Document(text, len(text)), bypass_readonly=True)
        self._walk = None

    def feed(self, data: str) -> list[InputEvent]:
        self._parser.feed(data)
        keys, self._keys[:] = list(self._keys), []
        events: list[InputEvent] = []
        for press in keys:
            event = self._key(press)
            if event is not None:
                events.append(event)
        return events

    # --- one key --------------------------------------------------------------------------

    def _key(self, press: KeyPress) -> InputEvent | None:
        key, buf = press.key, self._buffer
        alt, self._escape = self._escape, key == Keys.Escape
        if key == Keys.Escape:
            return None
        if key == Keys.BracketedPaste:
            buf.insert_text(press.data.replace("\r\n", "\n").replace("\r", "\n"))
        elif key in (Keys.ControlM, Keys.ControlJ):
            newline = alt or (key == Keys.ControlJ and not self.piped)
            if not newline and buf.document.text_before_cursor.endswith("\\"):
                buf.delete_before_cursor()  # `\` + Enter: a new line, as in many shells
                newline = True
            if newline:
                buf.insert_text("\n")
            else:
                return self._submit()
        elif key == Keys.ControlC:
            return Interrupt()
        elif key == Keys.ControlD:
            if not buf.text:
                return EndOfInput()
            buf.delete()
        elif key in (Keys.ControlH, Keys.Backspace):
            buf.delete_before_cursor()
        elif key == Keys.Delete:
            buf.delete()
        elif key == Keys.Left:
            buf.cursor_left()
        elif key == Keys.Right:
            buf.cursor_right()
        elif key in (Keys.Home, Keys.ControlA):
            buf.cursor_position += buf.document.get_start_of_line_position()
        elif key in (Keys.End, Keys.ControlE):
            buf.cursor_position += buf.document.get_end_of_line_position()
        elif key == Keys.Up:
            if buf.document.cursor_position_row > 0:
                buf.cursor_up()
            else:
                self._history(+1)
        elif key == Keys.Down:
            if buf.document.cursor_position_row < buf.document.line_count - 1:
                buf.cursor_down()
            else:
                self._history(-1)
        elif key == Keys.ControlU:
            buf.delete_before_cursor(-buf.document.get_start_of_line_position())
        elif key == Keys.ControlK:
            buf.delete(buf.document.get_end_of_line_position())
        elif key == Keys.ControlW:
            start = buf.document.find_start_of_previous_word(WORD=True) or 0
            buf.delete_before_cursor(-start)
        elif key == Keys.ControlI:
            buf.insert_text(" ")
        elif isinstance(key, str) and len(key) == 1 and key.isprintable() and not alt:
            buf.insert_text(key)  # (Alt-<key> is not text: it is swallowed)
        return None

    def _submit(self) -> Submit:
        text = self._buffer.text
        if text.strip() and not self.piped:
            self.history.append_string(text)
        self._buffer.set_document(Document(), bypass_readonly=True)
        self._walk = None
        return Submit(text)

    def _history(self, step: int) -> None:
        """Up (+1: older) / Down (-1: newer) through what was sent; past the newest entry
        is the draft that was being typed."""
        if self._walk is None:
            if step < 0:
                return
            self._walk = list(self.history.load_history_strings())
            self._walk_at = -1
            self._draft = self._buffer.text
        at = self._walk_at + step
        if at >= len(self._walk):
            return
        self._walk_at = max(at, -1)
        text = self._draft if self._walk_at < 0 else self._walk[self._walk_at]
        self._buffer.set_document(Document(text, len(text)), bypass_readonly=True)


def chat_history(path: os.PathLike[str] | str) -> History:
    """What `hostd chat` sent before, kept in `path` (created 0600: messages are private)."""
    from prompt_toolkit.history import FileHistory

    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600))
    except OSError:
        return InMemoryHistory()  # unwritable data folder: a history for this session only
    return FileHistory(os.fspath(path))


@contextmanager
def raw_terminal(fd: int) -> Iterator[None]:
    """Keys one at a time, no echo, Ctrl-C as a key, bracketed paste on; output processing
    (\\n -> \\r\\n) kept.

    Restores the previous mode on exit, whatever happened.
    """
    saved = termios.tcgetattr(fd)
    mode = termios.tcgetattr(fd)
    mode[3] &= ~(termios.ICANON | termios.ECHO | termios.ISIG | termios.IEXTEN)
    mode[0] &= ~(termios.IXON | termios.ICRNL)
    mode[6][termios.VMIN] = 1
    mode[6][termios.VTIME] = 0
    termios.tcsetattr(fd, termios.TCSADRAIN, mode)
    paste = sys.stdout.isatty()
    if paste:  # a paste arrives wrapped, so its newlines are text, not Enter
        sys.stdout.write(PASTE_ON)
        sys.stdout.flush()
    try:
        yield
    finally:
        if paste:
            sys.stdout.write(PASTE_OFF)
            sys.stdout.flush()
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
