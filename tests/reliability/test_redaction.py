"""Secrets never leave a driver (issue 14, HIGH 2): a canary secret handed to the scripted
driver is pushed through every channel and every error path a driver has (chunks, tool calls
and results, notices, logs, compaction errors, a turn error, a refusal at start-up, a crash
with an 8 KiB+ stderr line, garbage on the frame channel). Afterwards no 12-character piece
of it may be in the database files, the daemon's log, or any event or reply a window got.
"""

from __future__ import annotations

import secrets
from pathlib import Path

import msgspec
import pytest
import trio

from hostd.client import Client, open_client
from hostd.core.redaction import MIN_PIECE, Redactor
from hostd.shell.drivers.stderr_tail import StderrTail
from hostd_dev.stress.process import DaemonProcess
from hostd_protocol.client_messages import TurnEnded

pytestmark = pytest.mark.e2e


def pieces(secret: str) -> list[str]:
    return [secret[i : i + MIN_PIECE] for i in range(len(secret) - MIN_PIECE + 1)]


def test_redactor_removes_every_long_piece() -> None:
    canary = "sk-canary-" + secrets.token_hex(24)
    r = Redactor([canary])
    for start in range(0, len(canary) - MIN_PIECE + 1):
        for end in range(start + MIN_PIECE, len(canary) + 1):
            text = f"<{canary[start:end]}>"
            assert r.text(text) == "<***>", (start, end)
    short = canary[:MIN_PIECE - 1]
    assert r.text(f"a {short} b") == f"a {short} b"
    plain = "nothing to hide here, " * 100
    assert r.text(plain) is plain
    assert r.text(canary + canary + "x" + canary[5:30]) == "***x***"


def test_stderr_tail_redacts_before_cutting_and_across_reads() -> None:
    canary = "sk-canary-" + secrets.token_hex(24)
    tail = StderrTail(redact=[canary])
    # One never-ending line; the canary straddles the 8 KiB cut and a read boundary.
    lines = tail.feed(b"s" * 8180 + canary[:20].encode())
    lines += tail.feed(canary[20:].encode() + b"t" * 300)
    lines += tail.close()
    out = "\n".join(lines) + tail.text()
    assert not [p for p in pieces(canary) if p in out]
    assert "***" in out


async def _follow(c: Client, topic_id: str, text: str, seen: list[bytes]) -> TurnEnded:
    async with c.attach(topic_id, max_rows=10_000) as sub:
        sent = await c.send(topic_id, text, "auto")
        seen.append(msgspec.json.encode(sent))
        async for ev in sub:
            seen.append(msgspec.json.encode(ev))
            if isinstance(ev, TurnEnded) and ev.turn_id == sent.turn_id:
                return ev
    raise AssertionError("the subscription ended before the turn")


async def test_a_canary_secret_leaks_through_no_error_path(home: Path) -> None:
    canary = "sk-canary-" + secrets.token_hex(24)
    seen: list[bytes] = []
    with trio.fail_after(60):
        daemon = DaemonProcess(home, env={"HOSTD_SCRIPTED_TOKEN": canary}, log_level="DEBUG")
        await daemon.start()
        try:
            async with open_client(daemon.paths) as c:
                t = await c.create_topic(driver="scripted")
                ends = [await _follow(c, t.id, "/leak HOSTD_SCRIPTED_TOKEN\nq", seen)]
                ends.append(
                    await _follow(c, t.id, "/leak HOSTD_SCRIPTED_TOKEN end=crash\nq", seen)
                )
                ends.append(
                    await _follow(c, t.id, "/leak HOSTD_SCRIPTED_TOKEN end=garbage\nq", seen)
                )
                refused = await c.create_topic(
                    driver="scripted", options={"fatal_env": "HOSTD_SCRIPTED_TOKEN"}
                )
                ends.append(await _follow(c, refused.id, "hello", seen))
                assert [e.status for e in ends] == ["error"] * 4, ends
                assert [e.error_code for e in ends[1:]] == [
                    "driver_crashed", "driver_protocol_error", "driver_unavailable"
                ], ends
                # What the driver said arrived (redacted), so the test exercised the paths.
                assert "vendor said: ***" in ends[0].error
                assert "credential *** was refused" in ends[3].error
                for topic_id in (t.id, refused.id):
                    page = await c.history(topic_id)
                    seen.append(msgspec.json.encode(page))
                seen.append(msgspec.json.encode(await c.list_topics()))
        finally:
            await daemon.stop()
    everything = {
        "events": b"\n".join(seen).decode(),
        "log": daemon.log_text(),
    }
    for suffix in ("", "-wal", "-journal"):
        db = trio.Path(str(daemon.paths.db_path) + suffix)
        if await db.exists():
            everything[db.name] = (await db.read_bytes()).decode("latin-1")
    assert "***" in everything["events"]
    leaks = {
        where: sorted({p for p in pieces(canary) if p in text})
        for where, text in everything.items()
    }
    assert not any(leaks.values()), leaks
