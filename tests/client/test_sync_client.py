"""The sync client is the async client's blocking twin, method by method (no drift)."""

from __future__ import annotations

import inspect
from typing import get_type_hints

import pytest
import trio

import hostd.client
from hostd.client import Client, SyncClient
from hostd_protocol.client_messages import SendResult, TopicInfo
from hostd_protocol.errors import ConnectionClosed, UnknownTopic
from tests.shell.conftest import Running

#: Public coroutine methods of `Client` that have no blocking twin, and why.
NOT_REQUESTS = {
    "aclose": "lifecycle: the sync client's is close() (and `with`)",
    "wait_closed": "lifecycle: a blocking caller learns of a lost daemon from its next request",
}
#: Public names only the sync client has.
SYNC_ONLY = {"close"}


def _requests() -> list[str]:
    return sorted(
        name
        for name, fn in inspect.getmembers(Client, inspect.iscoroutinefunction)
        if not name.startswith("_") and name not in NOT_REQUESTS
    )


def test_every_async_request_has_a_blocking_twin() -> None:
    names = _requests()
    assert "create_topic" in names and "rewind" in names  # Client's own and TopicOps' methods
    missing = [n for n in names if not callable(getattr(SyncClient, n, None))]
    assert missing == [], f"add `{missing[0] if missing else ''} = blocking(Client.<name>)`"
    for name in names:
        async_fn, sync_fn = getattr(Client, name), getattr(SyncClient, name)
        assert not inspect.iscoroutinefunction(sync_fn), name
        assert inspect.signature(sync_fn) == inspect.signature(async_fn), name
        assert sync_fn.__doc__ == async_fn.__doc__, name
        # Explicit, resolvable types (what type checkers and IDEs show): the async one's.
        hints = get_type_hints(sync_fn)
        assert "return" in hints and hints == get_type_hints(async_fn), name
        assert sync_fn.__qualname__ == f"SyncClient.{name}"


def test_the_sync_client_offers_nothing_else() -> None:
    public = {
        name
        for name, _ in inspect.getmembers(SyncClient, callable)
        if not name.startswith("_")
    }
    assert public - set(_requests()) == SYNC_ONLY
    # attach is an async context manager of live events: the async client's alone.
    assert not hasattr(SyncClient, "attach")


def test_import_path() -> None:
    assert hostd.client.SyncClient is SyncClient


async def test_results_and_errors_cross_the_thread_typed(running: Running) -> None:
    def work() -> tuple[TopicInfo, SendResult, list[str], BaseException, SyncClient]:
        with SyncClient(running.paths) as c:
            topic = c.create_topic(title="twin", options={})
            sent = c.send(topic.id, "q", "queue", client_msg_id="m1")
            renamed = c.rename_topic(topic.id, title="renamed")
            try:
                c.get_topic("no-such-topic")
            except UnknownTopic as exc:
                error: BaseException = exc
            titles = [t.title for t in c.list_topics()]
        assert renamed.title == "renamed"
        return topic, sent, titles, error, c

    with trio.fail_after(10):
        topic, sent, titles, error, closed = await trio.to_thread.run_sync(work)
    assert isinstance(topic, TopicInfo) and topic.title == "twin"
    assert isinstance(sent, SendResult) and sent.disposition == "started"
    assert titles == ["renamed"]
    assert isinstance(error, UnknownTopic) and error.code == "unknown_topic"

    def after_close() -> None:
        with pytest.raises(ConnectionClosed, match=r"^the client closed the connection$"):
            closed.list_topics()
        closed.close()  # idempotent

    with trio.fail_after(10):
        await trio.to_thread.run_sync(after_close)
