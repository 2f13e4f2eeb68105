"""Outside-in acceptance: what a user relies on from the `hostd` command and the Python
client when things go wrong (a daemon that dies mid-answer, closed pipes, bad bytes, bad
paths), run as a user runs it: the real daemon subprocess, the real command, real pipes.
Each test here failed before its fix."""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from hostd.client import SyncClient, open_client
from hostd_protocol.errors import ConnectionBroken, InvalidMessage
from tests.e2e.test_cli_everyday import Hostd, one_line_error

pytestmark = pytest.mark.e2e

#: Only limits a hang: every wait below is for something the command prints or does.
TIMEOUT = 60
#: A turn that streams long enough to be cut in the middle (~15 s: a few words per chunk at
#: the scripted driver's 40 chunks/s); "streaming" shows up first.
LONG_TURN = "/text streaming " + "word " * 2000


@pytest.fixture
def hostd() -> Iterator[Hostd]:
    root = Path(tempfile.mkdtemp(prefix="hqa", dir="/tmp"))  # short: AF_UNIX path limit
    h = Hostd(root)
    try:
        h.ok("serve", "--detach")
        yield h
    finally:
        h("stop")
        shutil.rmtree(root, ignore_errors=True)


class Running:
    """A running `hostd ...` command, its stdout read as it comes (we wait for output)."""

    def __init__(self, hostd: Hostd, *args: str) -> None:
        self.proc = subprocess.Popen(
            hostd.argv(*args),
            env={**hostd.env, "COLUMNS": "200"},
            cwd=hostd.project,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.out = ""

    def until(self, text: str) -> str:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + TIMEOUT
        while text not in self.out:
            ready, _, _ = select.select([fd], [], [], max(deadline - time.monotonic(), 0))
            assert ready, f"no {text!r} within {TIMEOUT} s; printed so far:\n{self.out}"
            data = os.read(fd, 65536)
            assert data, f"the command exited before printing {text!r}:\n{self.out}"
            self.out += data.decode()
        return self.out

    def finish(self) -> subprocess.CompletedProcess[str]:
        out, err = self.proc.communicate(timeout=TIMEOUT)
        self.out += out.decode()
        return subprocess.CompletedProcess(self.proc.args, self.proc.returncode, self.out, err.decode())

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate()


def daemon_pid(hostd: Hostd) -> int:
    pid: int = json.loads(hostd.ok("status", "--json"))["pid"]
    return pid


def test_a_daemon_that_dies_mid_answer_is_an_error_not_a_finished_turn(hostd: Hostd) -> None:
    """`send --follow` and `attach` used to exit 0, silently, when the daemon died under them
    (the subscription just ended), so a script took a lost answer for a finished one."""
    tid = hostd.ok("new", "--driver", "scripted").strip()
    # Attached before the turn starts, so both print the live answer the same way.
    attached = Running(hostd, "attach", tid)
    attached.until("Ctrl-C detaches")
    follow = Running(hostd, "send", tid, LONG_TURN, "--follow")
    try:
        follow.until("assistant:\nstreaming")  # the answer streams
        attached.until("assistant:\nstreaming")
        os.kill(daemon_pid(hostd), signal.SIGKILL)
        for proc in (follow.finish(), attached.finish()):
            line = one_line_error(proc)
            assert line.startswith("hostd: lost the connection to hostd: "), line
            assert "hostd status" in line
    finally:
        follow.kill()
        attached.kill()


async def test_a_subscription_raises_when_the_daemon_dies(hostd: Hostd) -> None:
    """The Python client: iterating an attached topic raises a typed error when the daemon
    dies, instead of ending as if nothing more was to come."""
    tid = hostd.ok("new", "--driver", "scripted").strip()
    pid = daemon_pid(hostd)
    seen = 0
    with trio.fail_after(TIMEOUT):
        async with open_client(home=hostd.home) as client, client.attach(tid) as sub:
            await client.send(tid, LONG_TURN)
            with pytest.raises(ConnectionBroken):
                async for _ in sub:
                    seen += 1
                    if seen == 3:
                        os.kill(pid, signal.SIGKILL)
    assert seen >= 3


def test_an_absurd_schedule_interval_is_refused_and_the_listing_keeps_working(hostd: Hostd) -> None:
    """`--every 99999999999d` used to be stored; from then on every `hostd schedule list`
    ended in a traceback (a due time past year 9999)."""
    tid = hostd.ok("new", "--driver", "scripted").strip()
    line = one_line_error(hostd("schedule", "add", tid, "x", "--every", "99999999999d"))
    assert line.startswith("hostd: the interval must be between 1 s and 3650 days"), line
    zero = hostd("schedule", "add", tid, "x", "--every", "0s")
    assert zero.returncode == 2 and "it must be longer than 0 s" in zero.stderr, zero.stderr
    hostd.ok("schedule", "add", tid, "x", "--every", "3650d")
    listed = hostd.ok("schedule", "list")
    assert "every 3650d" in listed, listed
    assert json.loads(hostd.ok("schedule", "list", "--json"))[0]["every_s"] == 3650 * 86400


def test_a_reader_that_goes_away_ends_the_command_quietly(hostd: Hostd) -> None:
    """`hostd history T | head -1` used to end in a BrokenPipeError traceback once the
    history was longer than the pipe holds."""
    tid = hostd.ok("new", "--driver", "scripted").strip()
    hostd.ok("send", tid, "-", "--follow", stdin="/text done\n" + "filler " * 50_000)
    for args in (("history", tid), ("export", tid), ("send", tid, LONG_TURN, "--follow")):
        proc = subprocess.Popen(
            hostd.argv(*args), env=hostd.env, cwd=hostd.project,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        assert proc.stdout is not None and proc.stderr is not None
        assert proc.stdout.readline()  # `head -1`: one line, then the reader is gone
        proc.stdout.close()
        err = proc.stderr.read().decode()
        proc.stderr.close()
        # 1 (what rich does for the streaming commands), or 0 when all was written first.
        assert proc.wait(timeout=TIMEOUT) in (0, 1), (args, err)
        assert err == "", (args, err)
    hostd.ok("stop", tid)


def test_bytes_that_are_not_text_are_one_line_errors(hostd: Hostd) -> None:
    """Undecodable bytes on stdin or in an argument used to end in a UnicodeEncodeError
    traceback from the client's encoder."""
    tid = hostd.ok("new", "--driver", "scripted").strip()
    binary = subprocess.run(
        hostd.argv("send", tid, "-"), input=b"\xff\xfe\x00binary", env=hostd.env,
        cwd=hostd.project, capture_output=True, timeout=TIMEOUT, check=False,
    )
    line = one_line_error(subprocess.CompletedProcess(
        binary.args, binary.returncode, binary.stdout.decode(), binary.stderr.decode()))
    assert line == ("hostd: the message from stdin is not UTF-8 text (byte 0xff at offset 0): "
                    "send text; images go with --image"), line
    for args in (("send", tid, b"caf\xe9"), ("rename", tid, b"caf\xe9"), ("new", "--title", b"\xff")):
        argv = [os.fsencode(a) if isinstance(a, str) else a for a in hostd.argv(*args)]  # type: ignore[arg-type]
        proc = subprocess.run(argv, env=hostd.env, cwd=hostd.project, capture_output=True,
                              timeout=TIMEOUT, check=False)
        line = one_line_error(subprocess.CompletedProcess(
            proc.args, proc.returncode, proc.stdout.decode(), proc.stderr.decode()))
        assert "a text is not valid Unicode" in line and line.endswith("[invalid_message]"), line
    # Nothing of it was stored; the topic goes on.
    assert json.loads(hostd.ok("history", tid, "--json"))["rows"] == []
    hostd.ok("send", tid, "/text still fine", "--follow")


def test_export_to_a_path_it_cannot_write_is_one_line(hostd: Hostd) -> None:
    tid = hostd.ok("new", "--driver", "scripted").strip()
    for target, why in ((hostd.root, "Is a directory"), (hostd.root / "no" / "x.md", "No such file or directory")):
        line = one_line_error(hostd("export", tid, "-o", str(target)))
        assert line == f"hostd: cannot write {target}: {why}", line
    line = one_line_error(hostd("protocol-schema", str(hostd.root)))
    assert line == f"hostd: cannot write {hostd.root}: Is a directory", line


async def test_the_client_refuses_a_request_it_cannot_encode_typed(hostd: Hostd) -> None:
    tid = hostd.ok("new", "--driver", "scripted").strip()
    with trio.fail_after(TIMEOUT):
        async with open_client(home=hostd.home) as client:
            with pytest.raises(InvalidMessage, match=r"^cannot send this send request: a text is not valid Unicode"):
                await client.send(tid, "bad \udcff")
            with pytest.raises(InvalidMessage, match=r"^cannot send this create-topic request: bad value"):
                await client.create_topic(driver="scripted", options={"x": object()})
            assert (await client.send(tid, "/text fine")).disposition == "started"


def test_the_sync_client_refuses_a_request_it_cannot_encode_typed(hostd: Hostd) -> None:
    tid = hostd.ok("new", "--driver", "scripted").strip()
    hostd.ok("send", tid, "/text fine", "--follow")
    with SyncClient(home=hostd.home) as sync:
        with pytest.raises(InvalidMessage, match=r"^cannot send this rename-topic request"):
            sync.rename_topic(tid, "\udcff")
        assert sync.history(tid).rows


def test_escape_sequences_in_topic_content_never_reach_the_terminal(hostd: Hostd) -> None:
    """A title, an answer or an error carrying terminal escape sequences (a model echoing a
    hostile file: retitle the terminal, clear it, OSC 52 set the clipboard) used to be
    printed raw by `topics`, `history`, `send --follow` and `attach`."""
    evil = "\x1b]52;c;cHduZWQ=\x07\x1b[2J\x9b31m\r"
    tid = hostd.ok("new", "--driver", "scripted", "--title", f"t{evil}").strip()
    sent = hostd("send", tid, f"/echo\nhi {evil} there\n/error bad {evil} end", "--follow")
    assert sent.returncode == 1, sent.stderr
    attached = Running(hostd, "attach", tid, "--last", "5")
    try:
        on_attach = attached.until("Ctrl-C detaches")
    finally:
        attached.kill()
    shown = {
        "send": sent.stdout,
        "topics": hostd.ok("topics"),
        "history": hostd.ok("history", tid),
        "attach": on_attach,
    }
    for name, text in shown.items():
        assert not set(text) & {"\x1b", "\x07", "\x9b", "\r"}, (name, text)
        assert "\u241b]52;c;cHduZWQ=\u2407\u241b[2J" in text or name == "attach", (name, text)
    assert "hi \u241b]52" in shown["history"] and "error: bad \u241b]52" in shown["history"]
    # Scripts get the exact text.
    rows = json.loads(hostd.ok("history", tid, "--json"))["rows"]
    assert evil in rows[0]["parts"][0]["text"]


def test_a_working_dir_that_is_a_file_is_refused_at_new(hostd: Hostd) -> None:
    """It used to be stored; every send then failed ("set another working directory"), and
    no request can change a topic's working directory."""
    a_file = hostd.project / "notes.txt"
    a_file.write_text("x")
    line = one_line_error(hostd("new", "--driver", "scripted", "--working-dir", str(a_file)))
    assert line == (f"hostd: working directory {str(a_file)!r} exists and is not a directory; "
                    "name a directory [invalid_argument]")
    assert "no topics yet" in hostd.ok("topics")
    # A folder is fine (one that does not exist is refused: tests/e2e/test_cli_decisions.py).
    (hostd.project / "new").mkdir()
    tid = hostd.ok("new", "--driver", "scripted", "--working-dir", str(hostd.project / "new")).strip()
    hostd.ok("send", tid, "/text ok", "--follow")


def test_attach_refuses_a_negative_count(hostd: Hostd) -> None:
    """`attach --last -5` printed "(older messages not shown ...)" and "(no messages yet)"."""
    tid = hostd.ok("new", "--driver", "scripted").strip()
    proc = hostd("attach", tid, "--last", "-5")
    assert proc.returncode == 2 and "invalid count '-5'" in proc.stderr, proc.stderr
