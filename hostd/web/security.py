"""Who may talk to `hostd web`: the token, the Host and Origin checks, the response headers.

Rules this module guards (the gateway's whole threat model lives here):

- The gateway binds 127.0.0.1 only, but any local process and any web page the user visits
  can reach a loopback port. So every HTTP request and every WebSocket upgrade must carry the
  per-start random token (query `token=` or the cookie set after the first visit); tokens are
  compared in constant time (`hmac.compare_digest`). No token: 401, before any route runs.
- DNS rebinding: a hostile name that resolves to 127.0.0.1 would make the browser treat the
  gateway as that site's origin. Requests whose `Host` is not the loopback address we serve
  on are refused (403), token or not.
- Cross-site WebSockets: browsers do not apply CORS to WebSockets, and they send cookies with
  them. An upgrade whose `Origin` is not our own origin is refused (403 before accept). An
  upgrade with no `Origin` at all comes from a non-browser client that already holds the
  token: allowed, as Jupyter does.
- No CORS headers are ever sent; pages are not frameable; the token never leaves through a
  `Referer` (no-referrer) and is moved from the address bar into an HttpOnly cookie.

The checks are plain functions of the request's headers (sans-IO, unit-tested alone);
`TokenGate` is the thin ASGI middleware that applies them.
"""

from __future__ import annotations

import hmac
import os
import re
import secrets
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from dataclasses import dataclass
from http.cookies import CookieError, SimpleCookie
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: Bytes of randomness in a token (rendered as 43 URL-safe characters).
TOKEN_BYTES = 32


def new_token() -> str:
    """A fresh random token for one gateway start."""
    return secrets.token_urlsafe(TOKEN_BYTES)


def write_token_file(path: Path, url: str) -> None:
    """Write the gateway's URL (it holds the token), or the token alone, to `path`, mode 0600
    from creation on, so no other user can read it even for a moment. An existing file is
    replaced, not followed."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, (url + "\n").encode())
    finally:
        os.close(fd)
    os.replace(tmp, path)


def remove_token_file(path: Path, url: str) -> None:
    """Remove the gateway's URL file on its way out, only while it holds `url`: a gateway
    started later on the same home replaced it with its own URL, and still runs."""
    try:
        held = path.read_text().strip()
    except (FileNotFoundError, UnicodeDecodeError):
        return
    if held == url:
        path.unlink(missing_ok=True)


#: What a stored token must look like (as `new_token` makes them).
_TOKEN_SHAPE = re.compile(r"[A-Za-z0-9_-]{43,128}")


def port_token(path: Path, *, renew: bool = False) -> str:
    """The token of a gateway on a fixed port, kept in `path` (mode 0600) across restarts.

    The page's cookie holds the token, so a restart on the same port with a new token locked
    every open tab out until the user found the new URL. Keeping it is as safe as the running
    gateway's `web-url` file (same owner-only mode, same folder rules): anyone who can read it
    could read that file too. The file is used only when it is ours, owner-only and holds a
    token; otherwise (or with `renew`) a new one replaces it.
    """
    if not renew:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            fd = -1
        if fd >= 0:
            try:
                st = os.fstat(fd)
                text = os.read(fd, 256).decode("ascii", "replace").strip()
            finally:
                os.close(fd)
            if st.st_uid == os.getuid() and st.st_mode & 0o077 == 0 and _TOKEN_SHAPE.fullmatch(text):
                return text
    token = new_token()
    write_token_file(path, token)
    return token


def tokens_equal(given: str, expected: str) -> bool:
    """Constant-time comparison (no early exit that would leak how much of a guess matched)."""
    return hmac.compare_digest(given.encode(), expected.encode())


@dataclass(frozen=True)
class Verdict:
    """The outcome of checking one request: allowed, or refused with a status and a reason."""

    status: int
    reason: str = ""
    #: The request came with a valid `?token=`: move it into the cookie.
    token_in_query: bool = False

    @property
    def allowed(self) -> bool:
        return self.status == 200


ALLOWED = Verdict(200)


class Guard:
    """The checks for one gateway start (its token and the port it serves on)."""

    def __init__(self, token: str, port: int) -> None:
        self.token = token
        self.port = port

    @property
    def cookie_name(self) -> str:
        # Cookies are not isolated by port: two gateways on one machine must not overwrite
        # each other's cookie.
        return f"hostd_web_{self.port}"

    def origins(self) -> frozenset[str]:
        """The origins our own page is served from."""
        return frozenset(f"http://{host}" for host in self.hosts())

    def hosts(self) -> frozenset[str]:
        """The `Host` values of requests to us: on port 80, HTTP's default, clients leave the
        port out (browsers always do, in `Origin` too)."""
        hosts = {f"127.0.0.1:{self.port}", f"localhost:{self.port}"}
        if self.port == 80:
            hosts |= {"127.0.0.1", "localhost"}
        return frozenset(hosts)

    def check(self, kind: str, headers: dict[str, str], query: str) -> Verdict:
        """Check one request. `kind` is the ASGI scope type ("http" or "websocket");
        `headers` has lower-case names; `query` is the raw query string."""
        host = headers.get("host", "")
        if host not in self.hosts():
            return Verdict(403, f"unexpected Host header {host[:80]!r}")
        if kind == "websocket":
            origin = headers.get("origin")
            if origin is not None and origin not in self.origins():
                return Verdict(403, f"WebSocket from another origin refused: {origin[:80]!r}")
        given_query = _query_token(query)
        if given_query is not None and tokens_equal(given_query, self.token):
            return Verdict(200, token_in_query=True)
        given_cookie = _cookie_token(headers.get("cookie", ""), self.cookie_name)
        if given_cookie is not None and tokens_equal(given_cookie, self.token):
            return ALLOWED
        if given_query is None and given_cookie is None:
            return Verdict(401, "a token is required: open the URL that `hostd web` printed")
        return Verdict(401, "wrong token: open the URL that `hostd web` printed")

    def cookie_header(self) -> tuple[bytes, bytes]:
        # HttpOnly: scripts never see it; SameSite=Strict: no other site's request carries it.
        value = f"{self.cookie_name}={self.token}; Path=/; HttpOnly; SameSite=Strict"
        return (b"set-cookie", value.encode())


def _query_token(query: str) -> str | None:
    values = parse_qs(query, keep_blank_values=True).get("token")
    return values[0] if values else None


def _cookie_token(header: str, name: str) -> str | None:
    if not header:
        return None
    cookie: SimpleCookie = SimpleCookie()
    try:
        cookie.load(header)
    except CookieError:
        return None
    morsel = cookie.get(name)
    return morsel.value if morsel is not None else None


#: Sent with every HTTP response. `connect-src 'self'` covers same-origin WebSockets in
#: current browsers; nothing is loaded from anywhere else.
SECURITY_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (
        b"content-security-policy",
        b"default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; "
        b"connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"cache-control", b"no-store"),
)


def _headers_of(scope: Scope) -> dict[str, str]:
    raw: Iterable[tuple[bytes, bytes]] = scope.get("headers", ())
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in raw}


class TokenGate:
    """ASGI middleware: refuse what `Guard.check` refuses, before the app sees it.

    A valid `?token=` on a GET is answered with a redirect to `/` without the query, setting
    the cookie (the token leaves the address bar and the history)."""

    def __init__(self, app: ASGIApp, guard: Guard) -> None:
        self.app = app
        self.guard = guard

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind not in ("http", "websocket"):
            await self.app(scope, receive, send)  # lifespan
            return
        verdict = self.guard.check(kind, _headers_of(scope), scope.get("query_string", b"").decode("latin-1"))
        if not verdict.allowed:
            if kind == "websocket":
                await _refuse_upgrade(scope, send, verdict)
            else:
                await _plain(send, verdict.status, verdict.reason)
            return
        if kind == "http" and verdict.token_in_query and scope.get("method") == "GET":
            await _redirect_with_cookie(send, self.guard.cookie_header())
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", ()))
                headers.extend(SECURITY_HEADERS)
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers if kind == "http" else send)


async def _refuse_upgrade(scope: Scope, send: Send, verdict: Verdict) -> None:
    if "websocket.http.response" in scope.get("extensions", {}):
        # The ASGI extension lets the refusal be a real HTTP status (401 or 403) with a reason.
        body = f"hostd web: {verdict.reason}\n".encode()
        headers = [
            (b"content-type", b"text/plain; charset=utf-8"),
            (b"content-length", str(len(body)).encode()),
            *SECURITY_HEADERS,
        ]
        await send({"type": "websocket.http.response.start", "status": verdict.status,
                    "headers": headers})
        await send({"type": "websocket.http.response.body", "body": body})
    else:
        # A close before accept: the server answers the upgrade with 403.
        await send({"type": "websocket.close", "code": 1008, "reason": verdict.reason})


async def _plain(send: Send, status: int, text: str) -> None:
    body = f"hostd web: {text}\n".encode()
    headers = [
        (b"content-type", b"text/plain; charset=utf-8"),
        (b"content-length", str(len(body)).encode()),
        *SECURITY_HEADERS,
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _redirect_with_cookie(send: Send, cookie: tuple[bytes, bytes]) -> None:
    # Always to the page itself, never to anything taken from the request: no open redirect.
    headers = [(b"location", b"/"), (b"content-length", b"0"), cookie, *SECURITY_HEADERS]
    await send({"type": "http.response.start", "status": 303, "headers": headers})
    await send({"type": "http.response.body", "body": b""})
