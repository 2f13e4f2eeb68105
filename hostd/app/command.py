"""The `hostd app` command: argument parser (light) and the command itself."""

from __future__ import annotations

import argparse
import os
import sys


def register(sub: argparse._SubParsersAction, handlers: dict) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "app",
        help="open the UI in a native window (needs hostd[app]); a running app opens a new window",
    )
    p.add_argument("topic", nargs="?", default="", help="the topic to show (default: none)")
    p.add_argument("--home", default=argparse.SUPPRESS, help="hostd folder (like HOSTD_HOME)")
    handlers["app"] = cmd_app


def problem(env: os._Environ[str] | dict[str, str] = os.environ) -> str | None:
    """Why the app cannot run here (one line with the fix), or None."""
    from hostd.cli.common import NO_DISPLAY, no_display

    if no_display(env):
        return f"{NO_DISPLAY}: run hostd app in a desktop session, or under xvfb-run"
    if sys.platform.startswith("linux") and not env.get("WAYLAND_DISPLAY"):
        import ctypes.util

        # Qt's X11 plugin needs these; without them Qt aborts the process with a long message.
        libs = {"xcb-cursor": "libxcb-cursor0", "xcb-icccm": "libxcb-icccm4", "xcb-keysyms": "libxcb-keysyms1"}
        missing = [pkg for lib, pkg in libs.items() if ctypes.util.find_library(lib) is None]
        if missing:
            return (f"Qt needs X11 libraries that are not installed: apt-get install {' '.join(missing)} "
                    "(or your distribution's xcb-cursor, xcb-icccm, xcb-keysyms)")
    try:
        import webview  # noqa: F401
        from qtpy import QtWebEngineWidgets  # noqa: F401
    except ImportError as exc:
        return (f"hostd app needs pywebview with its Qt backend ({exc}); "
                "install it with: pip install 'hostd[app]'")
    except Exception as exc:  # qtpy raises its own errors when no Qt binding is found
        return (f"hostd app cannot load Qt ({type(exc).__name__}: {exc}); "
                "install it with: pip install 'hostd[app]'")
    return None


def x_display_problem(display: str) -> str | None:
    """Why the X server at `display` cannot be reached, or None. Qt aborts the process
    (SIGABRT, six lines about platform plugins) when DISPLAY names a server that is gone: a
    stale DISPLAY in an ssh or tmux session, a stopped Xvfb. Asked the way Qt asks, through
    libxcb (which Qt's X11 plugin loads anyway)."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("xcb")
    if name is None:
        return None  # Qt says so itself; nothing to ask with
    xcb = ctypes.CDLL(name)
    xcb.xcb_connect.restype = ctypes.c_void_p
    xcb.xcb_connect.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
    xcb.xcb_connection_has_error.argtypes = [ctypes.c_void_p]
    xcb.xcb_disconnect.argtypes = [ctypes.c_void_p]
    conn = xcb.xcb_connect(display.encode(), None)
    try:
        failed = xcb.xcb_connection_has_error(conn) != 0
    finally:
        xcb.xcb_disconnect(conn)
    if failed:
        return (f"cannot reach the X display {display!r} (DISPLAY names no running X server): "
                "run hostd app in a desktop session, or under xvfb-run")
    return None


def cmd_app(args: argparse.Namespace) -> int:
    from hostd.cli.common import fail, paths_from
    from hostd_protocol.errors import HostdError

    paths = paths_from(args)
    try:
        paths.ensure()
    except HostdError as exc:
        return fail(exc.message)
    topic = args.topic
    if topic and not all(c.isalnum() or c in "-_" for c in topic):
        return fail(f"not a topic id: {topic!r}", 2)

    from hostd.app.instance import become_or_hand_over

    try:
        instance = become_or_hand_over(paths.runtime_dir, topic)
    except OSError as exc:
        return fail(f"another hostd app is running but did not answer ({exc.strerror or exc}); "
                    "close it and start again")
    if instance is None:
        print("hostd app: opened a new window in the running app", file=sys.stderr)
        return 0
    why = problem()
    if why is None and sys.platform.startswith("linux") and not os.environ.get("WAYLAND_DISPLAY"):
        why = x_display_problem(os.environ.get("DISPLAY", ""))
    if why is not None:
        instance.close()
        return fail(why)

    from hostd.app.main import App, static_ready

    if static_ready() is None:
        instance.close()
        return fail("the web page is not built into this install; run scripts/setup "
                    "(a checkout) or reinstall hostd from its wheel")
    App(paths).run(topic, instance=instance)
    # Every window is closed and our state saved. pywebview answers each JS call on a thread
    # that is not a daemon thread; one that was answering as its window closed waits forever
    # for a page that is gone, and a normal exit would wait for it (seen: SIGTERM left the app
    # running). Nothing of ours is left to finish, so end here.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
