"""The app-test stack: Xvfb (Debian's), the real daemon, and `hostd app` windows driven
through pywebview's JS evaluation (tests/app/driver.py) or the real `hostd app` command."""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from hostd.client.sync_wire import request
from hostd.shell.paths import Paths
from hostd_protocol.client_messages import CreateTopic, History, MessageRow

REPO = Path(__file__).resolve().parents[2]
XVFB = shutil.which("Xvfb")
#: How long one command to the app may take (the machine is shared; waits end on conditions).
COMMAND_TIMEOUT = 60.0


def _why_not() -> str | None:
    """Why the app tests cannot run on this machine (they skip, saying so), or None."""
    if XVFB is None:
        return "Xvfb is not installed (scripts/setup installs xvfb)"
    from hostd.app.command import problem

    return problem({"DISPLAY": ":0"})


#: Why the app tests skip here, or None.
WHY_NOT = _why_not()
#: Every app test's marks: end to end, needs Xvfb and pywebview's Qt backend.
APP_TEST_MARKS = [pytest.mark.e2e, pytest.mark.skipif(WHY_NOT is not None, reason=str(WHY_NOT))]


@contextmanager
def xvfb() -> Iterator[str]:
    """A private X server; its display (`:N`, the first free one, as Xvfb -displayfd picks)."""
    assert XVFB is not None
    read, write = os.pipe()
    proc = subprocess.Popen(
        [XVFB, "-displayfd", str(write), "-screen", "0", "2000x1000x24", "-nolisten", "tcp"],
        pass_fds=(write,), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    os.close(write)
    try:
        with os.fdopen(read) as f:
            number = f.readline().strip()
        assert number, "Xvfb did not report its display"
        yield f":{number}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@dataclass
class Daemon:
    home: Path
    display: str

    @property
    def paths(self) -> Paths:
        return Paths.under(self.home)

    @property
    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("HOSTD_HOME", "WAYLAND_DISPLAY")}
        return {**env, "HOSTD_HOME": str(self.home), "DISPLAY": self.display}

    def create_topic(self, title: str, scenario: str = "echo") -> str:
        result = request(
            self.paths,
            CreateTopic(id=1, title=title, driver="scripted", options={"scenario": scenario, "chunk_rate": 200}),
        )
        return str(result.topic.id)

    def history(self, topic_id: str) -> list[MessageRow]:
        return list(request(self.paths, History(id=1, topic_id=topic_id)).rows)


@contextmanager
def daemon(home: Path, display: str) -> Iterator[Daemon]:
    d = Daemon(home, display)
    hostd = [sys.executable, "-m", "hostd", "--home", str(home)]
    subprocess.run([*hostd, "serve", "--detach"], check=True, capture_output=True, env=d.env, timeout=60)
    try:
        yield d
    finally:
        subprocess.run([*hostd, "stop"], capture_output=True, env=d.env, timeout=60, check=False)


class AppProcess:
    """One app process under the test driver; `call` sends a command and waits for its answer."""

    def __init__(self, d: Daemon, topic: str = "") -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.app.driver", str(d.home), topic],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=d.env, cwd=REPO,
        )
        self.answers: queue.Queue[Any] = queue.Queue()
        self.stderr: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_err, daemon=True).start()
        self._answer()  # "started"

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in _lines(self.proc.stdout):
            if line.startswith("@@"):
                self.answers.put(json.loads(line[2:]))
        self.answers.put({"error": "the app exited"})

    def _read_err(self) -> None:
        assert self.proc.stderr is not None
        for line in _lines(self.proc.stderr):
            self.stderr.append(line)

    def _answer(self) -> Any:
        try:
            answer = self.answers.get(timeout=COMMAND_TIMEOUT)
        except queue.Empty:
            raise AssertionError(f"the app did not answer; stderr: {''.join(self.stderr[-20:])}") from None
        if "error" in answer:
            raise AssertionError(f"{answer['error']}; stderr: {''.join(self.stderr[-20:])}")
        return answer["ok"]

    def call(self, op: str, **args: Any) -> Any:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"op": op, **args}) + "\n")
        self.proc.stdin.flush()
        return self._answer()

    def eval(self, win: int, js: str) -> Any:
        return self.call("eval", win=win, js=js)

    def wait(self, win: int, js: str) -> Any:
        return self.call("wait", win=win, js=js)

    def wait_rows(self, win: int, predicate: str) -> None:
        self.wait(win, f"(() => {{ const rows = {ROWS_JS}; return {predicate}; }})()")

    def rows(self, win: int) -> list[dict[str, str]]:
        return list(self.eval(win, ROWS_JS))

    def type_and_send(self, win: int, text: str) -> None:
        self.eval(win, TYPE_JS % json.dumps(text))
        # Enter in a task of its own, as a key press after typing is: the composer has
        # re-rendered with the text by then.
        self.wait(win, f"document.querySelector('[data-testid=composer]').value === {json.dumps(text)}")
        self.eval(win, ENTER_JS)

    def quit(self) -> int:
        if self.proc.poll() is None:
            try:
                self.call("quit")
            except AssertionError:
                pass
        try:
            code = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()
        return code


#: Where the tests keep their screenshots (gitignored); docs/app-two-windows.png is a copy.
SCREENSHOTS = REPO / ".artifacts" / "app-screenshots"

GRAB = """
import sys
from PyQt6.QtWidgets import QApplication
app = QApplication([])
sys.exit(0 if app.primaryScreen().grabWindow(0).save(sys.argv[1]) else 1)
"""


def screenshot(d: Daemon, name: str) -> Path:
    """The whole X screen (both windows), photographed by Qt in a process of its own."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    subprocess.run([sys.executable, "-c", GRAB, str(path)], env=d.env, check=True, timeout=60,
                   capture_output=True)
    return path


def _lines(stream: Any) -> Iterator[str]:
    """Lines until EOF, or until the stream is closed under the reader (quit)."""
    try:
        yield from stream
    except (ValueError, OSError):
        return


ROWS_JS = (
    "[...document.querySelectorAll('[data-testid=row]')].map(e => ({label: e.dataset.label,"
    " role: e.dataset.role, status: e.dataset.status, text: e.dataset.text}))"
)

#: Types into the composer as a person does (an input event, then Enter).
TYPE_JS = """(() => {
  const box = document.querySelector('[data-testid=composer]');
  box.focus();
  const set = Object.getOwnPropertyDescriptor(HTMLTextAreaElement.prototype, 'value').set;
  set.call(box, %s);
  box.dispatchEvent(new Event('input', {bubbles: true}));
  return true;
})()"""
ENTER_JS = """(() => {
  const box = document.querySelector('[data-testid=composer]');
  box.dispatchEvent(new KeyboardEvent('keydown', {key: 'Enter', bubbles: true, cancelable: true}));
  return true;
})()"""
