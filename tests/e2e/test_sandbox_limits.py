"""A confined topic's tree has a process budget (issue 31): a bounded fork bomb in a
confined turn hits it, while the daemon and another topic keep answering. Through the real
daemon and scripted driver; the limit is a cgroup leaf where one can be made, else
RLIMIT_NPROC (`hostd.shell.drivers.limits`; `hostd status` says which)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import trio

from hostd.client import open_client
from hostd.shell.drivers.limits import probe_limits
from hostd.shell.paths import Paths
from tests.e2e import daemon_proc
from tests.e2e.test_sandbox_e2e import answer, needs_bwrap
from tests.polling import eventually

SUPPORT = probe_limits()
pytestmark = [
    pytest.mark.e2e,
    needs_bwrap,
    pytest.mark.skipif(
        SUPPORT.mechanism == "rlimit" and os.geteuid() == 0,
        reason="root without a writable cgroup: Linux applies no process limit to uid 0",
    ),
]

#: Forks sleeping children until a fork fails (at most 2000), says so in `full`, holds
#: them until `done` appears (bounded), then ends them and reports.
BOMB = """\
import errno, os, time
kids, err = [], "none"
while len(kids) < 2000:
    try:
        pid = os.fork()
    except OSError as e:
        err = errno.errorcode.get(e.errno, str(e.errno))
        break
    if pid == 0:
        time.sleep(120)
        os._exit(0)
    kids.append(pid)
open("full", "w").close()
deadline = time.monotonic() + 60
while not os.path.exists("done") and time.monotonic() < deadline:
    time.sleep(0.02)
for k in kids:
    os.kill(k, 9)
for k in kids:
    os.waitpid(k, 0)
print(f"forked {len(kids)} then {err}")
"""


async def test_a_fork_bomb_in_a_confined_turn_hits_the_limit_others_keep_answering(
    home: Path,
) -> None:
    project = home / "project"
    project.mkdir()
    (project / "bomb.py").write_text(BOMB)
    with trio.fail_after(90):
        d = await daemon_proc.start(home)
        try:
            async with open_client(Paths.under(home)) as c:
                bombed = await c.create_topic(
                    driver="scripted", working_dir=str(project),
                    options={"sandbox": {"mode": "confined", "pids": 64}, "chunk_rate": 0},
                )
                other = await c.create_topic(driver="scripted", options={"chunk_rate": 0})
                said: list[str] = []

                async def bomb() -> None:
                    said.append(await answer(c, bombed.id, "/sh python3 bomb.py"))

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(bomb)
                    assert await eventually((project / "full").exists, 60), "the bomb never filled up"
                    # The budget is spent: the daemon and another topic answer anyway.
                    assert await answer(c, other.id, "/text still here") == "still here"
                    assert (await c.status()).topics == 2
                    (project / "done").touch()
        finally:
            assert await d.terminate() == 0
    text = said[0]
    assert text.startswith("exit 0: forked "), text
    forked, err = int(text.split()[3]), text.split()[-1]
    assert err == "EAGAIN" and forked < 64, text
