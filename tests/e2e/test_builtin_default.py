"""The built-in `default` assistant through the real daemon (subprocess) and socket: listed by
`list-assistants`, marked built-in, on the driver a topic that names nothing runs on; and a
topic of it (`assistant="default"`) is created on that same driver."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from hostd.client import open_client
from hostd.shell.paths import Paths
from hostd_protocol.client_messages import AssistantInfo
from tests.e2e import daemon_proc

pytestmark = pytest.mark.e2e


async def test_the_builtin_default_is_listed_and_a_topic_of_it_runs_where_it_says(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A credential makes Claude Code (the built-in default driver) ready; no turn is run.
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-0123456789")
    paths = Paths.under(home)
    with trio.fail_after(60):
        d = await daemon_proc.start(home)
        try:
            async with open_client(paths) as window:
                listed = await window.list_assistants()
                topic = await window.create_topic(assistant="default", working_dir=str(home))
                bare = await window.create_topic(working_dir=str(home))
                await window.shutdown()
        finally:
            await d.terminate()
    assert listed == [
        AssistantInfo(
            name="default",
            description="built-in: the assistant of a topic that names none",
            driver="claude-code",
            available=True,
            builtin=True,
        )
    ]
    assert (topic.assistant, topic.driver) == ("default", "claude-code")
    assert bare.driver == topic.driver
