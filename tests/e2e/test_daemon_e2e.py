"""The real daemon subprocess with the real scripted driver subprocess."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import trio

from hostd.client import open_client
from hostd.shell.paths import Paths
from hostd_protocol.client_messages import RowAppended, Snapshot, TurnEnded
from hostd_protocol.common import TextDelta
from tests.e2e import daemon_proc

pytestmark = pytest.mark.e2e


def text_of(parts: list[object]) -> str:
    return "".join(p.text for p in parts if isinstance(p, TextDelta))


async def test_two_windows_real_driver(home: Path) -> None:
    with trio.fail_after(60):
        d = await daemon_proc.start(home)
        try:
            paths = Paths.under(home)
            async with open_client(paths) as a, open_client(paths) as b:
                t = await a.create_topic(title="e2e", driver="scripted")
                async with a.attach(t.id) as sa, b.attach(t.id) as sb:
                    await a.send(t.id, "/chunks 2000 size=8 rate=0\n/tool Read\n/text done.")
                    got: dict[str, list[object]] = {"a": [], "b": []}

                    async def drain(name: str, sub: object) -> None:
                        async for ev in sub:  # type: ignore[attr-defined]
                            got[name].append(ev)
                            if isinstance(ev, TurnEnded):
                                return

                    async with trio.open_nursery() as n:
                        n.start_soon(drain, "a", sa)
                        n.start_soon(drain, "b", sb)
                assert got["a"] == got["b"]
                ended = got["a"][-1]
                assert isinstance(ended, TurnEnded) and ended.status == "success"
                stored = (await a.history(t.id)).rows
                assert [r.role for r in stored] == ["user", "assistant"]
                assert sa.transcript.rows()[-1].parts == stored[-1].parts
                assert text_of(stored[-1].parts).endswith("done.")
        finally:
            assert await d.terminate() == 0
        assert not daemon_proc.exists(Paths.under(home).socket_path)


async def test_kill9_mid_answer_then_restart(home: Path) -> None:
    paths = Paths.under(home)
    with trio.fail_after(60):
        d = await daemon_proc.start(home)
        async with open_client(paths) as c:
            t = await c.create_topic(driver="scripted")
            async with c.attach(t.id) as sub:
                first = await c.send(t.id, "/chunks 2000 size=8 rate=200")
                queued = await c.send(t.id, "/text after the restart", intent="queue")
                assert (first.disposition, queued.disposition) == ("started", "queued")
                seen = ""
                async for ev in sub:
                    if isinstance(ev, RowAppended) and isinstance(ev.chunk, TextDelta):
                        seen += ev.chunk.text
                        if len(seen) >= 400:  # ~0.25 s into the answer
                            break
            await d.kill9()
        # What a SIGKILLed daemon leaves behind: a socket nobody listens on.
        assert daemon_proc.exists(paths.socket_path)

        d2 = await daemon_proc.start(home)
        try:
            async with open_client(paths) as c:
                rows = (await c.history(t.id)).rows
                by_id = {r.id: r for r in rows}
                assert first.row_id in by_id and queued.row_id in by_id
                # Nothing from before the crash is pending; the queued message may already be
                # running again (the runtime resumes the queue at load).
                q = by_id[queued.row_id]
                assert all(r.status != "pending" for r in rows if r.position < q.position)
                answer = next(r for r in rows if r.role == "assistant")
                assert answer.status == "error"
                assert answer.error == "daemon restarted during this answer"
                stored = text_of(answer.parts)
                # Streamed content is flushed every 100 ms: the stored answer is a prefix of
                # the stream, and no shorter than what the window saw minus that window.
                assert stored and (seen.startswith(stored) or stored.startswith(seen))
                print(f"\nkill -9: window saw {len(seen)} chars, store kept {len(stored)}")
                # The queued message runs after the restart (resume_queue), and completes.
                async with c.attach(t.id) as sub2:
                    async for item in sub2:
                        if isinstance(item, Snapshot) and not item.active_turn_id:
                            if any(r.role == "assistant" and text_of(r.parts) == "after the restart"
                                   for r in item.rows):
                                break
                        if isinstance(item, TurnEnded):
                            break
                rows = (await c.history(t.id)).rows
                assert text_of(rows[-1].parts) == "after the restart"
                assert rows[-1].status == "success"
        finally:
            assert await d2.terminate() == 0


async def test_second_daemon_refuses(home: Path) -> None:
    with trio.fail_after(60):
        d = await daemon_proc.start(home)
        try:
            proc = await trio.run_process(
                [sys.executable, "-m", "hostd", "--home", str(home), "serve"],
                capture_stdout=True,
                capture_stderr=True,
                check=False,
            )
            assert proc.returncode == 1
            assert f"another hostd is already running (pid {d.pid})" in proc.stderr.decode()
            async with open_client(Paths.under(home)) as c:
                assert (await c.status()).pid == d.pid
        finally:
            await d.terminate()


async def test_cli_round_trip(home: Path) -> None:
    async def hostd(*args: str, check: bool = True) -> str:
        proc = await trio.run_process(
            [sys.executable, "-m", "hostd", "--home", str(home), *args],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
        out = proc.stdout.decode() + proc.stderr.decode()
        if check:
            assert proc.returncode == 0, out
        return out

    with trio.fail_after(90):
        out = await hostd("status", check=False)
        assert "hostd is not running" in out and "hostd serve" in out
        assert "hostd started" in await hostd("serve", "--detach")
        try:
            tid = (await hostd("new", "--driver", "scripted", "--title", "cli")).strip()
            out = await hostd("send", tid, "/text hello from the cli", "--follow")
            assert "hello from the cli" in out
            out = await hostd("history", tid)
            assert "user:" in out and "hello from the cli" in out
            assert tid[:10] in await hostd("topics")
        finally:
            assert "hostd stopped" in await hostd("stop")
        assert not daemon_proc.exists(Paths.under(home).socket_path)


async def test_client_autostart(home: Path) -> None:
    with trio.fail_after(60):
        paths = Paths.under(home)
        async with open_client(paths, autostart=True) as c:
            st = await c.status()
            assert st.socket_path == str(paths.socket_path)
            await c.shutdown()
        # The detached daemon releases its lock once it has shut down.
        async with open_client(paths, autostart=True) as c:
            assert (await c.status()).pid != st.pid
            await c.shutdown()
