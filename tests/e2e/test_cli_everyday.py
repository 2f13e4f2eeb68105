"""The everyday `hostd` command against a real daemon (scripted driver): exit codes, one-line
errors, `--json`, messages from stdin and files, and the topic verbs (stop, rename, delete,
export), `paths`, `logs`, `status` naming the log file."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

TIMEOUT = 60


class Hostd:
    """Runs `hostd --home HOME ...` in a project folder, as a user would."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.home = root / "h"
        self.project = root / "project"
        self.project.mkdir()
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("HOSTD_")}
        self.env["HOSTD_HOME"] = str(self.home)

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "hostd", *args]

    def __call__(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.argv(*args),
            input=stdin,
            env=self.env,
            cwd=self.project,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            check=False,
        )

    def ok(self, *args: str, stdin: str | None = None) -> str:
        proc = self(*args, stdin=stdin)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc.stdout


@pytest.fixture
def hostd() -> Iterator[Hostd]:
    root = Path(tempfile.mkdtemp(prefix="hev", dir="/tmp"))  # short: AF_UNIX path limit
    h = Hostd(root)
    try:
        yield h
    finally:
        h("stop")
        shutil.rmtree(root, ignore_errors=True)


def one_line_error(proc: subprocess.CompletedProcess[str], code: int = 1) -> str:
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("hostd: "), proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    return lines[0]


def test_exit_codes_json_and_stdin(hostd: Hostd) -> None:
    started = hostd.ok("serve", "--detach")
    assert "hostd started" in started
    status = json.loads(hostd.ok("status", "--json"))
    assert status["log"] == str(hostd.home / "log" / "hostd.log")
    assert "hostd.log" in hostd.ok("status")

    topic = json.loads(hostd.ok("new", "--driver", "scripted", "--title", "t", "--json"))
    assert topic["driver"] == "scripted" and topic["state"] == "idle"
    assert topic["working_dir"] == str(hostd.project)  # the directory the command ran in
    tid = topic["id"]
    listed = json.loads(hostd.ok("topics", "--json"))
    assert [t["id"] for t in listed] == [tid]
    assert str(hostd.project) in hostd.ok("topics")

    # A failed turn: exit 1, the error once.
    failed = hostd("send", tid, "/error vendor is down", "--follow")
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert failed.stdout.count("error: vendor is down") == 1, failed.stdout
    assert "(turn error)" in failed.stdout

    # The message from stdin, and from a file, bigger than a command line may be.
    big = "/echo\n" + "x" * 300_000
    out = hostd.ok("send", tid, "-", "--follow", stdin=big)
    assert out.count("x") >= 300_000
    note = hostd.project / "msg.txt"
    note.write_text("/text from a file")
    assert "from a file" in hostd.ok("send", tid, "--file", str(note), "--follow")
    sent = json.loads(hostd.ok("send", tid, "/text hi", "--json"))
    assert sent["disposition"] in ("started", "queued") and sent["row_id"]

    rows = json.loads(hostd.ok("history", tid, "--json"))["rows"]
    assert any(r["role"] == "user" and r["parts"][0]["text"] == "/text from a file" for r in rows)
    nope = hostd.root / "nope"
    assert one_line_error(hostd("send", tid, "--file", str(nope))) == (
        f"hostd: cannot read {nope}: No such file or directory"  # not "[Errno 2] ... 'nope'"
    )
    assert "unknown_topic" in one_line_error(hostd("send", "tp-nope", "hi"))
    usage = json.loads(hostd.ok("usage", "--json"))
    assert "topics" in usage


def test_topic_verbs(hostd: Hostd) -> None:
    hostd.ok("serve", "--detach")
    tid = hostd.ok("new", "--driver", "scripted").strip()
    hostd.ok("send", tid, "/text Hello there\n/tool Read output=file-body", "--follow")

    assert hostd.ok("rename", tid, "Greetings").strip() == f"renamed {tid}: Greetings"
    md = hostd.ok("export", tid)
    assert md.startswith("# Greetings\n")
    assert "## User" in md and "## Assistant" in md and "Hello there" in md
    assert "**Tool `Read`**" in md and "file-body" in md
    exported = hostd.project / "t.json"
    hostd.ok("export", tid, "--format", "json", "-o", str(exported))
    data = json.loads(exported.read_text())
    assert data["topic"]["title"] == "Greetings"
    assert [m["role"] for m in data["messages"]][:2] == ["user", "assistant"]

    # Stop a running turn without stopping the daemon.
    hostd.ok("send", tid, "/text partial\n/wait")
    hostd.ok("attach", tid, "--help")  # help on a verb works with the daemon running
    assert hostd.ok("stop", tid).startswith(f"stopped the turn of {tid}")
    stopped = hostd("send", tid, "/text again", "--follow")
    assert stopped.returncode == 0, stopped.stderr
    assert "hostd is not running" not in hostd("status").stderr

    nothing = one_line_error(hostd("stop", tid))
    assert "nothing_to_stop" in nothing

    refused = one_line_error(hostd("delete", tid))
    assert "add --yes" in refused
    assert hostd.ok("delete", tid, "--yes").strip() == f"deleted {tid}"
    assert json.loads(hostd.ok("topics", "--json")) == []

    paths = json.loads(hostd.ok("paths", "--json"))
    assert paths["socket"] == str(hostd.home / "run" / "hostd.sock")
    assert paths["log"] == str(hostd.home / "log" / "hostd.log")
    assert "hostd.sock" in hostd.ok("paths")
    logs = hostd.ok("logs", "-n", "5")
    assert 0 < len(logs.splitlines()) <= 5


def test_ctrl_c_during_send_follow_says_the_turn_goes_on(hostd: Hostd) -> None:
    hostd.ok("serve", "--detach")
    tid = hostd.ok("new", "--driver", "scripted").strip()
    proc = subprocess.Popen(
        hostd.argv("send", tid, "/text working on it\n/wait", "--follow"),
        env=hostd.env,
        cwd=hostd.project,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    # Wait for the answer to stream (a line, not a sleep), then press Ctrl-C.
    while "working on it" not in (proc.stdout.readline()):
        pass
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == 130
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    assert f"the turn keeps running in the daemon (`hostd attach {tid}`" in err
    assert json.loads(hostd.ok("topics", "--json"))[0]["state"] != "idle"
    hostd.ok("stop", tid)


def test_one_line_errors_without_a_daemon(hostd: Hostd) -> None:
    assert hostd.ok("-V").startswith("hostd ")
    bad = hostd("serve", "--log-level", "verbose")
    assert bad.returncode == 2 and "invalid choice: 'VERBOSE'" in bad.stderr
    long_home = hostd.root / ("x" * 120)
    err = one_line_error(hostd("--home", str(long_home), "serve", "--detach"))
    assert "longer than" in err and "HOSTD_HOME" in err
    err = one_line_error(hostd("topics"))
    assert "hostd is not running" in err
    stopped = hostd("stop")  # already stopped: nothing to do, not a failure to start it
    assert (stopped.returncode, stopped.stdout, stopped.stderr) == (
        0, "hostd is not running: nothing to stop\n", ""
    )
    err = one_line_error(hostd("serve", "--detach", "--driver-nice", "25"))
    assert err == "hostd: --driver-nice (or HOSTD_DRIVER_NICE) must be 0 (off) to 19, not 25"
    for command in ("new", "send", "stop", "export", "logs", "paths", "drivers", "usage"):
        helped = hostd(command, "--help")
        assert helped.returncode == 0
        # Every option says what it does.
        for line in helped.stdout.splitlines():
            stripped = line.strip()
            if stripped.startswith("--") and "  " not in stripped and "," not in stripped:
                nxt = helped.stdout.split(line, 1)[1].splitlines()[1:2]
                assert nxt and nxt[0].startswith(" " * 20), (command, line)


def test_usage_survives_a_restart(hostd: Hostd) -> None:
    hostd.ok("serve", "--detach")
    tid = hostd.ok("new", "--driver", "scripted").strip()
    hostd.ok("send", tid, "/text counted\n/usage 120 30", "--follow")
    before = json.loads(hostd.ok("usage", tid, "--json"))
    assert before["topics"][tid]["input_tokens"] == 120
    assert before["topics"][tid]["output_tokens"] == 30
    assert hostd.ok("stop").startswith("hostd stopped")
    hostd.ok("serve", "--detach")
    after = json.loads(hostd.ok("usage", tid, "--json"))
    assert after["topics"] == before["topics"]
    assert [t["turn_id"] for t in after["turns"]] == [t["turn_id"] for t in before["turns"]]
    assert "usage per topic" in hostd.ok("usage")


def test_an_untitled_topic_is_named_after_its_first_message(hostd: Hostd) -> None:
    hostd.ok("serve", "--detach")
    tid = hostd.ok("new", "--driver", "scripted").strip()
    hostd.ok("send", tid, "\n  Why   is the sky blue?\nsecond line", "--follow")
    (topic,) = json.loads(hostd.ok("topics", "--json"))
    assert topic["title"] == "Why is the sky blue?"
    hostd.ok("send", tid, "something else", "--follow")
    assert json.loads(hostd.ok("topics", "--json"))[0]["title"] == "Why is the sky blue?"
    named = hostd.ok("new", "--driver", "scripted", "--title", "mine").strip()
    hostd.ok("send", named, "hello", "--follow")
    assert {t["id"]: t["title"] for t in json.loads(hostd.ok("topics", "--json"))}[named] == "mine"


def test_export_to_a_terminal_shows_control_characters_and_a_file_keeps_them(hostd: Hostd) -> None:
    # Found from outside: `hostd export TOPIC` on a terminal wrote an answer's escape
    # sequences raw (clear screen, retitle, OSC 52 clipboard), where every other command
    # shows them made visible; a file or a pipe keeps the exact text.
    import pty

    hostd.ok("serve", "--detach")
    tid = hostd.ok("new", "--driver", "scripted").strip()
    hostd.ok("send", tid, "/text hello \x1b[2J\x1b]0;PWNED\x07 world", "--follow")
    assert "\x1b[2J" in hostd.ok("export", tid)  # a pipe: exact
    main_fd, tty_fd = pty.openpty()
    try:
        proc = subprocess.run(
            hostd.argv("export", tid), env=hostd.env, cwd=hostd.project, stdout=tty_fd,
            stderr=subprocess.PIPE, timeout=TIMEOUT, check=False,
        )
        os.close(tty_fd)
        shown = b""
        while True:
            try:
                chunk = os.read(main_fd, 65536)
            except OSError:  # EIO: the terminal's other end is closed and drained
                break
            if not chunk:
                break
            shown += chunk
    finally:
        os.close(main_fd)
    assert proc.returncode == 0, proc.stderr
    assert b"hello" in shown and b"world" in shown
    assert b"\x1b" not in shown and b"\x07" not in shown
