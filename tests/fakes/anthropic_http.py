"""The fake Anthropic API's HTTP side: one `BaseHTTPRequestHandler` that routes, records
and answers each request (SSE streams in the real event format, or JSON). Imported through
`tests.fakes.anthropic_api`."""

from __future__ import annotations

import json
import select
import socket
import uuid
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any

from tests.fakes.anthropic_replies import (
    CompactSummary,
    Hang,
    HTTPError,
    Reply,
    Text,
    Thinking,
    ToolUse,
)
from tests.fakes.anthropic_requests import (
    RecordedRequest,
)

if TYPE_CHECKING:
    from tests.fakes.anthropic_api import FakeAnthropicAPI


SECRET_HEADER_PARTS = ("key", "auth", "token", "secret", "cookie", "password")


class _ClientGone(Exception):
    pass


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
    _current: RecordedRequest  # the request being answered (its pauses are recorded)
    protocol_version = "HTTP/1.1"
    # Every SSE event is its own write: with Nagle on, an event waits for the ACK of the
    # previous one, which the client delays up to 40 ms, so first-chunk times measured on
    # this fake would carry a 0-40 ms artefact no real API has (TCP_NODELAY on the socket).
    disable_nagle_algorithm = True
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
            self._current.pauses.append(seconds)
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
        req = RecordedRequest(
            index=-1, path=path, query=query, headers=headers, body=body,
            api_key=self.headers.get("x-api-key")
            or (self.headers.get("authorization") or "").removeprefix("Bearer "),
        )
        fake = self.fake
        fake._record(req)
        self._current = req
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
