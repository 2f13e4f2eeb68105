"""A fake Anthropic Messages API for tests (stdlib only).

Serves ``POST /v1/messages`` (streaming SSE in the real event format, or a JSON
message when ``stream`` is false) and ``POST /v1/messages/count_tokens`` on
``127.0.0.1`` at an ephemeral port, from a ``ThreadingHTTPServer`` running in a
background thread. It therefore works under any event loop (trio tests included):
the CLI talks to it over TCP, and nothing here touches the caller's loop.

Typical use::

    from tests.fakes.anthropic_api import (
        FakeAnthropicAPI, Rule, has_tool_result, text, tool_use, user_says)

    with FakeAnthropicAPI(rules=[
        Rule(user_says("run it"), tool_use("Bash", {"command": "echo hi"})),
        Rule(has_tool_result, text("Done.")),
    ]) as api:
        env = {"ANTHROPIC_BASE_URL": api.base_url, "ANTHROPIC_API_KEY": "dummy", ...}
        ...
        assert api.requests[-1].last_user_text == "run it"

Reply selection (first match wins):
  1. ``responder(request)`` if given and it returns a reply (not ``None``);
  2. the rule list, in order (a rule with ``times=n`` is used at most n times);
  3. a compaction summary when the request is the CLI's summary request (/compact,
     auto or reactive compaction);
  4. ``default_reply`` (text "OK.").
A ``tool_use`` reply is never sent to a request that has no tools: it degrades to
text (the CLI sends tool-less side requests, e.g. titles) and the request is
marked ``tool_use_suppressed``.

Message shapes to expect from the CLI (2.1.332): the first user message carries
several ``<system-reminder>`` text blocks before the prompt; with the default model
the request also contains ``{"role": "system"}`` messages in ``messages`` (e.g.
"# Environment", hook additionalContext). The helpers below skip both.

Blocking helpers (``wait_for_requests``, ``Hang.wait_started``) block the calling
thread; from trio call them via ``trio.to_thread.run_sync``.
"""

from __future__ import annotations

import json
import select
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = [
    "FakeAnthropicAPI",
    "RecordedRequest",
    "Rule",
    "Reply",
    "Text",
    "ToolUse",
    "Thinking",
    "HTTPError",
    "Hang",
    "CompactSummary",
    "text",
    "tool_use",
    "thinking",
    "http_error",
    "overloaded",
    "prompt_too_long",
    "hang",
    "compact_summary",
    "last_user_text",
    "user_texts",
    "last_user_has_tool_result",
    "system_reminders_after_tool_result",
    "texts_after_tool_result",
    "is_summary_request",
    "user_says",
    "user_text_contains",
    "has_tool_result",
    "has_tools",
    "no_tools",
    "summary_request",
    "always",
]

SECRET_HEADER_PARTS = ("key", "auth", "token", "secret", "cookie", "password")
SUMMARY_MARKERS = (
    "create a detailed summary",
    "Your task is to create a detailed summary",
)
DEFAULT_MODEL = "claude-fake-1"


# --------------------------------------------------------------------------------------
# Request inspection helpers (pure functions over a parsed request body)
# --------------------------------------------------------------------------------------


def _blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list):
        return [b for b in content if isinstance(b, dict)]
    return []


def _is_reminder(text: str) -> bool:
    return text.lstrip().startswith("<system-reminder>")


def user_texts(body: dict[str, Any]) -> list[str]:
    """All user text blocks (in order) that are not ``<system-reminder>`` blocks."""
    out = []
    for msg in body.get("messages") or []:
        if msg.get("role") != "user":
            continue
        for b in _blocks(msg.get("content")):
            if b.get("type") == "text" and not _is_reminder(b.get("text", "")):
                out.append(b.get("text", ""))
    return out


def last_user_text(body: dict[str, Any]) -> str | None:
    """The last user text block that is not a ``<system-reminder>``, searching user
    messages from the newest backwards (a tool_result-only message is skipped)."""
    for msg in reversed(body.get("messages") or []):
        if msg.get("role") != "user":
            continue
        for b in reversed(_blocks(msg.get("content"))):
            if b.get("type") == "text" and not _is_reminder(b.get("text", "")):
                return str(b.get("text", ""))
    return None


def _tail(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The messages after the last assistant message (what this request adds)."""
    msgs = body.get("messages") or []
    for i in range(len(msgs) - 1, -1, -1):
        if msgs[i].get("role") == "assistant":
            return msgs[i + 1 :]
    return list(msgs)


#: Texts the CLI itself places after a tool_result: they do not start a new prompt.
_CONTINUATION_PREFIXES = (
    "[Request interrupted by user",
    "The user sent a new message while you were working",
)


def last_user_has_tool_result(body: dict[str, Any]) -> bool:
    """True when this request continues a turn after a tool ran: the messages after the
    last assistant message carry a tool_result and no new prompt follows it.

    After an interrupted tool the CLI sends the next prompt in the same user message as
    the (error) tool_result and "[Request interrupted by user for tool use]"; that request
    starts a new turn, so it is not a continuation."""
    seen = False
    for m in _tail(body):
        if m.get("role") != "user":
            continue
        for b in _blocks(m.get("content")):
            if b.get("type") == "tool_result":
                seen = True
            elif seen and b.get("type") == "text":
                t = b.get("text", "")
                if not _is_reminder(t) and not t.lstrip().startswith(_CONTINUATION_PREFIXES):
                    seen = False
    return seen


def _after_tool_result(body: dict[str, Any]) -> list[tuple[str, str]]:
    """(role, text) of every text block that follows the last tool_result, in the
    messages after the last assistant message."""
    out: list[tuple[str, str]] = []
    seen = False
    for m in _tail(body):
        role = m.get("role", "")
        for b in _blocks(m.get("content")):
            if b.get("type") == "tool_result":
                seen, out = True, []
            elif seen and b.get("type") == "text":
                out.append((role, b.get("text", "")))
    return out


def system_reminders_after_tool_result(body: dict[str, Any]) -> list[str]:
    """Injected context that follows a ``tool_result``: this is where PreToolUse /
    PostToolUse hook ``additionalContext`` lands (the injection point for steering).

    The CLI (2.1.332) uses two forms, depending on the model:
      * claude-sonnet-4-5 / haiku-4-5 / 3.x: ``<system-reminder>`` text blocks in the
        same user message, right after the tool_result
        ("<system-reminder>\nPreToolUse:Bash hook additional context: X\n</system-reminder>");
      * the default model (claude-opus-5-5, beta ``per-turn-control-2026-07-01``): a
        separate ``{"role": "system"}`` message after the tool_result message
        ("PreToolUse:Bash hook additional context: X", several hooks joined by blank lines).
    Both are returned (raw text)."""
    return [
        t
        for role, t in _after_tool_result(body)
        if role == "system" or (role == "user" and _is_reminder(t))
    ]


def texts_after_tool_result(body: dict[str, Any]) -> list[str]:
    """All text blocks (reminders, ``system`` messages, plain text) following the last
    tool_result, e.g. a message the CLI merged in while a tool ran ("The user sent a
    new message while you were working: ...")."""
    return [t for _role, t in _after_tool_result(body)]


def is_summary_request(body: dict[str, Any]) -> bool:
    """True when the last user text is the CLI's compaction prompt."""
    t = last_user_text(body) or ""
    return any(m in t for m in SUMMARY_MARKERS)


# --------------------------------------------------------------------------------------
# Recorded requests
# --------------------------------------------------------------------------------------


@dataclass
class RecordedRequest:
    index: int
    path: str  # without the query string
    query: str
    headers: dict[str, str]  # lower-cased names, secrets removed
    body: dict[str, Any]
    received_at: float = field(default_factory=time.monotonic)
    reply_kind: str | None = None
    tool_use_suppressed: bool = False
    client_disconnected: bool = False  # the client went away mid-answer (interrupt)
    finished: bool = False  # the answer was fully written

    # convenience views over the body
    @property
    def last_user_text(self) -> str | None:
        return last_user_text(self.body)

    @property
    def user_texts(self) -> list[str]:
        return user_texts(self.body)

    @property
    def has_tools(self) -> bool:
        return bool(self.body.get("tools"))

    @property
    def tool_names(self) -> list[str]:
        return [t.get("name", "") for t in self.body.get("tools") or []]

    @property
    def last_user_has_tool_result(self) -> bool:
        return last_user_has_tool_result(self.body)

    @property
    def system_reminders_after_tool_result(self) -> list[str]:
        return system_reminders_after_tool_result(self.body)

    @property
    def texts_after_tool_result(self) -> list[str]:
        return texts_after_tool_result(self.body)

    @property
    def is_summary_request(self) -> bool:
        return is_summary_request(self.body)

    @property
    def messages(self) -> list[dict[str, Any]]:
        return self.body.get("messages") or []

    @property
    def model(self) -> str:
        return self.body.get("model") or DEFAULT_MODEL

    @property
    def is_messages(self) -> bool:
        return self.path == "/v1/messages"


# --------------------------------------------------------------------------------------
# Replies
# --------------------------------------------------------------------------------------


@dataclass(kw_only=True)
class Reply:
    """Common fields (keyword-only). ``input_tokens`` None means the server's
    default (``default_input_tokens``); set it high to trigger auto-compaction."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0
    delay: float = 0.0  # seconds slept before each delta (mid-stream interrupts)
    kind = "reply"


@dataclass
class Text(Reply):
    text: str = "OK."
    chunks: int = 3  # number of text_delta events (at most len(text))
    stop_reason: str = "end_turn"
    kind = "text"


@dataclass
class ToolUse(Reply):
    name: str = "Bash"
    input: dict[str, Any] = field(default_factory=dict)
    id: str | None = None  # generated when None
    text_before: str | None = None  # optional text block before the tool_use block
    kind = "tool_use"


@dataclass
class Thinking(Reply):
    thinking: str = "Let me think."
    text: str = "OK."
    signature: str = "fake-signature"
    chunks: int = 2
    kind = "thinking"


@dataclass
class HTTPError(Reply):
    status: int = 529
    error_type: str = "overloaded_error"
    message: str = "Overloaded"
    kind = "error"


@dataclass
class Hang(Reply):
    """Streams ``text_before`` (if any) and then blocks until ``release()`` (or the
    client disconnects, or the server stops); once released it finishes with
    ``text_after``. ``started`` is set when the hang begins. The events are shared by
    every request the reply answers: use one ``Hang`` per request (``times=1``)."""

    text_before: str = "Working"
    text_after: str = " done."
    started: threading.Event = field(default_factory=threading.Event)
    released: threading.Event = field(default_factory=threading.Event)
    kind = "hang"

    def release(self) -> None:
        self.released.set()

    def wait_started(self, timeout: float = 30.0) -> bool:
        return self.started.wait(timeout)


@dataclass
class CompactSummary(Reply):
    summary: str = "The user and the assistant had a short conversation."
    analysis: str = "Reviewing the conversation."
    chunks: int = 2
    kind = "compact_summary"

    @property
    def text(self) -> str:
        return f"<analysis>\n{self.analysis}\n</analysis>\n\n<summary>\n{self.summary}\n</summary>"


def text(t: str = "OK.", *, chunks: int = 3, delay: float = 0.0, **kw: Any) -> Text:
    return Text(text=t, chunks=chunks, delay=delay, **kw)


def tool_use(name: str = "Bash", input: dict[str, Any] | None = None, **kw: Any) -> ToolUse:
    if input is None:
        input = {"command": "echo hi", "description": "Print hi"}
    return ToolUse(name=name, input=input, **kw)


def thinking(thought: str = "Let me think.", answer: str = "OK.", **kw: Any) -> Thinking:
    return Thinking(thinking=thought, text=answer, **kw)


def http_error(status: int, error_type: str, message: str, **kw: Any) -> HTTPError:
    return HTTPError(status=status, error_type=error_type, message=message, **kw)


def overloaded() -> HTTPError:
    return HTTPError(status=529, error_type="overloaded_error", message="Overloaded")


def prompt_too_long(tokens: int = 250_000, limit: int = 200_000) -> HTTPError:
    return HTTPError(
        status=400,
        error_type="invalid_request_error",
        message=f"prompt is too long: {tokens} tokens > {limit} maximum",
    )


def hang(text_before: str = "Working", text_after: str = " done.", **kw: Any) -> Hang:
    return Hang(text_before=text_before, text_after=text_after, **kw)


def compact_summary(
    summary: str = "The user and the assistant had a short conversation.", **kw: Any
) -> CompactSummary:
    return CompactSummary(summary=summary, **kw)


# --------------------------------------------------------------------------------------
# Rules and predicates
# --------------------------------------------------------------------------------------

Predicate = Callable[[RecordedRequest], bool]
ReplySpec = Reply | Callable[[RecordedRequest], Reply]


@dataclass
class Rule:
    predicate: Predicate
    reply: ReplySpec
    times: int | None = None  # None: unlimited
    used: int = 0

    def exhausted(self) -> bool:
        return self.times is not None and self.used >= self.times


def always(_req: RecordedRequest) -> bool:
    return True


def user_says(expected: str) -> Predicate:
    """The last (non-reminder) user text equals ``expected`` (whitespace-stripped)
    and the last user message is not a tool_result (so a follow-up request in the
    same turn does not match again)."""

    def pred(req: RecordedRequest) -> bool:
        return (
            not req.last_user_has_tool_result
            and (req.last_user_text or "").strip() == expected.strip()
        )

    return pred


def user_text_contains(needle: str, *, fresh: bool = True) -> Predicate:
    """The last user text contains ``needle``; with ``fresh`` (default) only when
    the last user message is not a tool_result."""

    def pred(req: RecordedRequest) -> bool:
        if fresh and req.last_user_has_tool_result:
            return False
        return needle in (req.last_user_text or "")

    return pred


def has_tool_result(req: RecordedRequest) -> bool:
    return req.last_user_has_tool_result


def has_tools(req: RecordedRequest) -> bool:
    return req.has_tools


def no_tools(req: RecordedRequest) -> bool:
    return not req.has_tools


def summary_request(req: RecordedRequest) -> bool:
    return req.is_summary_request


RuleLike = Rule | tuple[Any, ...]


def _to_rule(r: RuleLike) -> Rule:
    if isinstance(r, Rule):
        return r
    if isinstance(r, tuple) and len(r) in (2, 3):
        return Rule(*r)
    raise TypeError(f"not a rule: {r!r}")


# --------------------------------------------------------------------------------------
# The server
# --------------------------------------------------------------------------------------


class _ClientGone(Exception):
    pass


class FakeAnthropicAPI:
    """Fake Messages API. Use as a context manager or call ``start()``/``stop()``."""

    def __init__(
        self,
        rules: Iterable[RuleLike] | None = None,
        *,
        responder: Callable[[RecordedRequest], Reply | None] | None = None,
        default_reply: ReplySpec | None = None,
        default_input_tokens: int = 1000,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self._lock = threading.Condition()
        self._rules: list[Rule] = [_to_rule(r) for r in (rules or [])]
        self.responder = responder
        self.default_reply: ReplySpec = default_reply if default_reply is not None else Text("OK.")
        self.default_input_tokens = default_input_tokens
        self._requests: list[RecordedRequest] = []
        self._host, self._port = host, port
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self.base_url: str = ""

    # ---- lifecycle ----
    def start(self) -> FakeAnthropicAPI:
        if self._server is not None:
            return self
        api = self

        class Handler(_Handler):
            fake = api

        server = ThreadingHTTPServer((self._host, self._port), Handler)
        server.daemon_threads = True
        self._server = server
        port = server.server_address[1]
        self.base_url = f"http://{self._host}:{port}"
        self._stopping.clear()
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="fake-anthropic-api",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # releases hangs
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> FakeAnthropicAPI:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    @property
    def port(self) -> int:
        return int(self.base_url.rsplit(":", 1)[1]) if self.base_url else 0

    # ---- rules ----
    def set_rules(self, rules: Iterable[RuleLike]) -> None:
        with self._lock:
            self._rules = [_to_rule(r) for r in rules]

    def add_rule(
        self,
        predicate: Predicate,
        reply: ReplySpec,
        times: int | None = None,
        *,
        first: bool = False,
    ) -> Rule:
        rule = Rule(predicate, reply, times)
        with self._lock:
            if first:
                self._rules.insert(0, rule)
            else:
                self._rules.append(rule)
        return rule

    def _choose(self, req: RecordedRequest) -> Reply:
        reply: Reply | None = None
        if self.responder is not None:
            reply = self.responder(req)
        if reply is None:
            with self._lock:
                for rule in self._rules:
                    if rule.exhausted():
                        continue
                    if rule.predicate(req):
                        rule.used += 1
                        spec = rule.reply
                        reply = (
                            spec(req) if callable(spec) and not isinstance(spec, Reply) else spec
                        )
                        break
        if reply is None and req.is_summary_request:
            reply = CompactSummary()
        if reply is None:
            spec = self.default_reply
            reply = spec(req) if callable(spec) and not isinstance(spec, Reply) else spec
        if isinstance(reply, ToolUse) and not req.has_tools:
            req.tool_use_suppressed = True
            reply = Text("OK.", input_tokens=reply.input_tokens)
        return reply

    # ---- recorded requests ----
    def _record(self, req: RecordedRequest) -> None:
        with self._lock:
            req.index = len(self._requests)
            self._requests.append(req)
            self._lock.notify_all()

    def _notify(self) -> None:
        with self._lock:
            self._lock.notify_all()

    @property
    def requests(self) -> list[RecordedRequest]:
        """A snapshot of every request received (all paths)."""
        with self._lock:
            return list(self._requests)

    @property
    def message_requests(self) -> list[RecordedRequest]:
        """Only ``POST /v1/messages`` requests."""
        return [r for r in self.requests if r.is_messages]

    def clear(self) -> None:
        with self._lock:
            self._requests.clear()

    def wait_for_requests(
        self,
        n: int,
        *,
        timeout: float = 30.0,
        predicate: Predicate | None = None,
    ) -> list[RecordedRequest]:
        """Block until at least ``n`` recorded requests (matching ``predicate``, default
        all ``/v1/messages`` ones) exist; return them. Raises ``TimeoutError``."""
        pred = predicate or (lambda r: r.is_messages)
        deadline = time.monotonic() + timeout
        with self._lock:
            while True:
                got = [r for r in self._requests if pred(r)]
                if len(got) >= n:
                    return got
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"expected {n} requests, got {len(got)}")
                self._lock.wait(left)


# --------------------------------------------------------------------------------------
# HTTP handler
# --------------------------------------------------------------------------------------


def _chunk_text(s: str, n: int) -> list[str]:
    if not s:
        return [""]
    n = max(1, min(n, len(s)))
    size = -(-len(s) // n)
    return [s[i : i + size] for i in range(0, len(s), size)]


class _Handler(BaseHTTPRequestHandler):
    fake: FakeAnthropicAPI  # set on the subclass
    protocol_version = "HTTP/1.1"
    server_version = "FakeAnthropic/1.0"

    def log_message(self, format: str, *args: Any) -> None:  # silence
        pass

    # ---- plumbing ----
    def _send_json(
        self, status: int, obj: Any, extra_headers: dict[str, str] | None = None
    ) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("request-id", "req_fake_" + uuid.uuid4().hex[:16])
        for k, v in (extra_headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, etype: str, message: str) -> None:
        extra = {"x-should-retry": "true"} if status in (429, 500, 502, 503, 529) else None
        self._send_json(
            status, {"type": "error", "error": {"type": etype, "message": message}}, extra
        )

    def _client_gone(self) -> bool:
        try:
            r, _, _ = select.select([self.connection], [], [], 0)
            if r:
                return bool(self.connection.recv(1, socket.MSG_PEEK) == b"")
        except (OSError, ValueError):
            return True
        return False

    def _write_chunk(self, data: bytes) -> None:
        if not data:
            return  # an empty chunk would end the chunked body
        try:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, OSError) as e:
            raise _ClientGone() from e

    def _event(self, name: str, payload: dict[str, Any]) -> None:
        self._write_chunk(f"event: {name}\ndata: {json.dumps(payload)}\n\n".encode())

    def _sleep(self, seconds: float) -> None:
        if seconds > 0:
            if self.fake._stopping.wait(seconds):
                raise _ClientGone()
            if self._client_gone():
                raise _ClientGone()

    # ---- routing ----
    def do_GET(self) -> None:
        self._not_found()

    def do_PUT(self) -> None:
        self._not_found()

    def do_DELETE(self) -> None:
        self._not_found()

    def _not_found(self) -> None:
        self._drain()
        self._error(404, "not_found_error", f"Not found: {self.command} {self.path}")

    def _drain(self) -> bytes:
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def do_POST(self) -> None:
        raw = self._drain()
        path, _, query = self.path.partition("?")
        if path not in ("/v1/messages", "/v1/messages/count_tokens"):
            self._error(404, "not_found_error", f"Not found: POST {path}")
            return
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            self._error(400, "invalid_request_error", "body is not JSON")
            return
        headers = {
            k.lower(): v
            for k, v in self.headers.items()
            if not any(p in k.lower() for p in SECRET_HEADER_PARTS)
        }
        req = RecordedRequest(index=-1, path=path, query=query, headers=headers, body=body)
        fake = self.fake
        fake._record(req)
        if path == "/v1/messages/count_tokens":
            req.reply_kind = "count_tokens"
            self._send_json(200, {"input_tokens": max(1, len(raw) // 4)})
            req.finished = True
            fake._notify()
            return
        try:
            reply = fake._choose(req)
        except Exception as e:  # a broken rule must not hang the CLI
            req.reply_kind = "rule_exception"
            self._error(500, "api_error", f"fake server rule raised: {e!r}")
            return
        req.reply_kind = reply.kind
        try:
            if isinstance(reply, HTTPError):
                self._error(reply.status, reply.error_type, reply.message)
            elif body.get("stream"):
                self._stream(req, reply)
            else:
                self._send_json(200, self._message_json(req, reply))
            req.finished = True
        except _ClientGone:
            req.client_disconnected = True
            self.close_connection = True
        finally:
            fake._notify()

    # ---- answers ----
    def _usage(self, reply: Reply, output_tokens: int) -> dict[str, Any]:
        return {
            "input_tokens": reply.input_tokens
            if reply.input_tokens is not None
            else self.fake.default_input_tokens,
            "output_tokens": reply.output_tokens
            if reply.output_tokens is not None
            else output_tokens,
            "cache_creation_input_tokens": reply.cache_creation_input_tokens,
            "cache_read_input_tokens": reply.cache_read_input_tokens,
        }

    def _content(self, reply: Reply) -> tuple[list[dict[str, Any]], str]:
        """Final content blocks and stop_reason of a reply (non-streaming form)."""
        if isinstance(reply, Text):
            return [{"type": "text", "text": reply.text}], reply.stop_reason
        if isinstance(reply, CompactSummary):
            return [{"type": "text", "text": reply.text}], "end_turn"
        if isinstance(reply, Thinking):
            return [
                {"type": "thinking", "thinking": reply.thinking, "signature": reply.signature},
                {"type": "text", "text": reply.text},
            ], "end_turn"
        if isinstance(reply, ToolUse):
            blocks: list[dict[str, Any]] = []
            if reply.text_before:
                blocks.append({"type": "text", "text": reply.text_before})
            blocks.append(
                {
                    "type": "tool_use",
                    "id": reply.id or _tool_id(),
                    "name": reply.name,
                    "input": reply.input,
                }
            )
            return blocks, "tool_use"
        if isinstance(reply, Hang):
            return [{"type": "text", "text": reply.text_before + reply.text_after}], "end_turn"
        raise TypeError(f"unknown reply {reply!r}")

    def _message_json(self, req: RecordedRequest, reply: Reply) -> dict[str, Any]:
        if isinstance(reply, Hang):
            self._wait_hang(reply)
        content, stop = self._content(reply)
        return {
            "id": _msg_id(),
            "type": "message",
            "role": "assistant",
            "model": req.model,
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": self._usage(reply, 10),
        }

    def _wait_hang(self, reply: Hang) -> None:
        reply.started.set()
        while not reply.released.wait(0.05):
            if self.fake._stopping.is_set() or self._client_gone():
                raise _ClientGone()

    def _stream(self, req: RecordedRequest, reply: Reply) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("request-id", "req_fake_" + uuid.uuid4().hex[:16])
        self.end_headers()
        try:
            self.wfile.flush()
        except OSError as e:
            raise _ClientGone() from e

        usage = self._usage(reply, 1)
        self._event(
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": _msg_id(),
                    "type": "message",
                    "role": "assistant",
                    "model": req.model,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {**usage, "output_tokens": 1},
                },
            },
        )
        out_tokens = 0
        index = 0

        def text_block(t: str, chunks: int) -> int:
            nonlocal index
            self._event(
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": index,
                    "content_block": {"type": "text", "text": ""},
                },
            )
            n = 0
            for piece in _chunk_text(t, chunks):
                self._sleep(reply.delay)
                self._event(
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "text_delta", "text": piece},
                    },
                )
                n += 1
            self._event("content_block_stop", {"type": "content_block_stop", "index": index})
            index += 1
            return n

        stop_reason = "end_turn"
        if isinstance(reply, (Text, CompactSummary)):
            out_tokens += text_block(reply.text, reply.chunks)
            stop_reason = getattr(reply, "stop_reason", "end_turn")
        elif isinstance(reply, Thinking):
            self._event(
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": index,
                    "content_block": {"type": "thinking", "thinking": "", "signature": ""},
                },
            )
            for piece in _chunk_text(reply.thinking, reply.chunks):
                self._sleep(reply.delay)
                self._event(
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "thinking_delta", "thinking": piece},
                    },
                )
                out_tokens += 1
            self._event(
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "signature_delta", "signature": reply.signature},
                },
            )
            self._event("content_block_stop", {"type": "content_block_stop", "index": index})
            index += 1
            out_tokens += text_block(reply.text, reply.chunks)
        elif isinstance(reply, ToolUse):
            if reply.text_before:
                out_tokens += text_block(reply.text_before, 2)
            self._event(
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": index,
                    "content_block": {
                        "type": "tool_use",
                        "id": reply.id or _tool_id(),
                        "name": reply.name,
                        "input": {},
                    },
                },
            )
            js = json.dumps(reply.input)
            for piece in _chunk_text(js, 3):
                self._sleep(reply.delay)
                self._event(
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "input_json_delta", "partial_json": piece},
                    },
                )
                out_tokens += 1
            self._event("content_block_stop", {"type": "content_block_stop", "index": index})
            index += 1
            stop_reason = "tool_use"
        elif isinstance(reply, Hang):
            self._event(
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": index,
                    "content_block": {"type": "text", "text": ""},
                },
            )
            if reply.text_before:
                self._event(
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "text_delta", "text": reply.text_before},
                    },
                )
            self._wait_hang(reply)
            if reply.text_after:
                self._event(
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "text_delta", "text": reply.text_after},
                    },
                )
            self._event("content_block_stop", {"type": "content_block_stop", "index": index})
            index += 1
            out_tokens += 2
        else:
            raise TypeError(f"unknown reply {reply!r}")

        final_usage = self._usage(reply, max(1, out_tokens))
        self._event(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                "usage": final_usage,
            },
        )
        self._event("message_stop", {"type": "message_stop"})
        try:
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError as e:
            raise _ClientGone() from e


def _msg_id() -> str:
    return "msg_fake_" + uuid.uuid4().hex[:20]


def _tool_id() -> str:
    return "toolu_fake_" + uuid.uuid4().hex[:20]
