"""The hostd client library: `hostd.client` is the import path UIs use (it stays stable).

- `hostd.client.async_client`: `open_client(...)` -> `Client` (trio), `Subscription`.
- `hostd.client.sync_client`: `SyncClient`, the blocking face of the same client (each method
  is the async one's twin: same signature, docstring and return type).
- `hostd.client.sync_wire`: one blocking request at a time without trio (one-shot commands).

Names are loaded on first use (PEP 562), so `import hostd.client.sync_wire` does not import
trio: the one-shot CLI commands stay light.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hostd.client.async_client import Client, Subscription, open_client
    from hostd.client.sync_client import SyncClient
    from hostd.client.sync_wire import DaemonNotRunning, start_daemon
    from hostd.client.topic_watch import TopicWatch

_WHERE = {
    "Client": "hostd.client.async_client",
    "Subscription": "hostd.client.async_client",
    "TopicWatch": "hostd.client.topic_watch",
    "SyncClient": "hostd.client.sync_client",
    "open_client": "hostd.client.async_client",
    "DaemonNotRunning": "hostd.client.sync_wire",
    "start_daemon": "hostd.client.sync_wire",
}


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'hostd.client' has no attribute {name!r}")
    return getattr(importlib.import_module(where), name)


__all__ = [
    "Client",
    "DaemonNotRunning",
    "Subscription",
    "SyncClient",
    "TopicWatch",
    "open_client",
    "start_daemon",
]
