"""`hostd schedule` and `hostd status` as a user types them: the real CLI against a real
daemon (scripted driver), options before or after the message, the listing people read."""

# ruff: noqa: RUF001  (the prompt mark U+276F is part of what the chat prints)

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio

from hostd.cli.demo import DemoDaemon, run_daemon
from hostd.client import open_client

pytestmark = pytest.mark.e2e


@pytest.fixture
async def daemon() -> AsyncIterator[DemoDaemon]:
    home = Path(tempfile.mkdtemp(prefix="hds", dir="/tmp"))  # short: AF_UNIX path limit
    try:
        async with run_daemon(home) as d:
            yield d
    finally:
        shutil.rmtree(home, ignore_errors=True)


async def hostd(d: DemoDaemon, *args: str) -> tuple[int, str, str]:
    env = {**os.environ, "HOSTD_HOME": str(d.paths.home), "COLUMNS": "200"}
    with trio.fail_after(20):
        proc = await trio.run_process(
            [sys.executable, "-m", "hostd", *args],
            capture_stdout=True, capture_stderr=True, env=env, check=False,
        )
    return proc.returncode, proc.stdout.decode(), proc.stderr.decode()


async def test_schedule_add_list_and_status_as_a_user_types_them(daemon: DemoDaemon) -> None:
    async with open_client(daemon.paths) as c:
        topic = await c.create_topic(title="Morning news", driver="scripted")
    tid = topic.id

    # Options after the topic, before the message (argparse alone said "unrecognized").
    code, out, err = await hostd(daemon, "schedule", "add", tid, "--every", "5m",
                                 "summarise the news", "--busy", "skip")
    assert code == 0, out + err
    assert out.startswith("added schedule ")
    code, out, err = await hostd(daemon, "schedule", "add", "--every", "1d", tid,
                                 "--missed", "skip", "check the build", "--paused")
    assert code == 0, out + err

    code, listing, err = await hostd(daemon, "schedule", "list")
    assert code == 0, err
    assert listing.count(f"on topic 'Morning news' ({tid})") == 2
    assert "  message: summarise the news\n" in listing
    assert "  message: check the build\n" in listing
    assert "  when busy: skip that run · missed runs: run once at start\n" in listing
    assert "  when busy: queue behind the answer · missed runs: skip them\n" in listing
    assert "(in 5m)" in listing or "(in 4m)" in listing
    assert "next run: - (paused)" in listing

    code, status, err = await hostd(daemon, "status")
    assert code == 0, err
    assert "schedules           2 (1 enabled, 1 paused)" in status


async def test_schedule_add_usage_errors_show_its_own_usage(daemon: DemoDaemon) -> None:
    async with open_client(daemon.paths) as c:
        topic = await c.create_topic(title="t", driver="scripted")
    code, out, err = await hostd(daemon, "schedule", "add", topic.id, "--every", "5m",
                                 "two", "words")
    assert code == 2, out
    assert err.startswith("hostd: takes TOPIC TEXT; got 3 arguments")
    assert "quote a message of several words" in err
    assert err.endswith("; see `hostd schedule add --help`\n")
    code, out, err = await hostd(daemon, "schedule", "add", topic.id, "hi", "--every", "5m",
                                 "--bogus")
    assert code == 2, out
    assert err == "hostd: unrecognized arguments: --bogus; see `hostd schedule add --help`\n"
    async with open_client(daemon.paths) as c:
        assert await c.list_schedules() == []


async def test_a_scheduled_run_reads_as_the_schedule_in_chat_and_history(
    daemon: DemoDaemon,
) -> None:
    async with open_client(daemon.paths) as c:
        topic = await c.create_topic(title="t", driver="scripted", options={"scenario": "/echo"})
        sched = await c.add_schedule(topic.id, "daily report", every_s=86400)
        async with c.attach(topic.id) as sub:
            await c.run_schedule_now(sched.id)
            async for ev in sub:
                if type(ev).__name__ == "TurnEnded":
                    break
    code, history, err = await hostd(daemon, "history", topic.id)
    assert code == 0, err
    assert history.startswith(f"schedule {sched.id}:\ndaily report\nassistant:\n")
    # `hostd attach` prints rows the same way (print_row, StreamPrinter: tests/cli's
    # test_basic_commands); on an idle topic it waits for the next turn, so not here.
    env = {**os.environ, "HOSTD_HOME": str(daemon.paths.home), "COLUMNS": "100"}
    with trio.fail_after(30):
        proc = await trio.run_process(
            [sys.executable, "-m", "hostd", "chat", topic.id], stdin=b"",
            capture_stdout=True, capture_stderr=True, env=env, check=False,
        )
    chat = proc.stdout.decode()
    assert proc.returncode == 0, chat + proc.stderr.decode()
    assert f"U1  schedule {sched.id} ❯ daily report" in chat
    assert "you ❯" not in chat
