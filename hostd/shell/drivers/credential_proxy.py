"""The credential proxy: a confined driver's vendor API calls get their key on the host side.

A tool a confined driver runs shares the driver's uid and pid namespace, so whatever the
driver or its vendor CLI holds (environment, files, memory) the tool can read too. The only
way to keep an API key from tools is to keep it out of the sandbox. For a driver whose spec
offers it (`DriverSpec.credential_proxy`, e.g. Claude Code with an API key), the sandbox gets
a placeholder key and a base URL that points at this proxy; the proxy checks the placeholder,
replaces it with the real key and forwards the request to the configured upstream (HTTPS when
the upstream's base URL is https), relaying the answer unbuffered (server-sent events).

Rules this module guards:

- Reachable only from the session's own sandbox: it listens on a Unix socket in the
  session's private bridge folder (0700, in the daemon's runtime dir, bound into that sandbox
  only), never on a TCP port of the host. In the sandbox the loopback forwarder
  (`loopback_inside`) listens on the sandbox's own `127.0.0.1:<port>` and relays to it.
- Only requests to the configured upstream get the key: the proxy never forwards anywhere
  else. The sandbox's request path is appended to the upstream's base URL; a request in
  proxy form (`GET http://other.host/...`), `CONNECT`, or a path with `..` segments is
  refused (400) and goes nowhere. A request that does
  not carry the session's placeholder is refused (401) and goes nowhere.
- Bounded: request headers (64 KiB, within `IDLE_TIMEOUT`), request bodies (`MAX_BODY`, the
  Messages API's own limit), connections served at once (`MAX_CONNECTIONS`; more wait).
- The key is never logged, never put in an error text; errors name the upstream's host only.

Libraries: h11 (sans-IO HTTP/1.1, the parser under httpcore and Hypercorn, already locked)
for the sandbox side, where we need a tiny server over a Unix socket stream that trio gives
us; httpx2 (already the OpenAI driver's client, runs under trio through httpcore2) for the
upstream, for TLS verification, connection reuse and streaming (`aiter_raw`: bytes as they
arrive, still encoded, so length and encoding headers stay true).
"""

from __future__ import annotations

import hmac
import json
import logging
import secrets
import ssl
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

import h11
import trio

if TYPE_CHECKING:
    import httpx2

log = logging.getLogger(__name__)

#: The socket's name in the bridge folder (`<folder>/credential.sock`).
SOCKET_NAME = "credential"
#: The Messages API refuses bodies over 32 MB; nothing bigger is a real request.
MAX_BODY = 32 * 1024 * 1024
MAX_HEADERS = 64 * 1024
MAX_CONNECTIONS = 32
#: A kept-alive connection with no new request head within this long is closed (clients
#: keep idle connections seconds, not minutes; a slot should not be held by a silent one).
IDLE_TIMEOUT = 60.0
#: The upstream may think for a long time between events of a stream (the CLI's own default
#: timeout is 10 minutes).
READ_TIMEOUT = 600.0
CONNECT_TIMEOUT = 30.0
RECEIVE = 65536

#: Never forwarded: hop-by-hop headers (RFC 9110 7.6.1), what httpx2 sets itself, and every
#: credential header the sandbox could have sent (the real one is added instead).
_DROP_REQUEST = frozenset({
    "connection", "keep-alive", "proxy-connection", "proxy-authenticate",
    "proxy-authorization", "te", "trailer", "transfer-encoding", "upgrade", "host",
    "content-length", "authorization", "x-api-key", "cookie",
})
_DROP_RESPONSE = frozenset({
    "connection", "keep-alive", "proxy-connection", "proxy-authenticate", "te", "trailer",
    "transfer-encoding", "upgrade",
})


def placeholder() -> str:
    """A fresh per-session stand-in key: what the sandbox holds instead of the real one."""
    return "hostd-proxy-" + secrets.token_urlsafe(32)


@dataclass(frozen=True)
class ProxyTarget:
    """Where the key goes and how: the upstream's base URL, the header, the real value."""

    upstream: str
    header: str
    value: str = field(repr=False)
    placeholder: str = field(default_factory=placeholder, repr=False)

    @property
    def host(self) -> str:
        return urlsplit(self.upstream).netloc


def upstream_url(target: ProxyTarget, request_target: str) -> str | None:
    """The upstream URL for a request target from the sandbox (its path appended to the
    upstream's base path), or None when the proxy does not forward it (not origin form, or
    `..` segments that would climb out of the base path)."""
    if not request_target.startswith("/") or request_target.startswith("//"):
        return None
    base = urlsplit(target.upstream)
    prefix = base.path.rstrip("/")
    path = request_target.split("?", 1)[0]
    if any(unquote(segment) == ".." for segment in path.split("/")):
        return None
    return f"{base.scheme}://{base.netloc}{prefix}{request_target}"


def forward_headers(
    headers: Iterable[tuple[bytes, bytes]], target: ProxyTarget
) -> list[tuple[str, str]]:
    """The sandbox's request headers as sent upstream: hop-by-hop and credential headers out,
    the real credential in."""
    out = [
        (name.decode("latin-1"), value.decode("latin-1"))
        for name, value in headers
        if name.lower().decode("latin-1") not in _DROP_REQUEST
    ]
    out.append((target.header, target.value))
    return out


def _sent_key(headers: Iterable[tuple[bytes, bytes]], target: ProxyTarget) -> bool:
    """Whether the request carries the session's placeholder (x-api-key or a bearer)."""
    want = target.placeholder.encode()
    for name, value in headers:
        name = name.lower()
        if name == b"authorization" and value.lower().startswith(b"bearer "):
            value = value[7:].strip()
        elif name != b"x-api-key":
            continue
        if hmac.compare_digest(value, want):
            return True
    return False


def _error_body(kind: str, message: str) -> bytes:
    # The Messages API's error shape, so the CLI shows the message as it would the vendor's.
    return json.dumps({"type": "error", "error": {"type": kind, "message": message}}).encode()


class CredentialProxy:
    """The proxy of one session; `serve` it on a socket path."""

    def __init__(self, target: ProxyTarget, *, verify: ssl.SSLContext | bool = True) -> None:
        """`verify`: how the upstream's TLS certificate is checked (default: the system's
        and certifi's roots, as httpx2 does; tests pass their own CA)."""
        self.target = target
        self._verify = verify
        self._slots = trio.Semaphore(MAX_CONNECTIONS)
        self._client: httpx2.AsyncClient | None = None

    def _http(self) -> httpx2.AsyncClient:
        if self._client is None:
            import httpx2  # only a session that uses the proxy pays for the import

            self._client = httpx2.AsyncClient(
                timeout=httpx2.Timeout(READ_TIMEOUT, connect=CONNECT_TIMEOUT),
                follow_redirects=False,
                verify=self._verify,
                # The daemon's own proxy variables are not the session's business.
                trust_env=False,
            )
        return self._client

    async def serve(
        self, path: str, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Listen on the Unix socket `path` until cancelled."""
        sock = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_STREAM)
        try:
            await sock.bind(path)
            sock.listen(MAX_CONNECTIONS)
        except BaseException:
            sock.close()
            raise
        listener = trio.SocketListener(sock)
        try:
            async with trio.open_nursery() as nursery:
                task_status.started()
                while True:
                    stream = await listener.accept()
                    nursery.start_soon(self._connection, stream)
        finally:
            with trio.CancelScope(shield=True):
                await listener.aclose()
                if self._client is not None:
                    await self._client.aclose()

    async def _connection(self, stream: trio.SocketStream) -> None:
        # At most MAX_CONNECTIONS served at once; more wait for a slot.
        async with stream:
            async with self._slots:
                conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEADERS)
                try:
                    while await self._exchange(stream, conn):
                        conn.start_next_cycle()
                except (h11.RemoteProtocolError, h11.LocalProtocolError) as exc:
                    log.debug("credential proxy: bad HTTP from the sandbox: %s", exc)
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    pass
                except Exception as exc:  # one connection never ends the proxy
                    # The type only: a message could quote what the request carried.
                    log.warning("credential proxy: connection ended by %s", type(exc).__name__)

    async def _exchange(self, stream: trio.SocketStream, conn: h11.Connection) -> bool:
        """One request and its answer; whether the connection can take another."""
        request: object = None
        with trio.move_on_after(IDLE_TIMEOUT):
            request = await _next(stream, conn)
        if not isinstance(request, h11.Request):
            return False
        method = request.method.decode("ascii", "replace")
        target = request.target.decode("latin-1")
        url = upstream_url(self.target, target) if method != "CONNECT" else None
        if url is None:
            await _send_simple(stream, conn, 400, "invalid_request_error",
                               f"hostd credential proxy: forwards only to {self.target.host}")
            return False
        if not _sent_key(request.headers, self.target):
            await _send_simple(stream, conn, 401, "authentication_error",
                               "hostd credential proxy: this session's key is missing")
            return False
        length = _content_length(request.headers)
        if length is not None and length > MAX_BODY:
            await _send_simple(stream, conn, 413, "request_too_large",
                               f"hostd credential proxy: body over {MAX_BODY} bytes")
            return False
        body = bytearray()
        while True:
            event = await _next(stream, conn)
            if isinstance(event, h11.Data):
                body += event.data
                if len(body) > MAX_BODY:
                    await _send_simple(stream, conn, 413, "request_too_large",
                                       f"hostd credential proxy: body over {MAX_BODY} bytes")
                    return False
            elif isinstance(event, h11.EndOfMessage):
                break
            else:
                return False
        await self._forward(stream, conn, method, url, request.headers, bytes(body))
        return conn.our_state is h11.DONE and conn.their_state is h11.DONE

    async def _forward(
        self,
        stream: trio.SocketStream,
        conn: h11.Connection,
        method: str,
        url: str,
        headers: Iterable[tuple[bytes, bytes]],
        body: bytes,
    ) -> None:
        import httpx2

        client = self._http()
        try:
            upstream = client.build_request(
                method, url, headers=forward_headers(headers, self.target), content=body
            )
        except (httpx2.InvalidURL, ValueError):
            await _send_simple(stream, conn, 400, "invalid_request_error",
                               "hostd credential proxy: not a valid request target")
            return
        try:
            response = await client.send(upstream, stream=True)
        except httpx2.HTTPError as exc:
            # The exception's text names the URL at most, never a header.
            await _send_simple(stream, conn, 502, "api_error",
                               f"hostd credential proxy: cannot reach {self.target.host}: "
                               f"{type(exc).__name__}")
            return
        try:
            await _send(stream, conn, h11.Response(
                status_code=response.status_code,
                headers=[(k, v) for k, v in response.headers.multi_items()
                         if k.lower() not in _DROP_RESPONSE],
            ))
            try:
                async for chunk in response.aiter_raw():
                    await _send(stream, conn, h11.Data(data=chunk))
            except httpx2.HTTPError:
                # Cut mid-answer: the sandbox sees the connection end, as it would upstream's.
                return
            await _send(stream, conn, h11.EndOfMessage())
        finally:
            with trio.CancelScope(shield=True):
                await response.aclose()


def _content_length(headers: Iterable[tuple[bytes, bytes]]) -> int | None:
    for name, value in headers:
        if name.lower() == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def _next(stream: trio.SocketStream, conn: h11.Connection) -> object:
    while True:
        event = conn.next_event()
        if event is not h11.NEED_DATA:
            return event
        data = await stream.receive_some(RECEIVE)
        conn.receive_data(data)
        if not data and conn.their_state is not h11.DONE:
            return h11.ConnectionClosed()


async def _send(stream: trio.SocketStream, conn: h11.Connection, event: h11.Event) -> None:
    data = conn.send(event)
    if data:
        await stream.send_all(data)


async def _send_simple(
    stream: trio.SocketStream, conn: h11.Connection, status: int, kind: str, message: str
) -> None:
    """A short error answer, after which the connection closes."""
    body = _error_body(kind, message)
    try:
        await _send(stream, conn, h11.Response(status_code=status, headers=[
            ("content-type", "application/json"), ("content-length", str(len(body))),
            ("connection", "close"),
        ]))
        await _send(stream, conn, h11.Data(data=body))
        await _send(stream, conn, h11.EndOfMessage())
    except h11.LocalProtocolError:
        pass


__all__ = ["SOCKET_NAME", "CredentialProxy", "ProxyTarget", "forward_headers", "upstream_url"]
