"""The credential proxy on its own: a real Unix socket, a real HTTP client (httpx2), the fake
Messages API on 127.0.0.1 as the upstream (plain HTTP, and HTTPS with a certificate made
here by openssl)."""

from __future__ import annotations

import json
import logging
import shutil
import ssl
import subprocess
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx2
import pytest
import trio

from hostd.shell.drivers import credential_proxy
from hostd.shell.drivers.credential_proxy import CredentialProxy, ProxyTarget, upstream_url
from tests.fakes.anthropic_api import FakeAnthropicAPI, Hang, Rule, text

REAL = "sk-ant-real-" + "0123456789abcdef" * 2
TIMEOUT = 30


@pytest.fixture
def folder() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="hdcp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@asynccontextmanager
async def running(
    target: ProxyTarget, folder: Path, verify: ssl.SSLContext | bool = True
) -> AsyncIterator[httpx2.AsyncClient]:
    """The proxy served on `folder/credential.sock`, and a client speaking to it."""
    path = str(folder / "credential.sock")
    async with trio.open_nursery() as nursery:
        await nursery.start(lambda task_status: CredentialProxy(target, verify=verify).serve(
            path, task_status=task_status))
        transport = httpx2.AsyncHTTPTransport(uds=path)
        async with httpx2.AsyncClient(
            transport=transport, base_url="http://127.0.0.1:47011", timeout=TIMEOUT
        ) as client:
            yield client
        nursery.cancel_scope.cancel()


async def _raw(folder: Path, request: str) -> tuple[str, bytes]:
    """Send one raw request to the proxy's socket; its status line and body."""
    stream = await trio.open_unix_socket(str(folder / "credential.sock"))
    async with stream:
        await stream.send_all(request.encode())
        data = b""
        while chunk := await stream.receive_some(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return head.split(b"\r\n", 1)[0].decode(), body


def _messages(key: str, stream: bool = False) -> dict[str, object]:
    return {
        "headers": {"x-api-key": key, "anthropic-version": "2023-06-01"},
        "json": {"model": "m", "max_tokens": 10, "stream": stream,
                 "messages": [{"role": "user", "content": "hi"}]},
    }


async def test_the_upstream_gets_the_real_key_and_the_answer_streams_unbuffered(
    folder: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    hang = Hang(text_before="first", text_after=" last")
    with FakeAnthropicAPI([Rule(lambda req: True, hang, times=1)]) as api:
        target = ProxyTarget(api.base_url, "x-api-key", REAL)
        with trio.fail_after(TIMEOUT):
            async with running(target, folder) as client:
                async with client.stream(
                    "POST", "/v1/messages?beta=true", **_messages(target.placeholder, True)
                ) as response:
                    assert response.status_code == 200
                    assert response.headers["content-type"].startswith("text/event-stream")
                    got = b""
                    chunks = response.aiter_raw()
                    # The upstream is hanging after its first text: what it sent so far must
                    # already be here (nothing waits for the end of the answer).
                    while b"first" not in got:
                        got += await chunks.__anext__()
                    assert b"last" not in got
                    hang.release()
                    async for chunk in chunks:
                        got += chunk
                assert b"message_stop" in got
                # A second request on the same connection (keep-alive).
                count = await client.post(
                    "/v1/messages/count_tokens", **_messages(target.placeholder)
                )
                assert count.status_code == 200, count.text
        seen = api.requests
    assert [r.api_key for r in seen] == [REAL, REAL]
    assert seen[0].query == "beta=true"
    assert REAL not in caplog.text and target.placeholder not in caplog.text


@pytest.mark.parametrize(
    ("how", "status"),
    [
        ("no key", 401),
        ("another key", 401),
        ("proxy form to another server", 400),
        ("dot segments out of the base path", 400),
        ("body too big", 413),
    ],
)
async def test_what_is_not_for_the_upstream_goes_nowhere(
    folder: Path, how: str, status: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(credential_proxy, "MAX_BODY", 1000)
    with FakeAnthropicAPI([]) as other, FakeAnthropicAPI([]) as api:
        target = ProxyTarget(api.base_url + "/api", "x-api-key", REAL)
        with trio.fail_after(TIMEOUT):
            async with running(target, folder) as client:
                url, kwargs = "/v1/messages", _messages(target.placeholder)
                if how == "no key":
                    kwargs["headers"] = {}
                elif how == "another key":
                    kwargs = _messages(target.placeholder[:-1] + "x")
                elif how == "proxy form to another server":
                    # What a client configured with this proxy as its HTTP proxy sends.
                    status_line, body = await _raw(folder, (
                        f"POST {other.base_url}/v1/messages HTTP/1.1\r\nHost: x\r\n"
                        f"x-api-key: {target.placeholder}\r\ncontent-length: 2\r\n\r\n{{}}"
                    ))
                    response = httpx2.Response(int(status_line.split()[1]), content=body)
                elif how == "dot segments out of the base path":
                    status_line, body = await _raw(folder, (
                        "POST /../v1/messages HTTP/1.1\r\nHost: x\r\n"
                        f"x-api-key: {target.placeholder}\r\ncontent-length: 2\r\n\r\n{{}}"
                    ))
                    response = httpx2.Response(int(status_line.split()[1]), content=body)
                elif how == "body too big":
                    kwargs["json"] = {"pad": "x" * 2000}
                if how not in ("proxy form to another server", "dot segments out of the base path"):
                    response = await client.post(url, **kwargs)
        assert response.status_code == status, response.text
        assert response.json()["type"] == "error"
        assert api.requests == [] and other.requests == []


def test_only_origin_form_targets_are_forwarded_under_the_base_path() -> None:
    target = ProxyTarget("https://api.example.com/base/", "x-api-key", REAL)
    assert upstream_url(target, "/v1/messages?beta=true") == (
        "https://api.example.com/base/v1/messages?beta=true")
    for bad in ("http://evil.example/v1", "//evil.example/v1", "api.example.com:443",
                "/../v1", "/v1/../../x", "/%2e%2e/v1", "*"):
        assert upstream_url(target, bad) is None, bad
    assert REAL not in repr(target)


@pytest.fixture
def tls(folder: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A self-signed certificate for 127.0.0.1: (server context, client context trusting it)."""
    if not shutil.which("openssl"):
        pytest.skip("openssl is not installed")
    key, cert = folder / "key.pem", folder / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(cert, key)
    client = ssl.create_default_context(cafile=str(cert))
    return server, client


async def test_an_https_upstream_is_reached_over_verified_tls(
    folder: Path, tls: tuple[ssl.SSLContext, ssl.SSLContext]
) -> None:
    server, client_ctx = tls
    with FakeAnthropicAPI([Rule(lambda req: True, text("hello"))], tls=server) as api:
        assert api.base_url.startswith("https://")
        target = ProxyTarget(api.base_url, "x-api-key", REAL)
        with trio.fail_after(TIMEOUT):
            async with running(target, folder, verify=client_ctx) as client:
                response = await client.post("/v1/messages", **_messages(target.placeholder))
                assert response.status_code == 200, response.text
            # Not trusted: the proxy refuses the upstream rather than send the key to it.
            untrusted = folder / "untrusted"
            untrusted.mkdir()
            async with running(target, untrusted) as client:
                refused = await client.post("/v1/messages", **_messages(target.placeholder))
        assert [r.api_key for r in api.requests] == [REAL]
    assert refused.status_code == 502
    assert REAL not in refused.text and "127.0.0.1" in json.loads(refused.text)["error"]["message"]


async def test_garbage_from_the_sandbox_ends_only_its_own_connection(folder: Path) -> None:
    with FakeAnthropicAPI([Rule(lambda req: True, text("hello"))]) as api:
        target = ProxyTarget(api.base_url, "x-api-key", REAL)
        with trio.fail_after(TIMEOUT):
            async with running(target, folder) as client:
                for junk in ("\x00\x01 not http\r\n\r\n", "GET / HTTP/1.1\r\nbad header\r\n\r\n",
                             "POST /v1/messages HTTP/1.1\r\nHost: x\r\n" + "a: b\r\n" * 20000):
                    status_line, _ = await _raw(folder, junk)
                    assert not status_line.startswith("HTTP/1.1 2"), status_line
                response = await client.post("/v1/messages", **_messages(target.placeholder))
                assert response.status_code == 200, response.text
        assert [r.api_key for r in api.requests] == [REAL]
