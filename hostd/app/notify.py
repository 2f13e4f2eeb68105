"""Native desktop notifications: the freedesktop Notifications service on the session D-Bus.

Sent with `gdbus` (GLib's command-line D-Bus client, present wherever GLib is: every GTK or
GNOME desktop, and Debian's libglib2.0-bin), falling back to `notify-send` (libnotify-bin);
neither present or no session bus: nothing is shown and the app says so once on stderr. A
subprocess rather than a D-Bus library in the app: a notification is rare, and the call
must never block or break a window (it runs on its own thread, with a timeout).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading

from hostd_protocol import child_process

APP_NAME = "hostd"
TIMEOUT_S = 10


def command(title: str, body: str) -> list[str] | None:
    """The command that shows one notification, or None when this desktop has none."""
    gdbus = shutil.which("gdbus")
    if gdbus is not None:
        return [
            gdbus, "call", "--session", "--dest", "org.freedesktop.Notifications",
            "--object-path", "/org/freedesktop/Notifications",
            "--method", "org.freedesktop.Notifications.Notify",
            _gvariant_str(APP_NAME), "0", "''", _gvariant_str(title), _gvariant_str(body),
            "@as []", "@a{sv} {}", "8000",
        ]
    notify_send = shutil.which("notify-send")
    if notify_send is not None:
        return [notify_send, "--app-name", APP_NAME, title, body]
    return None


def _gvariant_str(text: str) -> str:
    """`text` as a GVariant text-format string (gdbus parses each argument in that format)."""
    escaped = text.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n")
    return f"'{escaped}'"


class Notifier:
    def __init__(self) -> None:
        self._warned = False

    def __call__(self, title: str, body: str) -> None:
        threading.Thread(target=self._send, args=(title, body), daemon=True).start()

    def _send(self, title: str, body: str) -> None:
        if not send(title, body) and not self._warned:
            self._warned = True
            print("hostd app: cannot show desktop notifications (no session D-Bus notification "
                  "service, or neither gdbus nor notify-send installed)", file=sys.stderr, flush=True)


def send(title: str, body: str) -> bool:
    """Show one notification now (blocking, bounded); whether the service took it."""
    argv = command(title, body)
    if argv is None:
        return False
    try:
        return child_process.run(argv, timeout=TIMEOUT_S).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False
