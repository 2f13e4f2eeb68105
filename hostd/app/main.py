"""The running app: pywebview windows on the reference page, each with its own bridge.

Threads: pywebview (Qt) owns the main thread; `webview.start` runs `_started` on a thread of
its own; the single-instance server, each daemon connection's reader and each JS call run on
threads of their own. Windows are created from any of them (pywebview marshals to Qt's).
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hostd.app import state
from hostd.app.bridge import WindowApi
from hostd.app.instance import Instance
from hostd.app.notify import Notifier
from hostd.shell.paths import Paths
from hostd.web import STATIC_DIR

INDEX = STATIC_DIR / "index.html"


def page_url(topic: str = "") -> str:
    url = INDEX.as_uri()
    return f"{url}#topic={topic}" if topic else url


def prepare_qt_env(env: dict[str, str] | os._Environ[str] = os.environ) -> None:
    """Qt WebEngine settings that must be in place before Qt starts.

    - Chromium refuses to run its sandbox as root: turn it off there (root only).
    - No remote-debugging port, whatever the environment says: it would be a TCP listener.
    """
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        env["QTWEBENGINE_DISABLE_SANDBOX"] = "1"
    env.pop("QTWEBENGINE_REMOTE_DEBUGGING", None)
    flags = env.get("QTWEBENGINE_CHROMIUM_FLAGS", "")
    if "remote-debugging" in flags:
        env["QTWEBENGINE_CHROMIUM_FLAGS"] = " ".join(
            f for f in flags.split() if "remote-debugging" not in f
        )


class App:
    def __init__(self, paths: Paths, *, notify: Callable[[str, str], None] | None = None) -> None:
        self.paths = paths
        self.notify = notify or Notifier()
        self.geometry_file = paths.config_dir / "app-window.json"
        self.geometry = state.load(self.geometry_file)
        self.windows: list[Any] = []  # webview.Window
        self.apis: dict[int, WindowApi] = {}
        self._lock = threading.Lock()
        self._quitting = False

    # --- windows -----------------------------------------------------------------------------

    def open_window(self, topic: str = "") -> Any:
        """A new window on `topic`; None once the app is quitting."""
        import webview

        with self._lock:
            if self._quitting:
                return None
            g = self.geometry.cascaded(len(self.windows))
        api = WindowApi(self.paths, open_window=self.open_window, notify=self.notify)
        window = webview.create_window(
            "hostd", page_url(topic), js_api=api, width=g.width, height=g.height, x=g.x, y=g.y,
            min_size=state.MIN_SIZE, text_select=True,
        )
        assert window is not None
        api._bind(window.run_js)
        with self._lock:
            self.windows.append(window)
            self.apis[id(window)] = api
            late = self._quitting  # quit() ran while Qt made this window: it missed it
        window.events.moved += lambda x, y: self._moved(x, y)
        window.events.resized += lambda width, height: self._resized(width, height)
        # A reload gives the page new transports: the old connections have no reader left.
        window.events.before_load += api._close_all
        window.events.closed += lambda: self._closed(window)
        if late:
            window.destroy()
            return None
        return window

    def _moved(self, x: int, y: int) -> None:
        with self._lock:
            self.geometry = state.Geometry(self.geometry.width, self.geometry.height, int(x), int(y))

    def _resized(self, width: int, height: int) -> None:
        with self._lock:
            self.geometry = state.Geometry(int(width), int(height), self.geometry.x, self.geometry.y)

    def _closed(self, window: Any) -> None:
        with self._lock:
            if window in self.windows:
                self.windows.remove(window)
            api = self.apis.pop(id(window), None)
            geometry = self.geometry
        if api is not None:
            api._close_all()  # the daemon goes on: its answers are its own, not the window's
        self.save_geometry(geometry)

    def save_geometry(self, geometry: state.Geometry | None = None) -> None:
        try:
            self.paths.config_dir.mkdir(parents=True, exist_ok=True)
            state.save(self.geometry_file, geometry or self.geometry)
        except OSError:
            pass  # remembering the size is a nicety; never a reason to fail

    def quit(self) -> None:
        """Close every window (the app then ends; the daemon and its answers go on)."""
        with self._lock:
            self._quitting = True
            windows = list(self.windows)
        for window in windows:
            window.destroy()

    # --- run ---------------------------------------------------------------------------------

    def run(
        self,
        topic: str = "",
        *,
        instance: Instance | None = None,
        on_started: Callable[[App], None] | None = None,
    ) -> None:
        """Open the first window and run until the last one closed (blocks the main thread)."""
        import webview

        prepare_qt_env()
        self.open_window(topic)

        def started() -> None:
            if instance is not None:
                instance.serve(self.open_window)
            if on_started is not None:
                on_started(self)

        # private_mode: each window an off-the-record web profile. pywebview's Qt backend gives
        # every window a persistent profile of the same name and folder otherwise, and Qt
        # WebEngine does not load a second window on a folder in use (it stays blank). The page
        # keeps nothing there that matters (its theme choice; the daemon holds the rest).
        stop_on_signals(self.quit)
        try:
            webview.start(started, gui="qt", private_mode=True)
        finally:
            if instance is not None:
                instance.close()
            for api in list(self.apis.values()):
                api._close_all()
            self.save_geometry()


def stop_on_signals(quit: Callable[[], None]) -> None:
    """Ctrl-C and SIGTERM close the windows, as closing them by hand does.

    Qt's event loop holds the main thread, where Python runs signal handlers, so a handler
    would only run once Qt returns (never, for Ctrl-C). The wake-up fd is written by the C
    signal handler at once; a thread reading it closes the windows.
    """
    read, write = os.pipe()
    os.set_blocking(write, False)
    signal.set_wakeup_fd(write)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: None)

    def wait() -> None:
        os.read(read, 1)
        quit()

    threading.Thread(target=wait, name="hostd-app-signals", daemon=True).start()


def static_ready() -> Path | None:
    """The page's index.html, or None when the page is not built."""
    return INDEX if INDEX.is_file() else None
