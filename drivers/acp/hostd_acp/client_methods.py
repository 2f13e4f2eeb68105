"""The client side of ACP an agent may call: `fs/read_text_file`, `fs/write_text_file`.

Rules this module guards:

- Paths are confined to the topic's working directory: the agent must send absolute paths
  (ACP says so); a path is resolved with symlinks followed and refused unless it stays
  inside the resolved working dir, so neither `..` nor a link planted in the repository
  reaches a file outside it.
- Sizes are bounded both ways (`max_bytes`): a larger file is refused, not truncated
  silently; a larger write is refused before anything is written.
- Writes are atomic (temp file in the same folder, then rename) and never create folders
  outside the working dir.
- Every refusal is a `ClientMethodError` with a JSON-RPC code and a one-line message the
  agent can show; nothing here raises anything else for bad input.

Terminals (`terminal/*`) are not implemented and not advertised.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from hostd_acp.jsonrpc import INTERNAL_ERROR, INVALID_PARAMS


class ClientMethodError(Exception):
    """A client method refused; `code` is the JSON-RPC error code to answer with."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class FileAccess:
    """Text file access for one session, inside `root` only."""

    def __init__(self, root: str | os.PathLike[str], max_bytes: int) -> None:
        self.root = Path(root).resolve()
        self.max_bytes = max_bytes

    def _inside(self, raw: str) -> Path:
        if not raw or "\0" in raw:
            raise ClientMethodError(INVALID_PARAMS, "path is empty or invalid")
        path = Path(raw)
        if not path.is_absolute():
            raise ClientMethodError(INVALID_PARAMS, f"path must be absolute: {raw}")
        resolved = path.resolve()
        if resolved != self.root and self.root not in resolved.parents:
            raise ClientMethodError(INVALID_PARAMS, f"path is outside the working directory: {raw}")
        return resolved

    def read(self, raw_path: str, line: int | None = None, limit: int | None = None) -> str:
        """The file's text, optionally from 1-based `line` for `limit` lines."""
        path = self._inside(raw_path)
        try:
            size = path.stat().st_size
            if size > self.max_bytes:
                raise ClientMethodError(
                    INVALID_PARAMS,
                    f"file is {size} bytes, over the {self.max_bytes}-byte limit: {raw_path}",
                )
            with path.open("rb") as fh:
                data = fh.read(self.max_bytes + 1)
        except FileNotFoundError:
            raise ClientMethodError(INVALID_PARAMS, f"no such file: {raw_path}") from None
        except IsADirectoryError:
            raise ClientMethodError(INVALID_PARAMS, f"is a directory: {raw_path}") from None
        except OSError as exc:
            raise ClientMethodError(INTERNAL_ERROR, f"cannot read {raw_path}: {exc}") from None
        if len(data) > self.max_bytes:
            raise ClientMethodError(INVALID_PARAMS, f"file grew over the limit: {raw_path}")
        text = data.decode("utf-8", errors="replace")
        if line is None and limit is None:
            return text
        lines = text.splitlines(keepends=True)
        start = max((line or 1) - 1, 0)
        end = len(lines) if limit is None else start + max(limit, 0)
        return "".join(lines[start:end])

    def write(self, raw_path: str, content: str) -> None:
        """Replace (or create) the file with `content`, atomically."""
        path = self._inside(raw_path)
        data = content.encode("utf-8")
        if len(data) > self.max_bytes:
            raise ClientMethodError(
                INVALID_PARAMS,
                f"content is {len(data)} bytes, over the {self.max_bytes}-byte limit",
            )
        if path == self.root or path.is_dir():
            raise ClientMethodError(INVALID_PARAMS, f"is a directory: {raw_path}")
        parent = path.parent
        if not parent.is_dir():
            raise ClientMethodError(INVALID_PARAMS, f"folder does not exist: {parent}")
        try:
            fd, tmp = tempfile.mkstemp(dir=parent, prefix=".hostd-acp-")
            try:
                with os.fdopen(fd, "wb") as fh:
                    fh.write(data)
                os.replace(tmp, path)
            except BaseException:
                os.unlink(tmp)
                raise
        except OSError as exc:
            raise ClientMethodError(INTERNAL_ERROR, f"cannot write {raw_path}: {exc}") from None
