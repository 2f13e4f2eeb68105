"""`hostd web` gateway against the real daemon: token, Host, Origin, and the frame bridge.

The gateway runs in-process (`serve_gateway`) so the tests can kill the daemon under it; the
daemon is the real subprocess. HTTP requests are raw HTTP/1.1 over trio sockets (we want to
see exact statuses and headers), WebSockets go through trio-websocket.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio

from hostd.shell.paths import Paths
from hostd.web.bridge import CLOSE_DAEMON_GONE, CLOSE_DAEMON_UNREACHABLE, CLOSE_UNSUPPORTED
from hostd.web.gateway import Gateway, serve_gateway
from hostd.web.security import Guard
from hostd_protocol.common import PROTOCOL_VERSION
from tests.e2e import daemon_proc
from tests.web.ws_client import Closed, connect

pytestmark = pytest.mark.e2e


async def http_get(port: int, target: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    """One raw HTTP/1.1 GET; returns status, lower-cased headers, body."""
    hdrs = {"Host": f"127.0.0.1:{port}", "Connection": "close", **(headers or {})}
    request = f"GET {target} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in hdrs.items()) + "\r\n"
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(request.encode())
        data = b""
        while b"\r\n\r\n" not in data:
            data += await stream.receive_some(65536)
        head, _, body = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        parsed = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            parsed[name.strip().lower()] = value.strip()
        # Every response of the gateway has a Content-Length (no chunked encoding to parse);
        # a 101 has no body.
        while len(body) < int(parsed.get("content-length", "0")):
            body += await stream.receive_some(65536)
    return status, parsed, body


@pytest.fixture
async def gateway(home: Path, nursery: trio.Nursery) -> AsyncIterator[tuple[Gateway, daemon_proc.DaemonProcess]]:
    daemon = await daemon_proc.start(home)
    static = home / "static"
    static.mkdir()
    (static / "index.html").write_text("<!doctype html><title>hostd</title>")
    gw: Gateway = await nursery.start(
        lambda task_status: serve_gateway(
            Paths.under(home), token_file=home / "run" / "web-url", static_dir=static,
            task_status=task_status,
        )
    )
    try:
        yield gw, daemon
    finally:
        with trio.CancelScope(shield=True):
            await daemon.terminate()
        nursery.cancel_scope.cancel()


def ws_target(gw: Gateway) -> str:
    return f"/ws?token={gw.token}"


async def test_http_needs_the_token(gateway: tuple[Gateway, object]) -> None:
    gw, _ = gateway
    with trio.fail_after(10):
        status, headers, body = await http_get(gw.port, "/")
        assert status == 401
        assert body == b"hostd web: a token is required: open the URL that `hostd web` printed\n"
        assert "access-control-allow-origin" not in headers
        status, _, body = await http_get(gw.port, "/?token=" + "x" * len(gw.token))
        assert (status, body) == (401, b"hostd web: wrong token: open the URL that `hostd web` printed\n")
        # The token moves into an HttpOnly cookie and out of the address bar.
        status, headers, _ = await http_get(gw.port, f"/?token={gw.token}")
        assert status == 303
        assert headers["location"] == "/"
        cookie = headers["set-cookie"]
        assert cookie == f"hostd_web_{gw.port}={gw.token}; Path=/; HttpOnly; SameSite=Strict"
        status, headers, body = await http_get(gw.port, "/", {"Cookie": cookie.split(";")[0]})
        assert (status, body) == (200, b"<!doctype html><title>hostd</title>")
        assert headers["x-frame-options"] == "DENY"
        assert headers["referrer-policy"] == "no-referrer"
        assert "access-control-allow-origin" not in headers


async def test_foreign_host_header_is_refused(gateway: tuple[Gateway, object]) -> None:
    gw, _ = gateway
    with trio.fail_after(10):
        status, _, body = await http_get(gw.port, f"/?token={gw.token}", {"Host": f"evil.example:{gw.port}"})
    assert status == 403
    assert body.startswith(b"hostd web: unexpected Host header")


async def test_token_file_is_private_and_removed(home: Path, gateway: tuple[Gateway, object]) -> None:
    gw, _ = gateway
    path = home / "run" / "web-url"
    assert path.read_text() == gw.url + "\n"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


async def test_a_gateway_that_exits_leaves_a_newer_ones_url_file(home: Path) -> None:
    # Found from outside: two `hostd web` on one home; the first one stopped and removed the
    # URL file the second (still running) had written, so `web-url` named no gateway.
    static = home / "static"
    static.mkdir()
    (static / "index.html").write_text("<!doctype html><title>hostd</title>")
    path = home / "run" / "web-url"
    with trio.fail_after(20):
        async with trio.open_nursery() as outer:
            second: Gateway | None = None
            async with trio.open_nursery() as inner:
                await inner.start(
                    lambda task_status: serve_gateway(
                        Paths.under(home), token_file=path, static_dir=static,
                        task_status=task_status,
                    )
                )
                second = await outer.start(
                    lambda task_status: serve_gateway(
                        Paths.under(home), token_file=path, static_dir=static,
                        task_status=task_status,
                    )
                )
                inner.cancel_scope.cancel()  # the first gateway exits
            assert second is not None
            assert path.read_text() == second.url + "\n"
            outer.cancel_scope.cancel()
    assert not path.exists()  # the last one out removes its own file


UPGRADE = {
    "Upgrade": "websocket",
    "Connection": "Upgrade",
    "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
    "Sec-WebSocket-Version": "13",
}


async def test_websocket_refusals(gateway: tuple[Gateway, object]) -> None:
    gw, _ = gateway
    with trio.fail_after(10):
        status, _, body = await http_get(gw.port, "/ws", UPGRADE)
        assert (status, body) == (401, b"hostd web: a token is required: open the URL that `hostd web` printed\n")
        status, _, body = await http_get(
            gw.port, f"/ws?token={gw.token}", {**UPGRADE, "Origin": "http://evil.example"}
        )
        assert (status, body) == (403, b"hostd web: WebSocket from another origin refused: 'http://evil.example'\n")


async def test_websocket_bridges_json_frames(gateway: tuple[Gateway, object]) -> None:
    gw, _ = gateway
    with trio.fail_after(20):
        async with connect(gw.port, ws_target(gw), [("Origin", gw.base_url)]) as ws:
            await ws.send(json.dumps({"type": "hello", "protocol_version": [1, 0], "client": "test"}))
            welcome = json.loads(await ws.receive())
            assert welcome["type"] == "welcome"
            assert welcome["protocol_version"] == list(PROTOCOL_VERSION)
            await ws.send(json.dumps({"type": "create-topic", "id": 1, "title": "t", "driver": "scripted"}))
            reply = json.loads(await ws.receive())
            assert reply["type"] == "reply" and reply["id"] == 1
            assert reply["result"]["topic"]["title"] == "t"
            # Binary would switch the daemon to msgpack: refused, the socket closed with a reason.
            # (A text message that is not a JSON object is refused the same way: see below.)
            await ws.send(b"\x81\xa4type")
            with pytest.raises(Closed) as closed:
                await ws.receive()
            assert closed.value.code == CLOSE_UNSUPPORTED
            assert closed.value.reason == "binary messages are not accepted: send JSON text"


async def test_daemon_gone_closes_the_websocket_with_a_reason(
    gateway: tuple[Gateway, daemon_proc.DaemonProcess],
) -> None:
    gw, daemon = gateway
    with trio.fail_after(20):
        async with connect(gw.port, ws_target(gw)) as ws:
            await ws.send(json.dumps({"type": "hello", "protocol_version": [1, 0]}))
            assert json.loads(await ws.receive())["type"] == "welcome"
            await daemon.kill9()
            with pytest.raises(Closed) as closed:
                await ws.receive()
            assert closed.value.code == CLOSE_DAEMON_GONE
            assert closed.value.reason == "the daemon closed the connection"
        # A new WebSocket while nothing serves the socket: closed at once, saying why.
        async with connect(gw.port, ws_target(gw)) as ws:
            with pytest.raises(Closed) as closed:
                await ws.receive()
            assert closed.value.code == CLOSE_DAEMON_UNREACHABLE
            assert closed.value.reason.startswith("hostd is not running")


def test_guard_checks_are_exact() -> None:
    guard = Guard("secret", 8123)
    ok_headers = {"host": "127.0.0.1:8123", "cookie": "hostd_web_8123=secret"}
    assert guard.check("http", ok_headers, "").allowed
    assert guard.check("http", {"host": "localhost:8123"}, "token=secret").token_in_query
    assert guard.check("http", {**ok_headers, "host": "127.0.0.1:8124"}, "").status == 403
    assert guard.check("http", {"host": "127.0.0.1:8123", "cookie": "hostd_web_9999=secret"}, "").status == 401
    assert guard.check("websocket", {**ok_headers, "origin": "http://127.0.0.1:8123"}, "").allowed
    assert guard.check("websocket", {**ok_headers, "origin": "null"}, "").status == 403
    assert guard.check("websocket", {**ok_headers, "origin": "http://127.0.0.1:8124"}, "").status == 403
    assert guard.check("http", {"host": "127.0.0.1:8123", "cookie": "bad\x00cookie"}, "").status == 401


def test_on_port_80_the_host_and_origin_have_no_port() -> None:
    # Found from outside: `hostd web --port 80` refused every browser request with 403, as
    # clients leave the default port out of Host and Origin.
    guard = Guard("secret", 80)
    assert guard.check("http", {"host": "127.0.0.1"}, "token=secret").token_in_query
    assert guard.check("http", {"host": "localhost:80"}, "token=secret").token_in_query
    ws = {"host": "localhost", "origin": "http://localhost", "cookie": "hostd_web_80=secret"}
    assert guard.check("websocket", ws, "").allowed
    assert Guard("secret", 8123).check("http", {"host": "127.0.0.1"}, "token=secret").status == 403


async def test_a_text_message_that_is_not_a_json_object_is_refused(gateway: tuple[Gateway, object]) -> None:
    gw, _ = gateway
    with trio.fail_after(20):
        async with connect(gw.port, ws_target(gw)) as ws:
            await ws.send("\x93not json")  # would make the daemon pick msgpack for the connection
            with pytest.raises(Closed) as closed:
                await ws.receive()
            assert (closed.value.code, closed.value.reason) == (
                CLOSE_UNSUPPORTED, "each message must be one JSON object"
            )
