"""kill -9 of the real daemon at random moments, then restart: DESIGN.md invariant 8.

The bounded campaign here is 20 kills of a daemon streaming 3 topics (each kill costs about
1.5-2 s on 2 idle cores: a daemon start, driver starts, streaming until the picked moment,
the checks). `scripts/stress --kills N` runs the long one. `hostd_dev.stress.crash` says what is
checked after every kill and restart.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from hostd_dev.stress.crash import run_crash_campaign
from hostd_dev.stress.process import DaemonProcess

pytestmark = pytest.mark.e2e

KILLS = 20


async def test_kill9_at_random_moments_loses_nothing_acknowledged(home: Path, seed: int) -> None:
    with trio.fail_after(150):
        report = await run_crash_campaign(home, kills=KILLS, topics=3, seed=seed)
    assert report.violations == [], f"seed {seed}: {report.summary()}"
    assert report.kills == KILLS
    # The campaign really exercised what it claims to.
    assert report.sends_acked > 20
    assert report.rows_reconciled > 0
    # Rows were killed with streamed pieces not yet folded into their whole parts (schema 8).
    assert report.rows_with_pieces > 0
    assert report.acked_by_disposition.get("steered", 0) > 0
    assert report.acked_by_disposition.get("queued", 0) > 0


async def test_a_loaded_topic_stores_its_new_seq_base_before_serving(home: Path) -> None:
    """Regression (found by the crash campaign): a restarted daemon starts a topic's seqs
    LOAD_SEQ_GAP above the stored last seq, but did not store that base; killed again before
    any of its events were flushed, the next daemon reused the seqs windows had seen."""
    import sqlite3

    from hostd.client import open_client
    from hostd_dev.stress.process import DaemonProcess

    with trio.fail_after(60):
        daemon = DaemonProcess(home)
        await daemon.start()
        async with open_client(daemon.paths) as c:
            t = await c.create_topic(driver="scripted")
        await daemon.stop()
        await daemon.start()
        async with open_client(daemon.paths) as c, c.attach(t.id) as sub:
            seen = sub.seq
        db = sqlite3.connect(f"file:{daemon.paths.db_path}?mode=ro", uri=True)
        try:
            (stored,) = db.execute("SELECT last_seq FROM topics WHERE id = ?", (t.id,)).fetchone()
        finally:
            db.close()
        await daemon.kill9()
        assert stored >= seen > 0


async def test_driver_process_groups_die_with_a_killed_daemon(home: Path) -> None:
    """Issue 14 item 9: a hung driver (its event loop blocked, so it never sees its stdin
    end) and a vendor-CLI-like child in a driver's group do not outlive `kill -9` of the
    daemon."""
    from hostd.client import open_client
    from hostd_dev.stress.dbcheck import row_text
    from hostd_dev.stress.process import wait_pids_gone
    from hostd_protocol.client_messages import RowAppended
    from tests.reliability.conftest import run_turn

    with trio.fail_after(60):
        daemon = DaemonProcess(home)
        await daemon.start()
        try:
            async with open_client(daemon.paths) as c:
                t1 = await c.create_topic(driver="scripted")
                out = await run_turn(c, t1.id, "/child\nq")
                answer = next(r for r in out.rows if r.role == "assistant")
                child = int(row_text(answer.parts).split()[-1])
                t2 = await c.create_topic(driver="scripted")
                async with c.attach(t2.id) as sub:
                    await c.send(t2.id, "/freeze 300\nq", "start")
                    async for ev in sub:
                        if isinstance(ev, RowAppended) and "frozen" in str(ev.chunk):
                            break
            doomed = daemon.child_pids() | {child}
            assert len(daemon.driver_pids()) == 2 and len(doomed) == 4, doomed
        finally:
            await daemon.kill9()
        left = await wait_pids_gone(doomed, timeout=10)
        assert not left, f"outlived the daemon: {left}"
