"""Runs `hostd app` (hostd.app.main.App, the same object the command runs) in this process and
lets a test drive its windows through pywebview's own JS evaluation (`Window.evaluate_js`).

The test's instrument, not part of the app: commands are JSON lines on stdin, answers JSON
lines on stdout prefixed with `@@` (Qt and Chromium write their own lines to stderr).

    python -m tests.app.driver HOME [TOPIC]
"""

from __future__ import annotations

import json
import sys
import threading
from typing import Any

from hostd.app.main import App
from hostd.shell.paths import Paths
from tests.polling import holds_within

#: A page-side wait: polls the expression until it is truthy (a condition, never a time).
WAIT_JS = """new Promise((resolve, reject) => {
  const t0 = Date.now();
  const tick = () => {
    let v;
    try { v = (%s); } catch (e) { v = undefined; }
    if (v) resolve(typeof v === 'object' && !Array.isArray(v) ? true : v);
    else if (Date.now() - t0 > %d) reject(new Error("timed out waiting for: " + %s));
    else setTimeout(tick, 20);
  };
  tick();
})"""


class Driver:
    def __init__(self, app: App) -> None:
        self.app = app
        self.notifications: list[tuple[str, str]] = []
        self.closed: dict[int, threading.Event] = {}

    def reply(self, value: Any) -> None:
        sys.stdout.write("@@" + json.dumps(value) + "\n")
        sys.stdout.flush()

    def window(self, index: int) -> Any:
        return self.app.windows[index]

    def serve(self) -> None:
        self.reply({"ok": "started"})
        for line in sys.stdin:
            cmd = json.loads(line)
            try:
                self.reply({"ok": self.run(cmd)})
            except Exception as exc:
                self.reply({"error": f"{type(exc).__name__}: {exc}"})
            if cmd["op"] == "quit":
                return

    def run(self, cmd: dict[str, Any]) -> Any:
        op = cmd["op"]
        if op == "open":
            window = self.app.open_window(cmd.get("topic", ""))
            return self.app.windows.index(window)
        if op == "eval":
            return self.window(cmd["win"]).evaluate_js(cmd["js"])
        if op == "wait":
            return self.wait(cmd["win"], cmd["js"], cmd.get("timeout", 20.0))
        if op == "close":
            window = self.window(cmd["win"])
            done = threading.Event()
            window.events.closed += done.set
            window.destroy()
            if not done.wait(20):
                raise TimeoutError("the window did not close")
            return len(self.app.windows)
        if op == "count":
            return len(self.app.windows)
        if op == "wait_count":  # until the app has n windows (one opened from a page, say)
            # The app's window list has no event of its own to wait on.
            if not holds_within(lambda: len(self.app.windows) == cmd["n"], cmd.get("timeout", 20.0)):
                raise TimeoutError(f"{len(self.app.windows)} windows, not {cmd['n']}")
            return cmd["n"]
        if op == "geometry":
            w = self.window(cmd["win"])
            return [w.width, w.height, w.x, w.y]
        if op == "move":
            w = self.window(cmd["win"])
            w.resize(cmd["width"], cmd["height"])
            w.move(cmd["x"], cmd["y"])
            return True
        if op == "connections":
            api = self.app.apis[id(self.window(cmd["win"]))]
            return api._connection_count()
        if op == "notifications":
            return self.notifications
        if op == "quit":
            for w in list(self.app.windows):
                w.destroy()
            return True
        raise ValueError(f"unknown op {op}")

    def wait(self, win: int, expr: str, timeout: float) -> Any:
        done = threading.Event()
        result: list[Any] = []

        def callback(value: Any) -> None:
            result.append(value)
            done.set()

        script = WAIT_JS % (expr, int(timeout * 1000), json.dumps(expr))
        self.window(win).evaluate_js(script, callback)
        if not done.wait(timeout + 10):
            raise TimeoutError(f"no answer from the page for: {expr}")
        value = result[0]
        if isinstance(value, dict) and value.get("message", "").startswith("timed out"):
            raise TimeoutError(value["message"])
        return value


def main() -> None:
    home, topic = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else "")
    holder: list[Driver] = []

    def notify(title: str, body: str) -> None:
        holder[0].notifications.append((title, body))

    app = App(Paths.under(home), notify=notify)
    driver = Driver(app)
    holder.append(driver)
    app.run(topic, on_started=lambda _app: threading.Thread(target=driver.serve, daemon=True).start())


if __name__ == "__main__":
    main()
