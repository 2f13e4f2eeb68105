"""`RpcPeer.wind_down`: at the end of the input every request read is answered exactly once,
a slow one after the grace with the error it is given (the other side may still read)."""

from __future__ import annotations

from typing import Any

import msgspec
import trio
import trio.testing

from hostd_acp.jsonrpc import INTERNAL_ERROR
from hostd_acp.rpc_peer import RpcPeer


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
