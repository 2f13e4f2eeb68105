"""Socket fuzzing: random and mutated frames against a live daemon (DESIGN.md invariant 11).

A `Case` is one connection: the byte chunks a hostile or broken client writes (each written
separately, so frames arrive split), optionally after a valid `hello`. `run_case` plays it,
then a `ping` (if the connection should still be open), then half-closes and reads until the
daemon closes. The daemon must:

- answer only with frames that decode as server messages, in the encoding the client picked;
- answer errors with a known, typed code, never `internal_error` (an unhandled exception);
- close the connection after a framing error (and after any error without a request id),
  and after our end of stream, promptly;
- keep serving everything else (the harness pings it between cases) and leave stored data
  unchanged (the fuzz frames name only topics, rows and approvals that do not exist, or read
  existing topics without changing them).

`random_case(rng, ...)` makes cases from a seeded `random.Random` (for `scripts/stress`);
the hypothesis tests in tests/reliability build cases with strategies instead.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import msgspec
import trio

from hostd.shell.connection import HELLO_MAX_FRAME
from hostd.shell.server import DaemonAlreadyRunning
from hostd_protocol.client_messages import ErrorReply, Pong, Reply, ServerMessage
from hostd_protocol.common import PROTOCOL_VERSION
from hostd_protocol.errors import HostdError, ProtocolError, error_classes
from hostd_protocol.framing import DEFAULT_MAX_FRAME_SIZE, Codec, FrameDecoder, detect_encoding
from hostd_protocol.limits import (
    MAX_DEPTH,
    MAX_FIELD_CHARS,
    MAX_OPTIONS_BYTES,
    MAX_SEND_BYTES,
    MAX_SEND_HISTORY_BYTES,
)

__all__ = [
    "Case",
    "CaseResult",
    "FuzzReport",
    "KNOWN_CODES",
    "TEMPLATES",
    "encode_body",
    "frame",
    "hello_body",
    "random_case",
    "run_case",
    "run_fuzz",
]

Encoding = Literal["msgpack", "json"]

KNOWN_CODES = frozenset(error_classes()) | {DaemonAlreadyRunning.code}
PING_ID = 4_000_000_001
#: Errors after which the daemon closes the connection (the stream cannot be trusted, or the
#: handshake failed); after any other error the connection must keep serving.
FATAL_CODES = frozenset(
    {"frame_too_large", "malformed_frame", "truncated_frame", "handshake_error", "version_mismatch"}
)
MISSING_TOPIC = "tp-does-not-exist"

#: Requests the fuzzer may send (as dicts, so fields can get wrong types). None of them changes
#: stored data when its ids name nothing; `create-topic` and `shutdown` are never sent.
TEMPLATES: tuple[dict[str, Any], ...] = (
    {"type": "ping", "id": 1},
    {"type": "status", "id": 2},
    {"type": "list-topics", "id": 3},
    {"type": "list-drivers", "id": 4},
    {"type": "get-usage", "id": 5, "topic_id": MISSING_TOPIC},
    {"type": "get-topic", "id": 6, "topic_id": MISSING_TOPIC},
    {"type": "rename-topic", "id": 7, "topic_id": MISSING_TOPIC, "title": "x"},
    {"type": "delete-topic", "id": 8, "topic_id": MISSING_TOPIC},
    {"type": "attach", "id": 9, "topic_id": MISSING_TOPIC, "since": 3, "max_rows": 10},
    {"type": "detach", "id": 10, "topic_id": MISSING_TOPIC},
    {"type": "send", "id": 11, "topic_id": MISSING_TOPIC, "text": "hi", "intent": "auto"},
    {"type": "stop", "id": 12, "topic_id": MISSING_TOPIC},
    {"type": "answer-approval", "id": 13, "topic_id": MISSING_TOPIC, "approval_id": "a",
     "allow": True},
    {"type": "edit-queued", "id": 14, "topic_id": MISSING_TOPIC, "row_id": "r", "text": "t"},
    {"type": "discard-queued", "id": 15, "topic_id": MISSING_TOPIC, "row_id": "r"},
    {"type": "send-now", "id": 16, "topic_id": MISSING_TOPIC, "row_id": "r"},
    {"type": "continue", "id": 17, "topic_id": MISSING_TOPIC},
    {"type": "history", "id": 18, "topic_id": MISSING_TOPIC, "limit": 5},
    {"type": "prewarm", "id": 19, "topic_id": MISSING_TOPIC},
    {"type": "no-such-request", "id": 20},
)

#: Read-only requests on a topic that exists (its id is filled in by the caller).
EXISTING_TEMPLATES: tuple[dict[str, Any], ...] = (
    {"type": "get-topic", "id": 30},
    {"type": "attach", "id": 31, "since": None, "max_rows": 5},
    {"type": "attach", "id": 32, "since": 0, "max_rows": 5},
    {"type": "detach", "id": 33},
    {"type": "history", "id": 34, "before_position": None, "limit": 3},
    {"type": "get-usage", "id": 35},
)

#: Values of every wire type, for "valid frame, wrong type" (and odd values of the right one).
ODD_VALUES: tuple[Any, ...] = (
    None, True, False, 0, -1, 2**31, 2**63 - 1, -(2**63), 1.5, float("inf"), "", "x" * 300,
    "\u0000\ud7ff", [], [1, "a"], {}, {"type": "ping"}, {"nested": {"deep": [None]}}, b"\xff\x00",
)


def frame(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


def encode_body(msg: dict[str, Any], encoding: Encoding) -> bytes:
    if encoding == "json":
        return msgspec.json.encode(msg)
    return msgspec.msgpack.encode(msg)


def hello_body(encoding: Encoding) -> bytes:
    return encode_body(
        {"type": "hello", "protocol_version": list(PROTOCOL_VERSION), "client": "fuzz"}, encoding
    )


@dataclass(frozen=True)
class Case:
    chunks: tuple[bytes, ...]
    hello: bool = True
    encoding: Encoding = "msgpack"
    label: str = ""


@dataclass
class CaseResult:
    replies: list[Any] = field(default_factory=list)
    error_codes: list[str] = field(default_factory=list)
    ping_answered: bool = False
    closed_by_daemon: bool = False
    encoding_fallbacks: int = 0
    problems: list[str] = field(default_factory=list)


def _ping(encoding: Encoding) -> bytes:
    return frame(encode_body({"type": "ping", "id": PING_ID}, encoding))


def _client_stream_encoding(case: Case, *, with_ping: bool = False) -> Encoding:
    """The encoding the daemon will pick: from the first complete frame body we send (the
    follow-up ping may complete a truncated frame, so it counts too)."""
    if case.hello:
        return case.encoding
    chunks = list(case.chunks)
    if with_ping:
        chunks.append(_ping(_client_stream_encoding(case)))
    # The daemon's first frame is at most HELLO_MAX_FRAME: a bigger first frame is refused (in
    # msgpack) before its body, so before its encoding, is known.
    decoder = FrameDecoder(DEFAULT_MAX_FRAME_SIZE, first_frame_max=HELLO_MAX_FRAME)
    for chunk in chunks:
        try:
            bodies = decoder.feed(chunk)
        except ProtocolError:
            return "msgpack"
        if bodies:
            return detect_encoding(bodies[0])
    return "msgpack"


def _well_framed(case: Case) -> bool:
    """Whether the bytes split into whole frames (else the ping is swallowed by a frame)."""
    decoder = FrameDecoder(DEFAULT_MAX_FRAME_SIZE)
    try:
        for chunk in case.chunks:
            decoder.feed(chunk)
        decoder.close()
    except ProtocolError:
        return False
    return True


async def run_case(socket_path: Path, case: Case, *, timeout: float = 10.0) -> CaseResult:
    """Play one case on a new connection; see the module docstring for what is checked."""
    result = CaseResult()
    encoding = _client_stream_encoding(case)
    codec: Codec[Any] = Codec(
        ServerMessage, _client_stream_encoding(case, with_ping=True), DEFAULT_MAX_FRAME_SIZE
    )
    decoder = FrameDecoder(DEFAULT_MAX_FRAME_SIZE)
    with trio.fail_after(timeout):
        stream = await trio.open_unix_socket(str(socket_path))
        async with stream:
            async with trio.open_nursery() as nursery:
                received = trio.Event()

                async def read() -> None:
                    while True:
                        try:
                            data = await stream.receive_some(65536)
                        except (trio.BrokenResourceError, trio.ClosedResourceError):
                            data = b""
                        if not data:
                            result.closed_by_daemon = True
                            received.set()
                            return
                        try:
                            bodies = decoder.feed(data)
                        except ProtocolError as exc:
                            result.problems.append(f"daemon sent a bad frame: {exc}")
                            received.set()
                            return
                        for body in bodies:
                            _check_reply(codec, body, result)

                nursery.start_soon(read)
                try:
                    if case.hello:
                        await stream.send_all(frame(hello_body(case.encoding)))
                    for chunk in case.chunks:
                        await stream.send_all(chunk)
                    if not result.closed_by_daemon:
                        await stream.send_all(_ping(encoding))
                    await stream.send_eof()
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    pass  # the daemon closed on us (after a framing error): fine
                await received.wait()
    # An error without a request id ends the connection (framing, handshake, a message that
    # names no request); anything else must leave it usable.
    closing = any(isinstance(r, ErrorReply) and r.id is None for r in result.replies)
    if (case.hello and _well_framed(case) and not result.ping_answered
            and not closing and not FATAL_CODES & set(result.error_codes)):
        result.problems.append("the connection stayed usable but the follow-up ping got no answer")
    return result


_OTHER: dict[Encoding, Encoding] = {"msgpack": "json", "json": "msgpack"}


def _check_reply(codec: Codec[Any], body: bytes, result: CaseResult) -> None:
    try:
        msg = codec.decode(body)
    except HostdError as exc:
        # Before the fix in framing (docs/reliability.md) a frame error right behind a JSON
        # hello in one read was answered in msgpack: counted, and a problem.
        other: Codec[Any] = Codec(ServerMessage, _OTHER[codec.encoding], DEFAULT_MAX_FRAME_SIZE)
        try:
            msg = other.decode(body)
        except HostdError:
            result.problems.append(f"undecodable reply ({exc.code}): {body[:80]!r}")
            return
        result.encoding_fallbacks += 1
        result.problems.append(f"reply in the other encoding than the client chose: {msg!r}")
    result.replies.append(msg)
    if isinstance(msg, ErrorReply):
        result.error_codes.append(msg.code)
        if msg.code not in KNOWN_CODES:
            result.problems.append(f"unknown error code {msg.code!r}: {msg.message}")
        if msg.code == "internal_error":
            result.problems.append(f"internal error (a daemon bug): {msg.message}")
    elif isinstance(msg, Reply) and msg.id == PING_ID and isinstance(msg.result, Pong):
        result.ping_answered = True


# --- random cases (seeded; for scripts/stress) ------------------------------------------------


def _wrong_type(
    rng: random.Random, msg: dict[str, Any], keep: tuple[str, ...] = ()
) -> dict[str, Any]:
    out = dict(msg)
    key = rng.choice([*(k for k in out if k not in keep), "extra_field"])
    current = out.get(key, object())
    choices = [v for v in ODD_VALUES if type(v) is not type(current)]
    out[key] = rng.choice(choices)
    return out


def _mutate(rng: random.Random, data: bytes) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(4)
        if op == 0 and b:
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        elif op == 1:
            b.insert(rng.randint(0, len(b)), rng.randrange(256))
        elif op == 2 and b:
            del b[rng.randrange(len(b))]
        elif b:
            i = rng.randrange(len(b))
            b[i] = rng.choice((0x00, 0xFF, 0x7F, 0x80, 0xC1, 0xDF, ord("{")))
    return bytes(b)


#: Requests with a free-form field the fuzzer nests deeply (none stores anything: the topic
#: does not exist, or the depth is refused before the handler).
DEEP_TEMPLATES: tuple[tuple[str, dict[str, Any]], ...] = (
    ("options", {"type": "create-topic", "id": 40, "driver": "scripted"}),
    ("options", {"type": "send", "id": 41, "topic_id": MISSING_TOPIC, "text": "hi"}),
)


def _deep_body(template: tuple[str, dict[str, Any]], depth: int, encoding: Encoding) -> bytes:
    """`template` with `field` = {"a": {"a": ... {}}} `depth` deep, built as bytes (encoding
    that much nesting needs as much stack as decoding it)."""
    field_name, msg = template
    if encoding == "json":
        head = encode_body(msg, "json")[:-1]
        return head + f',"{field_name}":'.encode() + b'{"a":' * depth + b"{}" + b"}" * depth + b"}"
    head = encode_body(msg, "msgpack")
    count = len(msg) + 1
    assert count < 16 and head[0] == 0x80 | len(msg)
    key = msgspec.msgpack.encode(field_name)
    return bytes([0x80 | count]) + head[1:] + key + b"\x81\xa1a" * depth + b"\x80"


def _near_limit_body(rng: random.Random, encoding: Encoding, max_frame: int) -> bytes:
    """A request just over one of the explicit limits (docs/protocol.md, "Limits"), or a
    whole frame just under the frame limit: each is refused with a typed error and nothing
    is stored (the topic does not exist, and the limits are checked first)."""
    which = rng.choice(("send", "history", "title", "options") * 3 + ("frame",))
    msg: dict[str, Any]
    if which == "send":
        msg = {"type": "send", "id": 42, "topic_id": MISSING_TOPIC,
               "text": "s" * (MAX_SEND_BYTES + 1)}
    elif which == "history":
        msg = {"type": "send", "id": 43, "topic_id": MISSING_TOPIC, "text": "h",
               "history": [{"role": "user", "text": "h" * (MAX_SEND_HISTORY_BYTES // 2 + 1)}] * 2}
    elif which == "title":
        msg = {"type": "rename-topic", "id": 44, "topic_id": MISSING_TOPIC,
               "title": "t" * (MAX_FIELD_CHARS + 1)}
    elif which == "options":
        msg = {"type": "send", "id": 45, "topic_id": MISSING_TOPIC, "text": "o",
               "options": {"o": "o" * MAX_OPTIONS_BYTES}}
    else:
        msg = {"type": "edit-queued", "id": 46, "topic_id": MISSING_TOPIC, "row_id": "r",
               "text": ""}
        overhead = len(encode_body(msg, encoding))
        msg["text"] = "e" * (max_frame - overhead - 64)
    return encode_body(msg, encoding)


def random_case(
    rng: random.Random, existing_topics: Sequence[str] = (), max_frame: int = DEFAULT_MAX_FRAME_SIZE
) -> Case:
    """One hostile connection, drawn from the seeded `rng`."""
    encoding: Encoding = rng.choice(("msgpack", "msgpack", "json"))
    hello = rng.random() < 0.85
    kind = rng.choice(("valid", "wrong-type", "mutated", "random", "oversized", "truncated",
                       "before-hello", "second-hello", "bad-version", "existing", "many",
                       "deep", "near-limit"))
    template = dict(rng.choice(TEMPLATES))
    if kind == "existing" and existing_topics:
        template = {**rng.choice(EXISTING_TEMPLATES), "topic_id": rng.choice(existing_topics)}
        if rng.random() < 0.5:
            template = _wrong_type(rng, template, keep=("type",))
    body = encode_body(template, encoding)
    chunks: list[bytes]
    if kind == "wrong-type":
        chunks = [frame(encode_body(_wrong_type(rng, template), encoding))]
    elif kind == "mutated":
        if rng.random() < 0.7:  # the body mutated, its header honest
            chunks = [frame(_mutate(rng, body))]
        else:  # header and body mutated together
            chunks = [_mutate(rng, frame(body))]
    elif kind == "random":
        chunks = [rng.randbytes(rng.randint(0, 64)) for _ in range(rng.randint(1, 3))]
    elif kind == "oversized":
        size = rng.choice((max_frame + 1, 2**31, 2**32 - 1))
        chunks = [struct.pack(">I", size) + rng.randbytes(rng.randint(0, 16))]
    elif kind == "truncated":
        data = frame(body)
        chunks = [data[: rng.randint(1, len(data) - 1)]]
    elif kind == "before-hello":
        hello = False
        chunks = [frame(body)]
    elif kind == "second-hello":
        chunks = [frame(hello_body(encoding)), frame(body)]
    elif kind == "bad-version":
        hello = False
        v = rng.choice(([0, 1], [2, 0], [99, 99], [-1, 0]))
        chunks = [frame(encode_body({"type": "hello", "protocol_version": v}, encoding))]
    elif kind == "deep":
        # A free-form field nested past the request limit, or past the decoder's stack.
        depth = rng.choice((MAX_DEPTH + 1, 200, 5000))
        chunks = [frame(_deep_body(rng.choice(DEEP_TEMPLATES), depth, encoding))]
    elif kind == "near-limit":
        chunks = [frame(_near_limit_body(rng, encoding, max_frame))]
    elif kind == "many":
        chunks = [frame(encode_body(dict(rng.choice(TEMPLATES)), encoding))
                  for _ in range(rng.randint(2, 30))]
    else:
        chunks = [frame(body)]
    # Split the byte stream at random points: frames must survive any split.
    data = b"".join(chunks)
    cuts = sorted(rng.sample(range(1, len(data)), min(len(data) - 1, rng.randint(0, 3)))) \
        if len(data) > 1 else []
    pieces = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
    return Case(tuple(p for p in pieces if p), hello, encoding, kind)


@dataclass
class FuzzReport:
    cases: int = 0
    frames_sent: int = 0
    bytes_sent: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)
    error_codes: dict[str, int] = field(default_factory=dict)
    pings_answered: int = 0
    encoding_fallbacks: int = 0
    problems: list[str] = field(default_factory=list)

    def add(self, case: Case, result: CaseResult) -> None:
        self.cases += 1
        self.bytes_sent += sum(len(c) for c in case.chunks)
        self.frames_sent += 1 + len(case.chunks) if case.hello else len(case.chunks)
        self.by_kind[case.label] = self.by_kind.get(case.label, 0) + 1
        for code in result.error_codes:
            self.error_codes[code] = self.error_codes.get(code, 0) + 1
        self.pings_answered += result.ping_answered
        self.encoding_fallbacks += result.encoding_fallbacks
        self.problems.extend(f"{case.label} {case.chunks[:3]!r}: {p}" for p in result.problems)

    def summary(self) -> str:
        return (
            f"{self.cases} fuzz connections, ~{self.frames_sent} frames / {self.bytes_sent} "
            f"bytes sent; kinds {dict(sorted(self.by_kind.items()))}; error codes "
            f"{dict(sorted(self.error_codes.items()))}; {self.pings_answered} follow-up pings "
            f"answered; {self.encoding_fallbacks} replies in the other encoding; "
            f"{len(self.problems)} problems"
        )


async def run_fuzz(
    socket_path: Path,
    n: int,
    *,
    seed: int = 0,
    existing_topics: Sequence[str] = (),
    concurrency: int = 8,
) -> FuzzReport:
    """`n` random cases, `concurrency` connections at a time."""
    rng = random.Random(seed)
    report = FuzzReport()
    cases = [random_case(rng, existing_topics) for _ in range(n)]
    limiter = trio.CapacityLimiter(concurrency)

    async def one(case: Case) -> None:
        async with limiter:
            try:
                result = await run_case(socket_path, case)
            except trio.TooSlowError:
                result = CaseResult(problems=["the daemon did not answer or close in 10 s"])
            except OSError as exc:
                result = CaseResult(problems=[f"cannot connect: {exc}"])
            report.add(case, result)

    async with trio.open_nursery() as nursery:
        for case in cases:
            nursery.start_soon(one, case)
    return report


@dataclass
class IdleReport:
    opened: int = 0
    refused: dict[str, int] = field(default_factory=dict)
    pings_during: int = 0


async def idle_storm(socket_path: Path, n: int, *, pings: int = 20) -> IdleReport:
    """`n` connections that connect and say nothing, all held open at once, while a real
    client pings `pings` times: the daemon must keep answering (descriptors and memory stay
    bounded; connections over its cap get a typed refusal, not a hang or a crash). The idle
    ones are closed by us afterwards (the daemon closes them itself after its hello
    timeout)."""
    report = IdleReport()
    streams: list[trio.SocketStream] = []
    try:
        for _ in range(n):
            try:
                streams.append(await trio.open_unix_socket(str(socket_path)))
            except OSError as exc:
                report.refused[type(exc).__name__] = report.refused.get(type(exc).__name__, 0) + 1
        report.opened = len(streams)
        ping = _ping("msgpack")
        for _ in range(pings):
            stream = await trio.open_unix_socket(str(socket_path))
            async with stream:
                await stream.send_all(frame(hello_body("msgpack")) + ping)
                decoder = FrameDecoder(DEFAULT_MAX_FRAME_SIZE)
                codec: Codec[Any] = Codec(ServerMessage, "msgpack", DEFAULT_MAX_FRAME_SIZE)
                done = False
                while not done:
                    data = await stream.receive_some(65536)
                    if not data:
                        break
                    for body in decoder.feed(data):
                        msg = codec.decode(body)
                        if isinstance(msg, ErrorReply):
                            report.refused[msg.code] = report.refused.get(msg.code, 0) + 1
                            done = True
                        elif isinstance(msg, Reply) and msg.id == PING_ID:
                            report.pings_during += 1
                            done = True
    finally:
        for stream in streams:
            await trio.aclose_forcefully(stream)
    return report
