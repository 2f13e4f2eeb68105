"""`RpcPeer`: every request read is answered exactly once, also at the end of the input
(`wind_down`: a slow one after the grace with the error it is given, the other side may
still read) and when the other side withdraws it (`$/cancel_request`)."""

from __future__ import annotations

from typing import Any

import msgspec
import trio
import trio.testing

from hostd_acp.jsonrpc import INTERNAL_ERROR, REQUEST_CANCELLED
from hostd_acp.rpc_peer import RpcPeer, on_withdraw


async def test_requests_in_flight_at_eof_are_answered_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    sent: list[dict[str, Any]] = []

    async def send(data: bytes) -> None:
        sent.extend(msgspec.json.decode(line) for line in data.splitlines() if line)

    async def on_request(method: str, raw: msgspec.Raw) -> Any:
        if method == "slow":
            await trio.sleep_forever()
        await trio.sleep(1)  # done within the grace
        return {"ok": method}

    async def on_notification(method: str, raw: msgspec.Raw) -> None:
        return None

    lines = [
        b'{"jsonrpc":"2.0","id":1,"method":"slow","params":{}}\n',
        b'{"jsonrpc":"2.0","id":2,"method":"quick","params":{}}\n',
        b'{"jsonrpc":"2.0","id":2,"method":"quick","params":{}}\n',  # a reused id
        b"",
    ]

    async def receive() -> bytes:
        return lines.pop(0)

    peer = RpcPeer(send, on_request=on_request, on_notification=on_notification, max_line=4096)
    async with trio.open_nursery() as nursery:
        await peer.serve(receive, nursery)
        await peer.wind_down(5.0, "input ended")
    assert sorted((m["id"], m.get("result"), m.get("error")) for m in sent) == [
        (1, None, {"code": INTERNAL_ERROR, "message": "input ended"}),
        (2, {"ok": "quick"}, None),
        (2, {"ok": "quick"}, None),
    ]


async def test_a_withdrawn_request_is_answered_once_as_acp_says(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """`$/cancel_request`: a plain handler is cut short and answered -32800; one that said how
    it winds down (`on_withdraw`) answers with its own result; a withdrawal of an id nobody
    serves, or with bad params, changes nothing."""
    sent: list[dict[str, Any]] = []

    async def send(data: bytes) -> None:
        sent.extend(msgspec.json.decode(line) for line in data.splitlines() if line)

    async def on_request(method: str, raw: msgspec.Raw) -> Any:
        if method == "marker":
            stopped = trio.Event()
            on_withdraw(stopped.set)
            await stopped.wait()
            return {"stopReason": "cancelled"}
        if method == "slow":
            await trio.sleep_forever()
        await trio.sleep(1)
        return {"ok": method}

    async def on_notification(method: str, raw: msgspec.Raw) -> None:
        notified.append(method)

    notified: list[str] = []
    cancel = b'{"jsonrpc":"2.0","method":"$/cancel_request","params":%s}\n'
    lines = [
        b'{"jsonrpc":"2.0","id":1,"method":"slow","params":{}}\n',
        b'{"jsonrpc":"2.0","id":"m","method":"marker","params":{}}\n',
        b'{"jsonrpc":"2.0","id":3,"method":"quick","params":{}}\n',
        cancel % b'{"requestId":99}',
        cancel % b'{"requestId":true}',
        cancel % b"[]",
        cancel % b'{"requestId":1}',
        cancel % b'{"requestId":"m"}',
    ]

    async def receive() -> bytes:
        if not lines:
            await trio.sleep(10)  # the answers go out meanwhile
            return b""
        await trio.sleep(0.1)  # each handler is waiting when the next line comes
        return lines.pop(0)

    peer = RpcPeer(send, on_request=on_request, on_notification=on_notification, max_line=4096)
    async with trio.open_nursery() as nursery:
        await peer.serve(receive, nursery)
    assert notified == []  # a protocol notification: never the handler's business
    assert sorted((str(m["id"]), m.get("result"), m.get("error")) for m in sent) == [
        ("1", None, {"code": REQUEST_CANCELLED, "message": "request cancelled"}),
        ("3", {"ok": "quick"}, None),
        ("m", {"stopReason": "cancelled"}, None),
    ]
