"""Read the daemon's database independently of hostd's store (stdlib sqlite3), for checks.

The reliability suite must not trust the code it attacks, so it reads the file with another
SQLite binding. Open it only while the daemon is dead, or read-only beside a live one (WAL).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from hostd_protocol.common import Chunk, TextDelta, ThinkingDelta

__all__ = ["StoredRow", "db_bytes_contain", "integrity_check", "read_rows", "row_text"]

# Parts are JSON text since schema 4 (msgpack blobs before it).
_parts = msgspec.json.Decoder(list[Chunk])
_old_parts = msgspec.msgpack.Decoder(list[Chunk])


@dataclass(frozen=True)
class StoredRow:
    id: str
    topic_id: str
    role: str
    status: str
    position: int
    turn_id: str
    parts: list[Chunk]
    error: str
    error_code: str
    #: Streamed pieces stored after the row's whole parts (schema 8), merged into `parts`.
    pieces: int = 0

    @property
    def text(self) -> str:
        return row_text(self.parts)


def row_text(parts: list[Any]) -> str:
    """The answer text of a row: its text parts joined (thinking and tools left out)."""
    return "".join(p.text for p in parts if isinstance(p, TextDelta))


def _connect(path: Path, readonly: bool) -> sqlite3.Connection:
    if readonly:
        return sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
    return sqlite3.connect(str(path), timeout=10)


def integrity_check(path: Path) -> str:
    """`pragma integrity_check` of the database ("ok" when sound)."""
    db = _connect(path, readonly=False)
    try:
        return "; ".join(str(r[0]) for r in db.execute("pragma integrity_check"))
    finally:
        db.close()


def read_rows(path: Path, *, readonly: bool = False) -> dict[str, list[StoredRow]]:
    """Every row, by topic, ordered by position; streamed pieces merged into its parts."""
    db = _connect(path, readonly)
    try:
        pieces: dict[str, list[str]] = {}
        if db.execute("SELECT 1 FROM sqlite_master WHERE name = 'row_parts'").fetchone():
            for rid, chunks in db.execute("SELECT row_id, chunks FROM row_parts ORDER BY id"):
                pieces.setdefault(rid, []).append(chunks)
        out: dict[str, list[StoredRow]] = {}
        cur = db.execute(
            "SELECT id, topic_id, role, status, position, turn_id, parts, error, error_code "
            "FROM rows ORDER BY topic_id, position, created_at"
        )
        for rid, tid, role, status, pos, turn, parts, err, code in cur:
            decoded = (_old_parts if isinstance(parts, bytes) else _parts).decode(parts)
            mine = pieces.get(rid, [])
            for text in mine:
                decoded = _merged(decoded, _parts.decode(text))
            out.setdefault(tid, []).append(
                StoredRow(rid, tid, role, status, pos, turn, decoded, err, code, len(mine))
            )
        return out
    finally:
        db.close()


def _merged(parts: list[Any], more: list[Any]) -> list[Any]:
    """`parts` then `more`, a text (or thinking) part extending one of its kind right before
    it, as hostd's rows grow (written here again: the checks do not trust hostd's code)."""
    out = list(parts)
    for chunk in more:
        if isinstance(chunk, TextDelta | ThinkingDelta):
            if not chunk.text:
                continue
            if out and type(out[-1]) is type(chunk):
                out[-1] = type(chunk)(text=out[-1].text + chunk.text)
                continue
        out.append(chunk)
    return out


def db_bytes_contain(path: Path, needle: bytes) -> list[str]:
    """Which of the database files (main, -wal, -shm, -journal) contain `needle` verbatim."""
    hits = []
    for suffix in ("", "-wal", "-shm", "-journal"):
        p = Path(str(path) + suffix)
        try:
            if needle in p.read_bytes():
                hits.append(p.name)
        except FileNotFoundError:
            pass
    return hits
