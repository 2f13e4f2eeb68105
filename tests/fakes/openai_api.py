"""A fake OpenAI-compatible Chat Completions server on 127.0.0.1, for tests and the bench.

Stands in for the vendor (OpenAI, Ollama, llama.cpp, vLLM): `POST /v1/chat/completions`
(and `POST /v1/responses`, the Responses API, for text and tool calls) streamed as
Server-Sent Events in chunked HTTP/1.1 on kept-alive connections, and
`GET /v1/models`. Replies are chosen by rules over the request (first match wins; a rule with a
list of replies plays them in turn, the last one repeating), so a test scripts the model:
text, parallel tool calls, usage, 429 / 500 / 401 / context overflow, a cut stream, a slow
stream, a stream that hangs until the client goes away.

Every request is recorded (`requests`: body, headers, arrival time on the server's clock) and
every response's end time too, so tests assert what the model saw, and the bench measures a
tool step on the server's clock (response end -> next request).

`disable_nagle_algorithm`: without it, a request sent right after a response on a kept-alive
connection waits ~40 ms (Nagle + delayed ACK) and every tool loop looks slow.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# --- what the server saw ------------------------------------------------------------------------


@dataclass
class Recorded:
    path: str
    body: dict[str, Any]
    headers: dict[str, str]
    received_at: float
    #: When the last byte of this request's response was written (server clock).
    ended_at: float | None = None

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The conversation as Chat Completions messages (a Responses request's `input`
        items read back into that shape, so rules match either API)."""
        if "input" in self.body:
            return _chat_messages(self.body["input"])
        return list(self.body.get("messages", []))

    @property
    def first_user_text(self) -> str:
        return next((_text(m) for m in self.messages if m.get("role") == "user"), "")

    @property
    def last_user_text(self) -> str:
        users = [m for m in self.messages if m.get("role") == "user"]
        return _text(users[-1]) if users else ""

    @property
    def last_role(self) -> str:
        return str(self.messages[-1].get("role", "")) if self.messages else ""

    @property
    def tool_results(self) -> list[str]:
        return [_text(m) for m in self.messages if m.get("role") == "tool"]

    @property
    def tool_names(self) -> list[str]:
        return [t["function"]["name"] for t in self.body.get("tools", [])]

    def count_text(self, needle: str) -> int:
        """How many messages contain `needle` (to assert a steer is seen exactly once)."""
        return sum(needle in _text(m) for m in self.messages)


def _chat_messages(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for item in items:
        kind = item.get("type", "message")
        if kind == "function_call":
            call = {
                "id": item["call_id"],
                "type": "function",
                "function": {"name": item["name"], "arguments": item["arguments"]},
            }
            last = out[-1] if out else None
            if last is not None and last["role"] == "assistant" and "tool_calls" in last:
                last["tool_calls"].append(call)
            elif last is not None and last["role"] == "assistant":
                last["tool_calls"] = [call]
            else:
                out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            out.append({"role": "tool", "tool_call_id": item["call_id"], "content": item["output"]})
        else:
            content = item.get("content")
            if isinstance(content, list):
                content = [
                    {"type": "text", "text": p.get("text", "")}
                    if p.get("type") in ("input_text", "output_text")
                    else {"type": "image_url", "image_url": {"url": p.get("image_url", "")}}
                    for p in content
                ]
            out.append({"role": item["role"], "content": content})
    return out


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return str(content or "")


# --- replies ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Text:
    """Stream `text` in `pieces` chunks (default: one per word), `delay` seconds apart."""

    text: str
    delay: float = 0.0
    usage: tuple[int, int] = (12, 7)
    finish: str = "stop"
    reasoning: str = ""


@dataclass(frozen=True)
class ToolCalls:
    """Parallel tool calls (name, arguments); `raw_arguments` sends arguments as given."""

    calls: Sequence[tuple[str, dict[str, Any] | str]]
    text: str = ""
    usage: tuple[int, int] = (20, 9)


@dataclass(frozen=True)
class Error:
    status: int
    message: str = "error"
    code: str = ""
    retry_after: float | None = None


@dataclass(frozen=True)
class Cut:
    """Stream `text`, then drop the connection mid-answer (no finish, no [DONE])."""

    text: str


@dataclass(frozen=True)
class Garbage:
    """Stream `text`, then an event that is not JSON."""

    text: str


@dataclass(frozen=True)
class Hang:
    """Stream `text`, then keep the stream open until the client goes away (or `limit`)."""

    text: str = ""
    limit: float = 30.0


@dataclass(frozen=True)
class Gate:
    """Stream `before`, wait until the test sets `gate`, then stream `after` and finish."""

    before: str
    after: str
    gate: threading.Event
    limit: float = 30.0
    usage: tuple[int, int] = (12, 7)


Reply = Text | ToolCalls | Error | Cut | Hang | Gate | Garbage


@dataclass
class Rule:
    match: Callable[[Recorded], bool]
    replies: Reply | list[Reply]
    hits: int = 0

    def next_reply(self) -> Reply:
        if not isinstance(self.replies, list):
            return self.replies
        reply = self.replies[min(self.hits, len(self.replies) - 1)]
        self.hits += 1
        return reply


def user_says(text: str) -> Callable[[Recorded], bool]:
    """The last user message is `text` and the model has not answered it with tools yet."""
    return lambda r: r.last_role == "user" and r.last_user_text == text


def first_user_says(text: str) -> Callable[[Recorded], bool]:
    return lambda r: r.first_user_text == text and r.last_role == "user"


def after_tools(prompt: str) -> Callable[[Recorded], bool]:
    """The request carries tool results for a turn whose (last non-steer) user text is `prompt`."""
    return lambda r: (
        r.last_role == "tool"
        and any(m.get("role") == "user" and _text(m) == prompt for m in r.messages)
    )


def anything(_: Recorded) -> bool:
    return True


MODEL_PATHS = ("/chat/completions", "/responses")

# --- the server ---------------------------------------------------------------------------------


@dataclass
class FakeOpenAI:
    """Use as a context manager: `with FakeOpenAI(rules) as api: api.base_url`."""

    rules: list[Rule] = field(default_factory=list)
    models: list[str] = field(default_factory=lambda: ["fake-model", "fake-large"])
    #: When set, requests need `Authorization: Bearer <api_key>` (else 401).
    api_key: str | None = None
    requests: list[Recorded] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _closing: threading.Event = field(default_factory=threading.Event)

    def __enter__(self) -> FakeOpenAI:
        fake = self

        class Handler(_Handler):
            api = fake

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._closing.set()
        assert self._server is not None
        self._server.shutdown()
        self._server.server_close()

    @property
    def base_url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    @property
    def chat_requests(self) -> list[Recorded]:
        """Model requests, Chat Completions or Responses."""
        with self._lock:
            return [r for r in self.requests if r.path.endswith(MODEL_PATHS)]

    def reply_for(self, req: Recorded) -> Reply:
        for rule in self.rules:
            if rule.match(req):
                return rule.next_reply()
        return Error(500, f"fake server: no rule for {req.last_user_text!r}")


class _Handler(BaseHTTPRequestHandler):
    api: FakeOpenAI
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:
        pass

    # --- plumbing -----------------------------------------------------------------------

    def _json(self, status: int, data: Any, headers: dict[str, str] | None = None) -> None:
        body = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()

    def _error(self, status: int, message: str, code: str = "", **headers: str) -> None:
        self._json(status, {"error": {"message": message, "code": code or None}}, headers)

    def _authorised(self) -> bool:
        key = self.api.api_key
        if key is None or self.headers.get("Authorization") == f"Bearer {key}":
            return True
        self._error(401, "Incorrect API key provided.", "invalid_api_key")
        return False

    def do_GET(self) -> None:
        if not self._authorised():
            return
        if self.path.rstrip("/").endswith("/models"):
            self._json(200, {"object": "list", "data": [{"id": m} for m in self.api.models]})
        else:
            self._error(404, f"no route {self.path}")

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        raw = self.rfile.read(length)
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            self._error(400, "body is not JSON")
            return
        rec = Recorded(
            path=self.path,
            body=body,
            headers={k.lower(): v for k, v in self.headers.items()},
            received_at=time.perf_counter(),
        )
        with self.api._lock:
            self.api.requests.append(rec)
        try:
            self._answer(rec)
        finally:
            rec.ended_at = time.perf_counter()

    def _answer(self, rec: Recorded) -> None:
        if not self._authorised():
            return
        if not self.path.endswith(MODEL_PATHS):
            self._error(404, f"no route {self.path}")
            return
        model = rec.body.get("model")
        if model not in self.api.models:
            self._error(404, f"The model `{model}` does not exist", "model_not_found")
            return
        reply = self.api.reply_for(rec)
        if isinstance(reply, Error):
            headers = {}
            if reply.retry_after is not None:
                headers["Retry-After"] = str(reply.retry_after)
            self._error(reply.status, reply.message, reply.code, **headers)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        if self.path.endswith("/responses"):
            self._responses(reply)
            return
        usage_wanted = bool(rec.body.get("stream_options", {}).get("include_usage"))
        if isinstance(reply, Text):
            if reply.reasoning:
                self._event({"reasoning_content": reply.reasoning})
            for i, piece in enumerate(_pieces(reply.text)):
                if i and reply.delay:
                    time.sleep(reply.delay)
                self._event({"content": piece})
            self._finish(reply.finish, reply.usage if usage_wanted else None)
        elif isinstance(reply, ToolCalls):
            if reply.text:
                self._event({"content": reply.text})
            for index, (name, args) in enumerate(reply.calls):
                text = args if isinstance(args, str) else json.dumps(args)
                half = len(text) // 2
                call_id = f"call_{len(self.api.requests)}_{index}"
                self._event(
                    {
                        "tool_calls": [
                            {
                                "index": index,
                                "id": call_id,
                                "type": "function",
                                "function": {"name": name, "arguments": text[:half]},
                            }
                        ]
                    }
                )
                self._event(
                    {"tool_calls": [{"index": index, "function": {"arguments": text[half:]}}]}
                )
            self._finish("tool_calls", reply.usage if usage_wanted else None)
        elif isinstance(reply, Gate):
            for piece in _pieces(reply.before):
                self._event({"content": piece})
            reply.gate.wait(reply.limit)
            for piece in _pieces(reply.after):
                self._event({"content": piece})
            self._finish("stop", reply.usage if usage_wanted else None)
        elif isinstance(reply, Garbage):
            for piece in _pieces(reply.text):
                self._event({"content": piece})
            self._chunk(b"data: {this is not json\n\n")
            self._finish("stop", None)
        elif isinstance(reply, Cut):
            for piece in _pieces(reply.text):
                self._event({"content": piece})
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
        elif isinstance(reply, Hang):
            for piece in _pieces(reply.text):
                self._event({"content": piece})
            deadline = time.monotonic() + reply.limit
            try:
                while time.monotonic() < deadline and not self.api._closing.is_set():
                    time.sleep(0.02)
                    self._chunk(b": keep-alive\n\n")  # raises once the client has gone
            except OSError:
                pass
            self.close_connection = True

    def _responses(self, reply: Reply) -> None:
        """`reply` as a Responses API event stream (text and tool calls)."""

        def event(kind: str, **fields: Any) -> None:
            data = json.dumps({"type": kind, **fields}).encode()
            self._chunk(b"event: " + kind.encode() + b"\ndata: " + data + b"\n\n")

        event("response.created", response={"status": "in_progress"})
        if isinstance(reply, Text):
            if reply.reasoning:
                event("response.reasoning_summary_text.delta", delta=reply.reasoning)
            for piece in _pieces(reply.text):
                event("response.output_text.delta", delta=piece, output_index=0)
            usage = reply.usage
        elif isinstance(reply, ToolCalls):
            if reply.text:
                event("response.output_text.delta", delta=reply.text, output_index=0)
            for index, (name, args) in enumerate(reply.calls, 1):
                text = args if isinstance(args, str) else json.dumps(args)
                half = len(text) // 2
                item = {
                    "type": "function_call",
                    "id": f"fc_{index}",
                    "call_id": f"call_{len(self.api.requests)}_{index - 1}",
                    "name": name,
                    "arguments": "",
                }
                event("response.output_item.added", output_index=index, item=item)
                for part in (text[:half], text[half:]):
                    event(
                        "response.function_call_arguments.delta",
                        item_id=item["id"],
                        output_index=index,
                        delta=part,
                    )
                event(
                    "response.output_item.done",
                    output_index=index,
                    item={**item, "arguments": text},
                )
            usage = reply.usage
        else:
            raise NotImplementedError(f"the fake has no Responses form of {reply!r}")
        event(
            "response.completed",
            response={
                "status": "completed",
                "usage": {"input_tokens": usage[0], "output_tokens": usage[1]},
            },
        )
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _event(self, delta: dict[str, Any], finish: str | None = None) -> None:
        chunk = {
            "id": "chatcmpl-fake",
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        self._chunk(b"data: " + json.dumps(chunk).encode() + b"\n\n")

    def _finish(self, reason: str, usage: tuple[int, int] | None) -> None:
        self._event({}, finish=reason)
        if usage is not None:
            data = {
                "id": "chatcmpl-fake",
                "object": "chat.completion.chunk",
                "choices": [],
                "usage": {
                    "prompt_tokens": usage[0],
                    "completion_tokens": usage[1],
                    "total_tokens": sum(usage),
                },
            }
            self._chunk(b"data: " + json.dumps(data).encode() + b"\n\n")
        self._chunk(b"data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


def _pieces(text: str) -> list[str]:
    """One piece per word (keeping the spaces), so streaming is visible."""
    if not text:
        return []
    words = text.split(" ")
    return [w + (" " if i < len(words) - 1 else "") for i, w in enumerate(words)]
