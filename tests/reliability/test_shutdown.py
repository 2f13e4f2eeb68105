"""A graceful shutdown leaves no row `pending`, even when a turn chains into another while
it stops (found by the crash campaign's final, graceful life)."""

from __future__ import annotations

import pytest
import trio

from hostd.client import open_client
from hostd.shell.paths import Paths
from hostd_dev.stress.dbcheck import read_rows
from tests.reliability.conftest import first_chunk, start_in_process

pytestmark = pytest.mark.e2e


async def test_shutdown_while_a_send_now_chains_leaves_nothing_pending(
    nursery: trio.Nursery, paths: Paths
) -> None:
    with trio.fail_after(30):
        d = await start_in_process(nursery, paths)
        async with open_client(paths) as c:
            t = await c.create_topic(driver="scripted")
            async with c.attach(t.id) as sub:
                await c.send(t.id, "/chunks 1000 size=8 rate=100\nfirst", "start")
                await first_chunk(sub)
                queued = await c.send(t.id, "/chunks 1000 size=8 rate=100\nnext", "queue")
                # Run `next` now: stops `first`, which chains into `next` when it ends...
                await c.send_now(t.id, queued.row_id)
                # ...right as the daemon shuts down.
                d.daemon.request_shutdown()
        with trio.fail_after(20):
            await d.done.wait()
        rows = read_rows(paths.db_path)[t.id]
        assert [(r.role, r.status) for r in rows if r.status == "pending"] == []


async def test_deleting_a_topic_mid_turn_is_clean(
    nursery: trio.Nursery, paths: Paths, caplog: pytest.LogCaptureFixture
) -> None:
    """Regression (found by the soak, which retires topics mid-turn): the stop's Interrupt
    reached a closed host, whose `driver_lost` events reused the seq of `topic-deleted`; the
    host task died on the fan-out's seq assertion and rows of the deleted topic were written
    after its deletion (foreign key failures). Then (10-minute soak, RSS +70 MiB): the turn
    never ended, so the turn observers kept every deleted topic's host, rows and replay
    buffer forever. A deleted topic's turn now ends `stopped` before `topic-deleted`."""
    import gc

    from hostd.shell.topic_host import TopicHost
    from hostd_protocol.client_messages import TopicDeleted, TurnEnded

    with trio.fail_after(30):
        d = await start_in_process(nursery, paths)
        async with open_client(paths) as c:
            for _ in range(3):
                t = await c.create_topic(driver="scripted")
                async with c.attach(t.id) as sub:
                    sent = await c.send(t.id, "/chunks 1000 size=8 rate=200\nbusy", "start")
                    await first_chunk(sub)
                    await c.delete_topic(t.id)
                    tail = []
                    async for ev in sub:
                        tail.append(ev)
                        if isinstance(ev, TopicDeleted):
                            break
                ends = [e for e in tail if isinstance(e, TurnEnded)]
                assert [(e.turn_id, e.status) for e in ends] == [(sent.turn_id, "stopped")]
            survivor = await c.create_topic(driver="scripted")
            await c.send(survivor.id, "/text still fine\nq", "start")
            assert [x.id for x in await c.list_topics()] == [survivor.id]
            gc.collect()
            hosts = [o for o in gc.get_objects() if isinstance(o, TopicHost)]
            assert [h.topic_id for h in hosts] == [survivor.id]
        await d.stop()
    problems = [r.getMessage() for r in caplog.records if r.levelname in ("ERROR", "CRITICAL")]
    assert problems == []
