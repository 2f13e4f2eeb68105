"""`Client.watch_topics`: a UI's topic list without polling, through the real daemon."""

from __future__ import annotations

import pytest
import trio

import hostd.shell.handlers
from hostd.client import TopicWatch, open_client
from hostd_protocol.errors import ConnectionBroken, HostdError
from tests.shell.conftest import Running


async def test_the_list_then_every_change_by_any_window(running: Running) -> None:
    with trio.fail_after(20):
        async with open_client(running.paths) as ui, open_client(running.paths) as other:
            first = await other.create_topic(title="first")
            async with ui.watch_topics() as watch:
                assert isinstance(watch, TopicWatch)
                assert [t.title for t in watch.topics()] == ["first"]
                second = await other.create_topic(title="second")
                await other.rename_topic(first.id, title="renamed")
                await other.delete_topic(second.id)
                seen: list[tuple[str, list[str]]] = []
                async for change in watch:
                    seen.append((change.change, [t.title for t in watch.topics()]))
                    if len(seen) == 3:
                        break
            assert seen == [
                ("created", ["first", "second"]),
                ("changed", ["renamed", "second"]),
                ("deleted", ["renamed"]),
            ]


async def test_a_long_list_comes_whole_and_a_change_during_paging_is_kept(
    running: Running, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Pages of a few topics each, so the watch has to follow `has_more`.
    monkeypatch.setattr(hostd.shell.handlers, "MAX_REPLY_BYTES", 700)
    with trio.fail_after(20):
        async with open_client(running.paths) as ui, open_client(running.paths) as other:
            titles = [f"topic {i:02}" for i in range(12)]
            for title in titles:
                await other.create_topic(title=title)
            async with ui.watch_topics() as watch:
                assert [t.title for t in watch.topics()] == titles
                await other.create_topic(title="late")
                change = await watch.__anext__()
                assert change.change == "created"
                assert [t.title for t in watch.topics()] == [*titles, "late"]


async def test_one_watch_per_connection_and_it_ends_with_its_block(running: Running) -> None:
    with trio.fail_after(20):
        async with open_client(running.paths) as ui, open_client(running.paths) as other:
            async with ui.watch_topics() as watch:
                with pytest.raises(HostdError, match="already watches the topic list"):
                    async with ui.watch_topics():
                        pass
            await other.create_topic(title="after the block")
            assert [c async for c in watch] == []  # ended: nothing after unwatching
            async with ui.watch_topics() as again:  # a new watch on the same connection
                assert [t.title for t in again.topics()] == ["after the block"]


async def test_a_lost_connection_ends_the_watch_with_its_error(running: Running) -> None:
    with trio.fail_after(20):
        async with open_client(running.paths) as ui, ui.watch_topics() as watch:
            await running.stop()
            with pytest.raises(ConnectionBroken):
                async for _ in watch:
                    pass


async def test_a_topic_starting_and_ending_an_answer_is_a_change_with_its_state(
    running: Running,
) -> None:
    # Protocol 1.6: busy badges of a topic list need no polling.
    with trio.fail_after(20):
        async with open_client(running.paths) as ui, open_client(running.paths) as other:
            topic = await other.create_topic(title="busy")
            async with ui.watch_topics() as watch:
                await other.send(topic.id, "hi", "start")
                turn = await running.supervisor.turns.receive()
                change = await watch.__anext__()
                assert (change.change, change.topic_id) == ("changed", topic.id)
                assert [t.state for t in watch.topics()] == ["answering"]
                turn.end()
                states = []
                async for _change in watch:
                    states.append(watch.topics()[0].state)
                    if states[-1] == "idle":
                        break
                assert states[-1] == "idle"
