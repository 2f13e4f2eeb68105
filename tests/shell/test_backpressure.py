"""Slow and stuck windows, resync, many topics at once."""

from __future__ import annotations

import msgspec
import trio

from hostd.client import open_client
from hostd.shell.daemon import DaemonConfig
from hostd.shell.paths import Paths
from hostd_protocol.client_messages import (
    Attach,
    AttachResult,
    Reply,
    Resync,
    RowAppended,
    Snapshot,
    TurnEnded,
)
from hostd_protocol.common import TextDelta
from tests.shell.conftest import start_daemon
from tests.shell.test_bad_input import Raw
from tests.shell.test_topics_streams import answer_text


async def test_stuck_window_is_resynced_and_does_not_slow_others(
    nursery: trio.Nursery, paths: Paths
) -> None:
    with trio.fail_after(20):
        r = await start_daemon(
            nursery, paths, config=DaemonConfig(default_driver="fake", max_queue_bytes=1024 * 1024)
        )
        async with open_client(paths) as good:
            t = await good.create_topic()
            stuck = await Raw.connect(paths)
            await stuck.hello()
            await stuck.send_body(
                msgspec.msgpack.encode(msgspec.to_builtins(Attach(id=1, topic_id=t.id)))
            )
            async with good.attach(t.id) as sub:
                await good.send(t.id, "q")
                turn = await r.supervisor.turns.receive()
                # 3 MB: beyond the stuck socket's kernel buffer plus its 1 MiB queue.
                n, piece = 6000, "x" * 500
                for i in range(n):
                    turn.chunk(piece)
                    if i % 200 == 0:
                        await good.ping()  # let the daemon apply the chunks as they come
                turn.end()
                async for ev in sub:
                    if isinstance(ev, TurnEnded):
                        break
                assert sub.resyncs == 0
                assert answer_text(sub) == piece * n
                stats = [c.statistics() for c in r.daemon.connections]
                assert sorted(s.resyncs for s in stats) == [0, 1]  # good, stuck

            # The stuck window wakes up: it finds a contiguous prefix, then Resync; a replay
            # from its last seq brings it up to date.
            first = await stuck.recv()
            assert isinstance(first, Reply) and isinstance(first.result, AttachResult)
            assert first.result.snapshot is not None
            last = first.result.snapshot.seq
            while True:
                ev = await stuck.recv()
                if isinstance(ev, Resync):
                    break
                assert ev.seq == last + 1
                last = ev.seq
            # Replaying ~3 MB would overflow its queue again: the host says resync, and the
            # window takes a snapshot instead, which matches the good window's transcript.
            await stuck.send_body(
                msgspec.msgpack.encode(msgspec.to_builtins(Attach(id=2, topic_id=t.id, since=last)))
            )
            reply = await stuck.recv()
            assert isinstance(reply, Reply) and reply.result.mode == "replay"
            assert isinstance(await stuck.recv(), Resync)
            await stuck.send_body(
                msgspec.msgpack.encode(msgspec.to_builtins(Attach(id=3, topic_id=t.id)))
            )
            reply = await stuck.recv()
            assert isinstance(reply, Reply) and reply.result.snapshot is not None
            assert reply.result.snapshot.seq == r.daemon.hosts[t.id].runtime.seq
            assert [(x.id, x.status, x.parts) for x in reply.result.snapshot.rows] == [
                (x.id, x.status, x.parts) for x in sub.transcript.rows()
            ]
            await stuck.aclose()
        await r.stop()


async def test_since_older_than_replay_buffer_gets_resync_then_snapshot(
    nursery: trio.Nursery, paths: Paths
) -> None:
    with trio.fail_after(10):
        r = await start_daemon(
            nursery, paths, config=DaemonConfig(default_driver="fake", replay_size=20)
        )
        async with open_client(paths) as c:
            t = await c.create_topic()
            async with c.attach(t.id) as sub:
                old = sub.seq
            # Ten short turns: far more than 20 events, however chunks get merged.
            for i in range(10):
                await c.send(t.id, f"auto:2:{i}")
                async with c.attach(t.id) as watch:
                    while watch.transcript.active_turn_id:
                        await watch.__anext__()
            async with c.attach(t.id, since=old) as sub2:
                item = await sub2.__anext__()
                assert isinstance(item, Snapshot)
                assert sub2.resyncs == 1
                assert sub2.transcript.rows()[-1].status == "success"
        await r.stop()


async def test_ten_concurrent_topics_never_mix(nursery: trio.Nursery, paths: Paths) -> None:
    with trio.fail_after(20):
        r = await start_daemon(nursery, paths)
        async with open_client(paths) as c, open_client(paths) as other:
            topics = [await c.create_topic(title=f"t{i}") for i in range(10)]
            results: dict[str, list[object]] = {}

            async def watch(topic_id: str, i: int, task_status: trio.TaskStatus[None]) -> None:
                async with c.attach(topic_id) as sub:
                    task_status.started()
                    got = []
                    async for ev in sub:
                        if isinstance(ev, Snapshot):
                            continue
                        got.append(ev)
                        if isinstance(ev, TurnEnded):
                            break
                    results[topic_id] = got

            async with trio.open_nursery() as n:
                for i, t in enumerate(topics):
                    await n.start(watch, t.id, i)
                async with trio.open_nursery() as senders:
                    for i, t in enumerate(topics):
                        senders.start_soon(other.send, t.id, f"auto:30:topic{i}")
            for i, t in enumerate(topics):
                evs = results[t.id]
                assert all(e.topic_id == t.id for e in evs)  # type: ignore[attr-defined]
                texts = [e.chunk.text for e in evs if isinstance(e, RowAppended) and isinstance(e.chunk, TextDelta)]
                # (the host may merge consecutive deltas; the text is what counts)
                assert "".join(texts) == "".join(f"auto:30:topic{i}#{k} " for k in range(30))
        await r.stop()
