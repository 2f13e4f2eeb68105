"""`hostd web --app`: the page in a chromeless window of a Chromium-family browser.

Chromium, Chrome, Edge, Brave and Vivaldi take `--app=URL` and open it as an app window (no
tabs, no address bar). The URL carries the token, and a command line is readable by every
local user (`/proc/PID/cmdline`), so the browser is given a file instead: an owner-only
(0600) HTML page that redirects to the URL, as Jupyter does for the same reason.
"""

from __future__ import annotations

import html
import os
import shutil
import subprocess
from pathlib import Path

from hostd_protocol import child_process

#: Tried in this order; `HOSTD_WEB_BROWSER` names another (a command or a path).
CHROMIUM_FAMILY = (
    "chromium",
    "chromium-browser",
    "google-chrome",
    "google-chrome-stable",
    "microsoft-edge",
    "microsoft-edge-stable",
    "brave-browser",
    "vivaldi",
)


def find_chromium(env: dict[str, str] | None = None) -> str | None:
    """The first Chromium-family browser on PATH (or `HOSTD_WEB_BROWSER`), or None."""
    env = dict(os.environ) if env is None else env
    path = env.get("PATH")
    named = env.get("HOSTD_WEB_BROWSER", "")
    for name in ((named,) if named else CHROMIUM_FAMILY):
        found = shutil.which(name, path=path)
        if found:
            return found
    return None


def write_redirect(path: Path, url: str) -> None:
    """An owner-only page that sends the browser on to `url` (which holds the token)."""
    from hostd.web.security import write_token_file

    quoted = html.escape(url, quote=True)
    write_token_file(
        path,
        f'<!doctype html><meta charset="utf-8"><meta http-equiv="refresh" content="0;url={quoted}">'
        f'<title>hostd</title><a href="{quoted}">open hostd</a>',
    )


def open_app_window(browser: str, redirect: Path) -> None:
    """Start `browser` on the redirect page in app mode, detached (it outlives nothing of
    ours: closing the window is the user's business, stopping `hostd web` ends the page)."""
    child_process.popen(
        [browser, f"--app={redirect.resolve().as_uri()}"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
