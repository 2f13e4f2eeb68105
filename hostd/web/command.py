"""The `hostd web` command: argument parser (light) and the command itself."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def register(sub: argparse._SubParsersAction, handlers: dict) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "web",
        help="serve the web UI on 127.0.0.1 (token-protected) and print its URL",
    )
    p.add_argument("--home", default=argparse.SUPPRESS, help="hostd folder (like HOSTD_HOME)")
    p.add_argument("--autostart", action="store_true", default=argparse.SUPPRESS,
                   help="start the daemon if it is not running")
    p.add_argument("--port", type=int, default=0,
                   help="port on 127.0.0.1 (default: a free one); on a fixed port the token is "
                        "kept across restarts, so open pages reconnect")
    p.add_argument("--new-token", action="store_true",
                   help="with --port: replace the kept token (open pages must load the new URL)")
    p.add_argument("--open", action="store_true", help="open the page in the default browser")
    p.add_argument("--app", action="store_true",
                   help="open the page as an app window (no tabs, no address bar) of a "
                        "Chromium-family browser (HOSTD_WEB_BROWSER names one)")
    p.add_argument("--token-file", default=None,
                   help="where to write the URL with the token, mode 0600 "
                        "(default: web-url in the hostd runtime folder)")
    handlers["web"] = cmd_web


def cmd_web(args: argparse.Namespace) -> int:
    import trio

    from hostd.cli.common import NO_DISPLAY, fail, no_display, paths_from
    from hostd.web import STATIC_DIR
    from hostd.web.gateway import Gateway, run_until_signal
    from hostd.web.security import port_token
    from hostd_protocol.errors import HostdError

    if not 0 <= args.port <= 65535:
        return fail(f"--port must be between 0 and 65535, not {args.port}", 2)
    paths = paths_from(args)
    try:
        paths.ensure()
    except HostdError as exc:
        return fail(exc.message)
    token_file = Path(args.token_file) if args.token_file else paths.runtime_dir / "web-url"
    app_page = paths.runtime_dir / "web-open.html"
    token = None
    if args.port:
        try:
            token = port_token(paths.data_dir / "web" / f"token-{args.port}", renew=args.new_token)
        except OSError as exc:
            return fail(f"cannot keep the web token in {paths.data_dir / 'web'}: {exc.strerror or exc}")
    if not (STATIC_DIR / "index.html").is_file():
        print("hostd web: warning: the page is not built (run scripts/setup); "
              "only the WebSocket works", file=sys.stderr)

    autostart = getattr(args, "autostart", False)
    if not autostart and not _daemon_listens(paths.socket_path):
        home = f" --home {paths.home}" if paths.home else ""
        print(f"hostd web: warning: hostd is not running; the page stays offline until it is "
              f"(`hostd serve --detach{home}`, or `hostd web --autostart`)", file=sys.stderr)

    def ready(gateway: Gateway) -> None:
        print(f"hostd web: {gateway.url}", flush=True)
        print(f"hostd web: the URL is also in {token_file} (mode 0600); Ctrl-C stops",
              file=sys.stderr, flush=True)
        if (args.app or args.open) and no_display() and not (args.open and os.environ.get("BROWSER")):
            # A browser started here would die at once, unseen (or a text browser would take
            # over this terminal); $BROWSER is the user's own choice and goes ahead.
            print(f"hostd web: cannot open a window: {NO_DISPLAY}; open the URL above in a "
                  "browser", file=sys.stderr, flush=True)
            return
        if args.app:
            from hostd.web.app_window import find_chromium, open_app_window, write_redirect

            browser = find_chromium()
            if browser is not None:
                write_redirect(app_page, gateway.url)
                open_app_window(browser, app_page)
                return
            print("hostd web: no Chromium-family browser found for --app (chromium, google-chrome, "
                  "microsoft-edge, brave-browser, vivaldi; or set HOSTD_WEB_BROWSER); "
                  "opening the page in the default browser", file=sys.stderr, flush=True)
        if args.open or args.app:
            import webbrowser

            if not webbrowser.open(gateway.url):
                print("hostd web: no browser found to open the page; open the URL above in one",
                      file=sys.stderr, flush=True)

    try:
        trio.run(lambda: run_until_signal(
            paths, port=args.port, autostart=autostart, token=token,
            token_file=token_file, on_ready=ready,
        ))
    except OSError as exc:
        return _serve_failed(exc, args.port)
    except BaseExceptionGroup as group:
        # A bind error surfaces through the server's nurseries, wrapped once per nursery.
        oserrors, _ = group.split(OSError)
        if oserrors is None:
            raise
        leaf: BaseException = oserrors
        while isinstance(leaf, BaseExceptionGroup):
            leaf = leaf.exceptions[0]
        assert isinstance(leaf, OSError)
        return _serve_failed(leaf, args.port)
    finally:
        app_page.unlink(missing_ok=True)
    return 0


def _daemon_listens(socket_path: Path) -> bool:
    """One connect attempt: does something serve the daemon's socket right now?"""
    from hostd.client.sync_wire import connect_unix

    try:
        connect_unix(socket_path).close()
    except OSError:
        return False
    return True


def _serve_failed(exc: OSError, port: int) -> int:
    """One line for an OSError that ended the gateway: a file it could not write (the URL
    file, which names one) or the port it could not serve on (which does not)."""
    from hostd.cli.common import fail

    if exc.filename is not None:
        return fail(f"cannot write the URL file {exc.filename}: {exc.strerror or exc}")
    return fail(f"cannot serve on 127.0.0.1:{port}: {exc.strerror or exc}")
