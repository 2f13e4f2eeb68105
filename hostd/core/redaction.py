"""Secret redaction at the driver boundary, sans-IO.

The host knows every secret value it hands a driver (the session's secrets and the
credential-like variables its spec names). Everything a driver says passes through one
`Redactor` before it is stored, logged or sent: its events (chunks, tool calls and results,
notices, logs, errors), its stderr, and the errors the host builds about it.

Rules this module guards:

- A secret of `MIN_PIECE` (12) characters or more is removed wherever any piece of it that
  long appears, not only whole: a driver that prints half an API key, or a key cut in two by
  a line limit, leaks nothing a 12-character search would find.
- A shorter secret (at least `MIN_SECRET` characters) is removed where it appears whole;
  anything shorter is ignored (it would garble ordinary text and cannot be a credential).
- Redaction replaces the piece with `***` and never raises; text without secrets is returned
  as the same object (no copy), so the common case costs a few `str.find` calls.

How pieces are found fast: every window of `MIN_PIECE` characters of a secret contains a
whole block of `BLOCK` (6) characters starting at a multiple of `BLOCK` in the secret. So it
is enough to `find` those blocks (C speed) and, at each hit, extend the match left and right
against the secret; a match of `MIN_PIECE` or more is a leak.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

import msgspec

__all__ = ["MASK", "MIN_PIECE", "MIN_SECRET", "Redactor", "credential_values"]

#: The shortest piece of a long secret that counts as a leak.
MIN_PIECE = 12
#: Shorter values are not redacted at all.
MIN_SECRET = 6
#: Anchor size; must be at most MIN_PIECE // 2 so every MIN_PIECE window holds one block.
BLOCK = MIN_PIECE // 2
#: What a redacted piece becomes.
MASK = "***"

#: Names of environment variables whose values are credentials (API keys, tokens,
#: passwords, auth headers). Other variables a spec names (PATH, base URLs, regions) are not
#: secrets, and redacting every 12-character piece of PATH would garble tool output.
_CREDENTIAL_NAME = re.compile(
    r"KEY|TOKEN|SECRET|PASSW|AUTH|CREDENTIAL|HEADER|COOKIE|SESSION", re.IGNORECASE
)

T = TypeVar("T")


def is_credential_name(name: str) -> bool:
    """Whether variable `name` holds a credential by its name (API keys, tokens, ...)."""
    return bool(_CREDENTIAL_NAME.search(name))


def credential_values(names: Iterable[str], env: Mapping[str, str]) -> list[str]:
    """Values of the credential-like variables among `names` (plus proxy URLs with a
    password in them), as found in `env`."""
    values = []
    for name in names:
        value = env.get(name, "")
        if not value:
            continue
        if is_credential_name(name) or (name.upper().endswith("_PROXY") and "@" in value):
            values.append(value)
    return values


class Redactor:
    """Removes known secret values (and long pieces of them) from text and wire events."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        unique = {s for s in secrets if len(s) >= MIN_SECRET}
        #: Secrets redacted by pieces, longest first.
        self._long = sorted((s for s in unique if len(s) >= MIN_PIECE), key=len, reverse=True)
        #: Secrets redacted whole (too short for pieces), longest first.
        self._short = sorted((s for s in unique if len(s) < MIN_PIECE), key=len, reverse=True)
        self._blocks = [
            (secret, [(secret[i : i + BLOCK], i) for i in range(0, len(secret) - BLOCK + 1, BLOCK)])
            for secret in self._long
        ]
        #: How many trailing characters of a stream might be the start of a secret that the
        #: next read completes (see `StderrTail`).
        self.carry = max((len(s) for s in unique), default=1) - 1

    def __bool__(self) -> bool:
        return bool(self._long or self._short)

    def text(self, text: str) -> str:
        """`text` with every secret piece replaced by `MASK` (the same object if none)."""
        if not self or not text:
            return text
        spans: list[tuple[int, int]] = []
        for secret, blocks in self._blocks:
            for block, offset in blocks:
                pos = text.find(block)
                while pos >= 0:
                    start, end = _extend(text, pos, secret, offset)
                    if end - start >= MIN_PIECE:
                        spans.append((start, end))
                    pos = text.find(block, pos + 1)
        for secret in self._short:
            pos = text.find(secret)
            while pos >= 0:
                spans.append((pos, pos + len(secret)))
                pos = text.find(secret, pos + 1)
        if not spans:
            return text
        spans.sort()
        out: list[str] = []
        last = 0
        for start, end in spans:
            if end <= last:
                continue
            if start > last:
                out.append(text[last:start])
                out.append(MASK)
            elif not out or out[-1] != MASK:
                out.append(MASK)
            last = end
        out.append(text[last:])
        return "".join(out)

    def value(self, value: T) -> T:
        """Any wire value (a msgspec `Struct`, list, dict, str) with every string in it
        redacted; the same object when nothing changed."""
        if not self:
            return value
        result: T = _walk(self, value)
        return result


def _extend(text: str, pos: int, secret: str, offset: int) -> tuple[int, int]:
    """The span of `text` around `pos` that matches `secret` around `offset`."""
    left = 0
    while (
        left < pos and left < offset and text[pos - left - 1] == secret[offset - left - 1]
    ):
        left += 1
    right = BLOCK
    limit = min(len(text) - pos, len(secret) - offset)
    while right < limit and text[pos + right] == secret[offset + right]:
        right += 1
    return pos - left, pos + right


def _walk(r: Redactor, value: Any) -> Any:
    if isinstance(value, str):
        return r.text(value)
    if isinstance(value, msgspec.Struct):
        changes = {}
        for name in value.__struct_fields__:
            old = getattr(value, name)
            new = _walk(r, old)
            if new is not old:
                changes[name] = new
        return msgspec.structs.replace(value, **changes) if changes else value
    if isinstance(value, list | tuple):
        items = [_walk(r, v) for v in value]
        if all(a is b for a, b in zip(items, value, strict=True)):
            return value
        return items if isinstance(value, list) else tuple(items)
    if isinstance(value, dict):
        pairs = [(_walk(r, k), _walk(r, v)) for k, v in value.items()]
        if all(k2 is k and v2 is v for (k2, v2), (k, v) in zip(pairs, value.items(), strict=True)):
            return value
        return dict(pairs)
    return value
