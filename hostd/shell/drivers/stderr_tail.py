"""The bounded tail of a driver's stderr, sans-IO; and the redacting logger of a session.

Rules this module guards:

- At most `max_lines` lines and about `max_bytes` characters are kept (the newest); a "line"
  that never ends is cut to its last `max_bytes` characters rather than buffered forever.
- Secret values (and their long pieces, `hostd.core.redaction`) are replaced by `***` before a
  line is cut, kept or returned, so neither the error shown to the user nor the debug log
  can carry an API key the driver printed. A never-ending line keeps its last
  `Redactor.carry` bytes back for the next read, so a secret split by a read is still seen
  whole.
- Bytes that are not UTF-8 never raise (replacement characters).
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Iterable
from typing import Any

from hostd.core.redaction import Redactor

__all__ = ["RedactingLog", "StderrTail"]


class StderrTail:
    """Splits a driver's stderr into lines and keeps the last few, bounded in lines and bytes.

    Sans-IO: `feed(bytes)` returns the complete lines (for the debug log); `text()` is the
    tail shown in errors. Secret values are replaced by `***` before anything is kept.
    """

    def __init__(
        self,
        max_lines: int = 64,
        max_bytes: int = 8192,
        redact: Iterable[str] | Redactor = (),
    ) -> None:
        self.max_lines = max_lines
        self.max_bytes = max_bytes
        self._redactor = redact if isinstance(redact, Redactor) else Redactor(redact)
        self._carry = min(self._redactor.carry, max_bytes // 2) if self._redactor else 0
        self._lines: collections.deque[str] = collections.deque()
        self._size = 0
        self._partial = bytearray()

    def feed(self, data: bytes | bytearray) -> list[str]:
        self._partial += data
        *complete, rest = self._partial.split(b"\n")
        self._partial = bytearray(rest)
        if len(self._partial) > self.max_bytes:
            # A "line" with no newline in sight: emit it (redacted whole, then cut to its
            # end: `_keep`), except the last bytes, which may begin a secret the next read
            # completes.
            cut = len(self._partial) - self._carry
            complete.append(self._partial[:cut])
            del self._partial[:cut]
        return [self._keep(line) for line in complete]

    def close(self) -> list[str]:
        """The stream ended: an unterminated last line still counts."""
        if not self._partial:
            return []
        line = self._keep(bytes(self._partial))
        self._partial.clear()
        return [line]

    def text(self) -> str:
        return "\n".join(self._lines)

    def _keep(self, raw: bytes | bytearray) -> str:
        line = self._redactor.text(bytes(raw).decode("utf-8", "replace").rstrip("\r"))
        if len(line) > self.max_bytes:
            line = line[-self.max_bytes :]
        self._lines.append(line)
        self._size += len(line) + 1
        while len(self._lines) > self.max_lines or (
            self._size > self.max_bytes and len(self._lines) > 1
        ):
            self._size -= len(self._lines.popleft()) + 1
        return line


class RedactingLog(logging.LoggerAdapter):  # type: ignore[type-arg]
    """The session's logger: each record's final message is redacted before it is emitted
    (arguments included, e.g. an `InvalidMessage` quoting what the driver sent)."""

    def __init__(self, logger: logging.Logger, redactor: Redactor) -> None:
        super().__init__(logger, {})
        self._redactor = redactor

    def log(self, level: int, msg: object, *args: object, **kwargs: Any) -> None:
        if not self.isEnabledFor(level):
            return
        text = str(msg) % args if args else str(msg)
        self.logger.log(level, "%s", self._redactor.text(text), **kwargs)

