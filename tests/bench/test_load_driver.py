"""The bench's load driver (`bench-load`, hostd_dev.bench.load_driver) is a real driver: it
completes turns through the real daemon, its sockets and windows process, and says clearly
what it cannot play. Functional only: what it costs per chunk is measured by `scripts/bench
latency`, never asserted here."""

from __future__ import annotations

import os
import select
from typing import Any

import pytest

from hostd_dev.bench import load_driver
from hostd_dev.bench.control import create_topics
from hostd_dev.bench.latency import bench_script, stream_rounds
from hostd_dev.bench.procs import BareDriver, DaemonProc
from hostd_protocol.driver_messages import ChunkEvent, Close, Interrupt, Send, TurnEnd

pytestmark = pytest.mark.e2e


def test_a_bench_turn_streams_through_the_daemon_to_every_window() -> None:
    reports: list[dict[str, Any]] = []
    with DaemonProc() as daemon:
        topics = create_topics(daemon, 3, driver="bench-load")
        stream_rounds(
            daemon,
            topics,
            2,
            bench_script(20, rate=400),
            1,
            lambda _k, report: reports.append(report),
            warmup=bench_script(2, rate=400),
        )
    (report,) = reports
    # Every stamped chunk of every topic reached both of its windows, in order.
    assert report["latency_us"]["n"] == 3 * 2 * 20
    assert (report["gaps"], report["resyncs"], report["errors"]) == (0, 0, [])


def _events_until_turn_end(d: BareDriver) -> list[Any]:
    out: list[Any] = []
    while True:
        ready, _, _ = select.select([d._out], [], [], 30)
        assert ready, "the load driver went silent"
        _, events = d._read()
        out += events
        if any(isinstance(ev, TurnEnd) for ev in events):
            return out


def test_it_refuses_what_it_cannot_play_and_stops_when_interrupted() -> None:
    with BareDriver(module=load_driver.__name__) as d:
        d._write(Send(turn_id="t1", text="hello"))
        (end,) = _events_until_turn_end(d)
        assert (end.status, end.error) == ("error", load_driver.USAGE)

        # 1,000 chunks at 20/s would take 50 s; the interrupt ends the turn at once.
        d._write(Send(turn_id="t2", text="/bench n=1000 size=64 rate=20"))
        first = d._read()[1]
        assert isinstance(first[0], ChunkEvent)
        d._write(Interrupt(turn_id="t2"))
        events = first + _events_until_turn_end(d)
        assert events[-1] == TurnEnd(turn_id="t2", status="stopped")
        chunks = [ev.chunk.text for ev in events if isinstance(ev, ChunkEvent)]
        assert 1 <= len(chunks) < 1000
        assert all(len(t) == 64 and int(t.partition(":")[0]) > 0 for t in chunks)

        # Still answering after both.
        d._write(Send(turn_id="t3", text="/bench n=3 size=32"))
        events = _events_until_turn_end(d)
        assert [type(ev) for ev in events] == [ChunkEvent] * 3 + [TurnEnd]
        assert events[-1].status == "success"
    assert os.path.exists(load_driver.library_path())  # the C loop was built and used


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("/bench n=250 size=64 rate=50", (250, 64, 50.0)),
        ("/bench 5", (5, 64, 0.0)),
        ("/bench", (1000, 64, 0.0)),
        ("/bench n=5 size=8", None),  # too small for the stamp
        ("/bench n=5 speed=3", None),
        ("/chunks n=5", None),
    ],
)
def test_it_reads_the_scripted_drivers_bench_words(
    text: str, parsed: tuple[int, int, float] | None
) -> None:
    assert load_driver.parse_bench(text) == parsed


@pytest.mark.parametrize("rate", ["20", "0"])
def test_a_close_in_the_middle_of_a_turn_stops_it_and_the_driver_exits(rate: str) -> None:
    """A command during a turn interrupts the chunk loop's sleep (SIGIO), paced or flat out."""
    d = BareDriver(module=load_driver.__name__)
    try:
        d.handshake()
        d._write(Send(turn_id="t1", text=f"/bench n=200000 size=64 rate={rate}"))
        first = d._read()[1]
        assert isinstance(first[0], ChunkEvent)
        d._write(Close())
        events = first + _events_until_turn_end(d)
        assert events[-1] == TurnEnd(turn_id="t1", status="stopped")
        assert len(events) - 1 < 200000
        assert d.proc.wait(timeout=30) == 0
    finally:
        d.close()
