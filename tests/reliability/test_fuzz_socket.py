"""Socket fuzzing of the real daemon (DESIGN.md invariant 11): random and mutated frames,
oversized lengths, truncated frames, valid frames with wrong types, unknown ids, requests
before the handshake, and a storm of 2,000 connections opened and dropped. The daemon never
crashes, answers with typed errors (never `internal_error`), and its stored data is unchanged.

`hostd_dev.stress.fuzz.run_case` plays one connection and checks the answers; here hypothesis
builds the cases (and shrinks any failure), and a seeded random fuzzer adds volume.
`scripts/stress --fuzz N` runs the long version.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hostd.client import open_client
from hostd.shell.paths import Paths
from hostd_dev.stress.dbcheck import read_rows
from hostd_dev.stress.fuzz import (
    EXISTING_TEMPLATES,
    TEMPLATES,
    Case,
    encode_body,
    frame,
    hello_body,
    idle_storm,
    run_case,
    run_fuzz,
)
from hostd_dev.stress.process import DaemonProcess
from hostd_protocol.client_messages import TurnEnded

pytestmark = pytest.mark.e2e


@dataclass
class Live:
    paths: Paths
    proc: subprocess.Popen[bytes]
    topic_id: str


def _serve_sync(home: Path) -> subprocess.Popen[bytes]:
    read_fd, write_fd = os.pipe()
    proc = subprocess.Popen(
        [sys.executable, "-m", "hostd", "--home", str(home), "serve", "--ready-fd", str(write_fd),
         "--default-driver", "scripted"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        pass_fds=(write_fd,),
    )
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as pipe:
        line = pipe.readline()  # the daemon closes its end once it serves or failed
    if not line.startswith(b"ready"):
        proc.kill()
        proc.wait()
        raise RuntimeError(f"hostd did not start: {line!r}")
    return proc


@pytest.fixture(scope="module")
def live() -> Iterator[Live]:
    """One daemon for the hypothesis examples (a new one per example would cost seconds)."""
    home = Path(tempfile.mkdtemp(prefix="hdz", dir="/tmp"))
    proc = _serve_sync(home)
    paths = Paths.under(home)

    async def setup() -> str:
        with trio.fail_after(20):
            async with open_client(paths) as c:
                t = await c.create_topic(driver="scripted")
                async with c.attach(t.id) as sub:
                    sent = await c.send(t.id, "/text stored before the fuzzing\nq", "start")
                    # The answer is stored before the fuzzing starts: the last check reads it
                    # as `success`, and on a loaded machine the fuzzing can be over first.
                    async for ev in sub:
                        if isinstance(ev, TurnEnded) and ev.turn_id == sent.turn_id:
                            break
                return t.id

    try:
        yield Live(paths, proc, trio.run(setup))
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(home, ignore_errors=True)


# --- strategies ----------------------------------------------------------------------------------

values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats() | st.text(max_size=20) | st.binary(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=8,
)


@st.composite
def wrong_types(draw: Any, topic_id: str) -> dict[str, Any]:
    if draw(st.booleans()):
        msg = dict(draw(st.sampled_from(TEMPLATES)))
    else:
        msg = {**draw(st.sampled_from(EXISTING_TEMPLATES)), "topic_id": topic_id}
    key = draw(st.sampled_from([k for k in msg if k != "type"] + ["extra"]))
    value = draw(values.filter(lambda v: type(v) is not type(msg.get(key))))
    if key in ("topic_id",) and msg.get("topic_id") == topic_id and isinstance(value, str):
        value = value + "-missing"
    msg[key] = value
    return msg


@st.composite
def cases(draw: Any, topic_id: str) -> Case:
    encoding = draw(st.sampled_from(["msgpack", "json"]))
    kind = draw(st.sampled_from(["raw", "frames", "wrong-type", "mutated", "oversized",
                                 "before-hello"]))
    hello = kind != "before-hello" and draw(st.booleans() | st.just(True))
    if kind == "raw":
        data = draw(st.binary(max_size=300))
    elif kind == "frames":
        data = b"".join(frame(b) for b in draw(st.lists(st.binary(max_size=60), max_size=4)))
    elif kind == "wrong-type":
        data = frame(encode_body(draw(wrong_types(topic_id)), encoding))
    elif kind == "mutated":
        body = bytearray(encode_body(dict(draw(st.sampled_from(TEMPLATES))), encoding))
        for pos, byte in draw(st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)),
                                       min_size=1, max_size=4)):
            body[pos % len(body)] = byte
        data = frame(bytes(body))
    elif kind == "oversized":
        size = draw(st.integers(8 * 1024 * 1024 + 1, 2**32 - 1))
        data = size.to_bytes(4, "big") + draw(st.binary(max_size=20))
    else:
        data = frame(encode_body(dict(draw(st.sampled_from(TEMPLATES))), encoding))
    cuts = sorted(set(draw(st.lists(st.integers(1, max(1, len(data) - 1)), max_size=3))))
    cuts = [c for c in cuts if 0 < c < len(data)]
    pieces = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
    return Case(tuple(p for p in pieces if p), hello, encoding, kind)


@settings(max_examples=250, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_hypothesis_frames_get_typed_answers(live: Live, data: Any) -> None:
    case = data.draw(cases(live.topic_id))
    result = trio.run(run_case, live.paths.socket_path, case)
    assert result.problems == [], case
    assert live.proc.poll() is None, "the daemon died"


def test_hypothesis_left_the_daemon_and_its_data_intact(live: Live) -> None:
    async def check() -> None:
        with trio.fail_after(20):
            async with open_client(live.paths) as c:
                page = await c.history(live.topic_id)
                topics = await c.list_topics()
                status = await c.status()
        assert [t.id for t in topics] == [live.topic_id]
        assert status.pid == live.proc.pid
        assert [r.role for r in page.rows] == ["user", "assistant"]
        assert page.rows[1].status == "success"

    trio.run(check)
    log = live.paths.log_path.read_text(errors="replace")
    assert "Traceback" not in log
    assert "internal error" not in log


# --- volume: seeded random cases and a connection storm, on a fresh daemon -----------------------


def _db_state(paths: Paths) -> bytes:
    rows = read_rows(paths.db_path, readonly=True)
    return msgspec.msgpack.encode(
        {tid: [(r.id, r.status, r.position, r.text, r.error) for r in rows[tid]]
         for tid in sorted(rows)}
    )


async def test_random_fuzz_and_a_connection_storm_leave_no_trace(home: Path, seed: int) -> None:
    with trio.fail_after(90):
        daemon = DaemonProcess(home)
        await daemon.start()
        try:
            async with open_client(daemon.paths) as c:
                t = await c.create_topic(driver="scripted")
                await c.send(t.id, "/text stored before the fuzzing\nq", "start")
                await c.send(t.id, "queued behind it\n/text later", "queue")
            # Let the turn end (and its driver settle) so the baseline is quiet.
            async with open_client(daemon.paths) as c:
                async with c.attach(t.id) as sub:
                    async for _ in sub:
                        if sub.transcript.state == "idle" and not any(
                            r.status in ("queued", "pending") for r in sub.transcript.rows()
                        ):
                            break
                await c.history(t.id)  # answered once the writer has flushed
            before = _db_state(daemon.paths)
            base = daemon.sample()

            report = await run_fuzz(daemon.paths.socket_path, 1500, seed=seed,
                                    existing_topics=[t.id])
            assert report.problems == [], report.summary()
            assert report.pings_answered > 300

            await _storm(daemon.paths.socket_path, 2000, seed, t.id)

            # Many idle connections at once (never a hello): the daemon keeps serving.
            idle = await idle_storm(daemon.paths.socket_path, 300)
            assert idle.opened == 300 and idle.pings_during == 20, idle

            async with open_client(daemon.paths) as c:
                while (await c.status()).connections > 1:
                    pass  # each status round trip lets the daemon finish closing the rest
                status = await c.status()
            assert status.pid == daemon.pid
            after = daemon.sample()
            assert after.fds <= base.fds + 2, (base, after)
            assert _db_state(daemon.paths) == before
            log = daemon.log_text()
            assert "Traceback" not in log
        finally:
            await daemon.stop()


async def _storm(socket_path: Path, n: int, seed: int, topic_id: str) -> None:
    """`n` connections opened and dropped in every way a client can drop one."""
    rng = random.Random(seed)
    hello = frame(hello_body("msgpack"))
    attach = frame(encode_body({"type": "attach", "id": 1, "topic_id": topic_id}, "msgpack"))
    limiter = trio.CapacityLimiter(64)

    async def one(how: int) -> None:
        async with limiter:
            stream = await trio.open_unix_socket(str(socket_path))
            try:
                if how == 1:
                    await stream.send_all(hello[:3])
                elif how == 2:
                    await stream.send_all(hello)
                elif how == 3:
                    await stream.send_all(hello + attach)  # attached, never reads its events
                elif how == 4:
                    await stream.send_all(hello + attach[:5])
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
            finally:
                if how == 5:
                    # Linger 0: the close is a reset, not an orderly end of stream.
                    stream.socket.setsockopt(
                        socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                    )
                await trio.aclose_forcefully(stream)

    async with trio.open_nursery() as nursery:
        for _ in range(n):
            nursery.start_soon(one, rng.randrange(6))


async def test_a_frame_error_behind_valid_frames_is_answered_in_their_encoding(
    home: Path,
) -> None:
    """Regression (found by the fuzzer): a JSON hello and a ping followed by a hostile
    header in the same read. The decoder used to drop the complete frames, so the daemon
    answered the error in msgpack to a JSON client and never answered the ping."""
    from hostd_protocol.client_messages import ErrorReply, Pong, Reply, Welcome

    with trio.fail_after(30):
        daemon = DaemonProcess(home)
        await daemon.start()
        try:
            ping = frame(encode_body({"type": "ping", "id": 7}, "json"))
            data = frame(hello_body("json")) + ping + b"\xff\xff\xff\xff"
            result = await run_case(daemon.paths.socket_path, Case((data,), False, "json"))
        finally:
            await daemon.stop()
    assert result.problems == []
    assert result.encoding_fallbacks == 0
    kinds = [type(m) for m in result.replies]
    assert kinds == [Welcome, Reply, ErrorReply], result.replies
    assert isinstance(result.replies[1].result, Pong)
    assert result.replies[2].code == "frame_too_large"
    assert result.closed_by_daemon
