"""One JSON-RPC 2.0 connection over newline-delimited JSON, either side of ACP (the trio shell
around `hostd_acp.jsonrpc`).

The same class serves the driver's connection to an ACP agent it started (hostd is the ACP
*client* there) and `hostd acp`'s connection to an editor (hostd is the ACP *agent* there):
both ends of ACP send requests, answer requests and send notifications, so one peer does
both. It knows nothing of processes: bytes come in through `serve(receive)`, go out through
the `send` callable it is given.

Rules this module guards:

- Messages are dispatched in the order they arrive: notifications are awaited in the reader
  (so every `session/update` sent before an answer is handled before the answer), responses
  wake their caller (`on_answer` runs in the reader, before the next line), requests run in
  their own task and are answered exactly once: the handler's result, or a JSON-RPC error
  (`RequestRefused`, an unknown method, a handler bug as `INTERNAL_ERROR`).
- Writes go through one lock, whole lines only.
- Bad input is answered, never fatal: a line that is not JSON is a `PARSE_ERROR` response
  with id null, a JSON value that is not a message an `INVALID_REQUEST` (only when
  `answer_garbage`: an agent is not owed answers to its garbage); both are passed to
  `on_drop`. Memory is bounded by the decoder's line limit and `max_inflight` requests.
- When the input ends, `wind_down` still answers every request read (after a grace for
  them to finish), for a peer that closed only its writing end.
- A request the other side withdraws (ACP's `$/cancel_request`, schema v1 "Cancellation")
  is still answered exactly once: its handler is cancelled and the answer is `-32800`
  (`REQUEST_CANCELLED`), unless the handler registered `on_withdraw` to wind down itself
  and answer with the method's own cancellation result (a permission request's
  `cancelled` outcome, a prompt's `cancelled` stop reason). A withdrawal of a
  request not (or no longer) being served is ignored, as the spec allows.
- A caller never waits forever: once `close()` is called (the owner calls it when the
  input has ended, after learning why: an agent's exit code) or a write fails, every pending
  and later request fails with `PeerGone`.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any

import msgspec
import trio

from hostd_acp.jsonrpc import (
    INTERNAL_ERROR,
    INVALID_REQUEST,
    PARSE_ERROR,
    REQUEST_CANCELLED,
    Dropped,
    LineDecoder,
    Notification,
    Request,
    RequestId,
    Response,
    encode_error,
    encode_notification,
    encode_request,
    encode_result,
)

__all__ = [
    "AfterReply",
    "PeerGone",
    "PeerRpcError",
    "RequestRefused",
    "RpcPeer",
    "on_withdraw",
]

log = logging.getLogger("hostd_acp")

#: ACP's protocol-level notification withdrawing a request (`CancelRequestNotification`).
CANCEL_REQUEST = "$/cancel_request"
#: At most this long to write a withdrawal (the request's caller is being cancelled).
WITHDRAW_S = 5.0

#: The request the current task serves: its peer and its serving token.
_SERVING: ContextVar[tuple[RpcPeer, int] | None] = ContextVar("hostd_acp_serving", default=None)

NotificationHandler = Callable[[str, msgspec.Raw], Awaitable[None]]
RequestHandler = Callable[[str, msgspec.Raw], Awaitable[Any]]
DropHandler = Callable[[Dropped], Awaitable[None]]
Send = Callable[[bytes], Awaitable[None]]


class PeerGone(Exception):
    """The other side is gone (its output ended, or it stopped reading ours)."""


class PeerRpcError(Exception):
    """The other side answered a request with a JSON-RPC error."""

    def __init__(self, method: str, code: int, message: str, data: Any = None) -> None:
        super().__init__(f"{method}: {message} (code {code})")
        self.method = method
        self.code = code
        self.message = message
        self.data = data


class RequestRefused(Exception):
    """Raise from a request handler to answer with this JSON-RPC error."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class AfterReply:
    """Return from a request handler to run `then()` right after the answer is written (e.g.
    `session/load`: the session goes live only once the editor has its answer)."""

    def __init__(self, result: Any, then: Callable[[], None]) -> None:
        self.result = result
        self.then = then


async def _ignore_drop(dropped: Dropped) -> None:
    del dropped


def on_withdraw(callback: Callable[[], None]) -> None:
    """Inside a request handler: when the other side withdraws this request
    (`$/cancel_request`), call `callback` (synchronously, in the reader) instead of
    cancelling the handler. The handler must then finish soon, with a result (a
    cancellation marker) or `RequestRefused(REQUEST_CANCELLED, ...)`."""
    current = _SERVING.get()
    if current is None:
        raise RuntimeError("on_withdraw is for request handlers")
    peer, token = current
    peer._on_withdraw[token] = callback


class RpcPeer:
    """A JSON-RPC connection: `serve` reads, `request` / `notify` write."""

    def __init__(
        self,
        send: Send,
        *,
        on_request: RequestHandler,
        on_notification: NotificationHandler,
        on_drop: DropHandler = _ignore_drop,
        max_line: int,
        max_inflight: int = 32,
        answer_garbage: bool = False,
    ) -> None:
        self._send_bytes = send
        self._on_request = on_request
        self._on_notification = on_notification
        self._on_drop = on_drop
        self._decoder = LineDecoder(max_line)
        self._answer_garbage = answer_garbage
        self._ids = itertools.count(1)
        self._pending: dict[
            RequestId, tuple[Callable[[], None] | None, trio.Event, list[Response]]
        ] = {}
        self._write_lock = trio.Lock()
        self._slots = trio.Semaphore(max_inflight)
        #: Requests being served, each handler in its scope (`wind_down` cuts them short),
        #: by serving token, with the id the peer gave it (`$/cancel_request` names that).
        self._serving: dict[int, trio.CancelScope] = {}
        self._serving_ids: dict[int, RequestId] = {}
        #: Served requests the peer withdrew, and the handlers' own ways to wind down.
        self._withdrawn: set[int] = set()
        self._on_withdraw: dict[int, Callable[[], None]] = {}
        self._serve_ids = itertools.count()
        self._idle = trio.Event()
        self._cut_short = "the request was cut short"
        #: Why the peer is gone (None while it is not).
        self.gone: PeerGone | None = None

    # --- reading --------------------------------------------------------------------------

    async def serve(self, receive: Callable[[], Awaitable[bytes]], nursery: trio.Nursery) -> None:
        """Read until `receive` returns b"" (the input ended); requests run in `nursery`.
        Then call `close()`."""
        while True:
            data = await receive()
            if not data:
                return
            for message in self._decoder.feed(data):
                await self._dispatch(message, nursery)

    def close(self, reason: str) -> None:
        """Fail every pending request with `PeerGone(reason)` (idempotent)."""
        if self.gone is None:
            self.gone = PeerGone(reason)
        for _on_answer, done, _box in self._pending.values():
            done.set()

    async def _dispatch(self, message: Any, nursery: trio.Nursery) -> None:
        if isinstance(message, Response):
            entry = self._pending.get(message.id)
            if entry is None:
                await self._on_drop(
                    Dropped("unknown-id", 0, f"a response to unknown request id {message.id!r}")
                )
                return
            on_answer, done, box = entry
            box.append(message)
            done.set()
            if on_answer is not None:
                on_answer()
        elif isinstance(message, Notification):
            if message.method == CANCEL_REQUEST:
                self._withdraw_incoming(message.params)
            else:
                await self._on_notification(message.method, message.params)
        elif isinstance(message, Request):
            try:
                self._slots.acquire_nowait()
            except trio.WouldBlock:
                await self._send_quietly(
                    encode_error(message.id, INTERNAL_ERROR, "too many requests in flight")
                )
                return
            # Counted as served from now (`wind_down` must not miss one not started yet).
            token = next(self._serve_ids)  # not the id: a careless peer may reuse one
            self._serving[token] = trio.CancelScope()
            self._serving_ids[token] = message.id
            nursery.start_soon(self._serve_request, message, token)
        else:
            if self._answer_garbage and message.reason == "malformed":
                # JSON-RPC 2.0, section 5: a parse error / invalid request has a null id.
                not_json = "neither a request" not in message.detail
                code = PARSE_ERROR if not_json else INVALID_REQUEST
                text = "parse error: not JSON" if not_json else "invalid request"
                await self._send_quietly(encode_error(None, code, text))
            await self._on_drop(message)

    def _withdraw_incoming(self, params: msgspec.Raw) -> None:
        """The peer's `$/cancel_request {requestId}`: wind down what serves that request."""
        try:
            named = msgspec.json.decode(params)
        except msgspec.DecodeError:
            return
        request_id = named.get("requestId") if isinstance(named, dict) else None
        if not isinstance(request_id, int | str) or isinstance(request_id, bool):
            return
        for token, served in list(self._serving_ids.items()):
            if served != request_id or token in self._withdrawn:
                continue
            self._withdrawn.add(token)
            hook = self._on_withdraw.get(token)
            if hook is not None:
                hook()
            else:
                self._serving[token].cancel()

    async def _serve_request(self, request: Request, token: int) -> None:
        then: Callable[[], None] | None = None
        scope = self._serving[token]
        _SERVING.set((self, token))
        try:
            try:
                with scope:
                    result = await self._on_request(request.method, request.params)
                if scope.cancelled_caught and token in self._withdrawn:
                    raise RequestRefused(REQUEST_CANCELLED, "request cancelled")
                if scope.cancelled_caught:  # cut short by `wind_down`: still answered
                    raise RequestRefused(INTERNAL_ERROR, self._cut_short)
            except RequestRefused as exc:
                reply = encode_error(request.id, exc.code, exc.message)
            except Exception as exc:  # a handler bug answers the peer, never kills the reader
                log.exception("handling %s failed", request.method)
                reply = encode_error(request.id, INTERNAL_ERROR, f"{type(exc).__name__}: {exc}")
            else:
                if isinstance(result, AfterReply):
                    result, then = result.result, result.then
                reply = encode_result(request.id, result)
            await self._send_quietly(reply)
        finally:
            del self._serving[token], self._serving_ids[token]
            self._withdrawn.discard(token)
            self._on_withdraw.pop(token, None)
            if not self._serving:
                self._idle.set()
            self._slots.release()
            if then is not None:
                then()

    async def wind_down(self, grace_s: float, why: str) -> None:
        """The input has ended: let the requests still being served finish for at most
        `grace_s`, then answer the rest with `INTERNAL_ERROR` `why`. Every request read gets
        exactly one answer (the other side may have closed only its writing end)."""
        with trio.move_on_after(grace_s):
            while self._serving:
                self._idle = trio.Event()
                await self._idle.wait()
        self._cut_short = why
        for scope in self._serving.values():
            scope.cancel()
        while self._serving:
            self._idle = trio.Event()
            await self._idle.wait()

    # --- writing --------------------------------------------------------------------------

    async def _send(self, data: bytes) -> None:
        if self.gone is not None:
            raise self.gone
        async with self._write_lock:
            try:
                await self._send_bytes(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                self.close("the other side stopped reading")
                raise PeerGone("the other side stopped reading") from None

    async def _send_quietly(self, data: bytes) -> None:
        try:
            await self._send(data)
        except PeerGone:
            pass

    async def notify(self, method: str, params: Any) -> None:
        await self._send(encode_notification(method, params))

    async def request(
        self,
        method: str,
        params: Any,
        on_answer: Callable[[], None] | None = None,
        *,
        withdraw: bool = False,
    ) -> msgspec.Raw:
        """Send a request and wait for its answer; cancel-safe (a late answer is dropped).

        `on_answer` runs in the reader the moment the answer is read, before any later
        message is dispatched. With `withdraw`, a request cancelled while unanswered is
        withdrawn from the other side with ACP's `$/cancel_request` (schema v1; a peer that
        does not know it ignores it), so its UI lets go of it.

        Raises:
            PeerRpcError: the answer is a JSON-RPC error.
            PeerGone: the other side went away first.
        """
        request_id = next(self._ids)
        done = trio.Event()
        box: list[Response] = []
        self._pending[request_id] = (on_answer, done, box)
        sent = False
        try:
            await self._send(encode_request(request_id, method, params))
            sent = True
            await done.wait()
        finally:
            del self._pending[request_id]
            if withdraw and sent and not box and self.gone is None:
                with trio.CancelScope(shield=True, deadline=trio.current_time() + WITHDRAW_S):
                    await self._send_quietly(
                        encode_notification(CANCEL_REQUEST, {"requestId": request_id})
                    )
        if not box:
            raise self.gone or PeerGone("the other side is gone")
        response = box[0]
        if response.error is not None:
            err = response.error
            raise PeerRpcError(method, err.code, err.message, err.data)
        return response.result
