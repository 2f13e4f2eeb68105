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

import ssl
import threading
import time
from collections.abc import Callable, Iterable
from http.server import ThreadingHTTPServer
from typing import Any

from tests.fakes.anthropic_http import _Handler
from tests.fakes.anthropic_replies import (
    CompactSummary,
    Hang,
    HTTPError,
    Predicate,
    Reply,
    ReplySpec,
    Rule,
    RuleLike,
    Text,
    Thinking,
    ToolUse,
    _to_rule,
    always,
    compact_summary,
    hang,
    has_tool_result,
    has_tools,
    http_error,
    no_tools,
    overloaded,
    prompt_too_long,
    summary_request,
    text,
    thinking,
    tool_use,
    user_says,
    user_text_contains,
)
from tests.fakes.anthropic_requests import (
    RecordedRequest,
    is_summary_request,
    last_user_has_tool_result,
    last_user_text,
    system_reminders_after_tool_result,
    texts_after_tool_result,
    user_texts,
)

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



# --------------------------------------------------------------------------------------
# The server
# --------------------------------------------------------------------------------------


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
        tls: ssl.SSLContext | None = None,
    ) -> None:
        """`tls`: serve HTTPS with this server context (`base_url` is then https)."""
        self._tls = tls
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
        scheme = "http"
        if self._tls is not None:
            # The handshake happens at the handler's first read, in its own thread.
            server.socket = self._tls.wrap_socket(
                server.socket, server_side=True, do_handshake_on_connect=False
            )
            scheme = "https"
        self.base_url = f"{scheme}://{self._host}:{port}"
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
