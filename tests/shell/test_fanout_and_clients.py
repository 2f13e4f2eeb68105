"""Fan-out encodes once per encoding and batches frames per write; windows are optional for a
turn; the synchronous client facade."""

from __future__ import annotations

from typing import Any

import trio

from hostd.client import SyncClient, open_client
from hostd.shell.fanout import SERVER_CODECS, TopicStream
from hostd_protocol.client_messages import RowAppended, TurnEnded
from hostd_protocol.common import PROTOCOL_VERSION, TextDelta
from hostd_protocol.framing import Encoding
from tests.shell.conftest import Running


class Counting:
    def __init__(self, encoding: Encoding) -> None:
        self.encoding = encoding
        self.protocol_version = PROTOCOL_VERSION
        self.frames: list[bytes] = []

        self.written: list[list[bytes]] = []
        self._queued: list[bytes] = []

    def push_event(self, stream: TopicStream, frame: bytes, *, wake: bool = True) -> None:
        self.frames.append(frame)
        self._queued.append(frame)
        if wake:
            self.flush()

    def flush(self) -> None:
        if self._queued:
            self.written.append(self._queued)
            self._queued = []

    def resync(self, stream: TopicStream, reason: str) -> None:
        stream.unsubscribe(self)


def test_fanout_encodes_once_per_encoding(monkeypatch: Any) -> None:
    calls: list[str] = []
    for enc, codec in SERVER_CODECS.items():
        original = codec.encode_frame

        def counting(msg: Any, _orig: Any = original, _enc: str = enc) -> bytes:
            calls.append(_enc)
            return _orig(msg)

        monkeypatch.setattr(codec, "encode_frame", counting)
    stream = TopicStream("tp", 0)
    subs = [Counting("msgpack") for _ in range(5)] + [Counting("json") for _ in range(3)]
    for s in subs:
        stream.subscribe(s)
    stream.publish(RowAppended(topic_id="tp", seq=1, row_id="r", chunk=TextDelta("hi")))
    assert sorted(calls) == ["json", "msgpack"]
    assert len({id(s.frames[0]) for s in subs if s.encoding == "msgpack"}) == 1  # same bytes
    assert stream.replay_since(0) is not None and stream.replay_since(1) == []


async def test_closing_every_window_does_not_stop_the_turn(running: Running) -> None:
    with trio.fail_after(10):
        async with open_client(running.paths) as a:
            t = await a.create_topic()
            async with a.attach(t.id):
                await a.send(t.id, "q")
                turn = await running.supervisor.turns.receive()
                turn.chunk("before ")
        # No window is connected now.
        assert running.daemon.connections == set() or all(
            not c.attached for c in running.daemon.connections
        )
        turn.chunk("after")
        turn.end()
        async with open_client(running.paths) as b:
            async with b.attach(t.id) as sub:
                while sub.transcript.active_turn_id:
                    await sub.__anext__()
                row = sub.transcript.rows()[-1]
            assert (row.status, row.parts) == ("success", [TextDelta("before after")])
            assert (await b.history(t.id)).rows[-1].parts == [TextDelta("before after")]


async def test_frames_are_batched_per_write(running: Running) -> None:
    with trio.fail_after(10):
        async with open_client(running.paths) as a:
            t = await a.create_topic()
            async with a.attach(t.id) as sub:
                await a.send(t.id, "auto:500")
                async for ev in sub:
                    if isinstance(ev, TurnEnded):
                        break
            conn = next(iter(running.daemon.connections))
            st = conn.statistics()
            assert st.frames_sent > st.writes  # several frames per send_all


async def test_sync_client(running: Running) -> None:
    def work() -> tuple[str, list[str], str]:
        with SyncClient(running.paths) as c:
            t = c.create_topic(title="sync")
            sent = c.send(t.id, "auto:3")
            titles = [x.title for x in c.list_topics()]
            return t.id, titles, sent.disposition

    with trio.fail_after(10):
        tid, titles, disposition = await trio.to_thread.run_sync(work)
    assert titles == ["sync"] and disposition == "started"
    async with open_client(running.paths) as c:
        assert (await c.get_topic(tid)).title == "sync"


async def test_sync_client_daemon_not_running(paths: Any) -> None:
    import pytest

    from hostd.client import DaemonNotRunning

    with trio.fail_after(10):
        with pytest.raises(DaemonNotRunning, match=r"^hostd is not running"):
            await trio.to_thread.run_sync(lambda: SyncClient(paths))
