"""`hostd service install | uninstall | show`: run the daemon as a per-user service.

Linux: a systemd user unit (`~/.config/systemd/user/hostd.service`), enabled and started with
`systemctl --user` when systemd is there. macOS: a launchd agent
(`~/Library/LaunchAgents/dev.hostd.plist`), loaded with `launchctl`. The unit runs this
interpreter's `-m hostd serve` in the foreground (the service manager is the supervisor), with
the environment the command runs in for `HOSTD_HOME` only: credentials come from the login
files, or an `Environment=` line the user adds (see docs/configuration.md).

Not socket-activated: the daemon binds its own socket (it checks the runtime dir's owner and
mode first); the service starts it at login instead, and `--autostart` covers the rest.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from hostd.cli.common import fail, out
from hostd_protocol import child_process

UNIT_NAME = "hostd.service"
LAUNCHD_LABEL = "dev.hostd"


def register(sub: argparse._SubParsersAction, handlers: dict[str, Any]) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("service", help="run the daemon as a user service (systemd / launchd)")
    p.add_argument("action", choices=["install", "uninstall", "show"],
                   help="install (write, enable, start), uninstall, or show the unit file")
    p.add_argument("--no-start", action="store_true",
                   help="install: write the file only (do not enable or start it)")
    p.add_argument("--dir", default=None, metavar="DIR",
                   help="write the unit into DIR instead of the user's service folder")
    handlers["service"] = run


def unit_text(python: str, home: str | None) -> str:
    """The systemd user unit that runs `python -m hostd serve`."""
    env = f"Environment=HOSTD_HOME={home}\n" if home else ""
    return (
        "[Unit]\n"
        "Description=hostd: local agent host daemon\n"
        "\n"
        "[Service]\n"
        "Type=simple\n"
        f"ExecStart={python} -m hostd serve\n"
        "ExecStop=/bin/kill -TERM $MAINPID\n"
        f"{env}"
        "Restart=on-failure\n"
        "RestartSec=2\n"
        # The daemon stops its turns and flushes its store on SIGTERM (see `hostd stop`).
        "TimeoutStopSec=20\n"
        "\n"
        "[Install]\n"
        "WantedBy=default.target\n"
    )


def plist_text(python: str, home: str | None) -> str:
    """The launchd agent that runs `python -m hostd serve` at login."""
    env = (
        "  <key>EnvironmentVariables</key>\n"
        f"  <dict><key>HOSTD_HOME</key><string>{home}</string></dict>\n"
        if home
        else ""
    )
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" '
        '"http://www.apple.com/DTDs/PropertyList-1.0.dtd">\n'
        '<plist version="1.0">\n<dict>\n'
        f"  <key>Label</key><string>{LAUNCHD_LABEL}</string>\n"
        "  <key>ProgramArguments</key>\n"
        f"  <array><string>{python}</string><string>-m</string><string>hostd</string>"
        "<string>serve</string></array>\n"
        f"{env}"
        "  <key>RunAtLoad</key><true/>\n"
        "  <key>KeepAlive</key><dict><key>SuccessfulExit</key><false/></dict>\n"
        "</dict>\n</plist>\n"
    )


def _target(args: argparse.Namespace) -> tuple[Path, str]:
    home = getattr(args, "home", None) or os.environ.get("HOSTD_HOME") or None
    home = str(Path(home).expanduser().absolute()) if home else None
    if sys.platform == "darwin":
        folder = Path(args.dir) if args.dir else Path.home() / "Library" / "LaunchAgents"
        return folder / f"{LAUNCHD_LABEL}.plist", plist_text(sys.executable, home)
    if args.dir:
        folder = Path(args.dir)
    else:
        config = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
        folder = Path(config) / "systemd" / "user"
    return folder / UNIT_NAME, unit_text(sys.executable, home)


def _run(argv: list[str]) -> str | None:
    """Run a service-manager command; None on success, else why it failed (one line)."""
    try:
        proc = child_process.run(argv, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{' '.join(argv)}: {exc}"
    if proc.returncode != 0:
        why = (proc.stderr or proc.stdout).decode(errors="replace").strip().splitlines()
        return f"{' '.join(argv)} failed: {why[0] if why else f'exit code {proc.returncode}'}"
    return None


def run(args: argparse.Namespace) -> int:
    path, text = _target(args)
    if args.action == "show":
        out().print(f"# {path}\n{text}", markup=False, end="")
        return 0
    darwin = sys.platform == "darwin"
    manager = shutil.which("launchctl" if darwin else "systemctl")
    manage = manager is not None and not args.dir and not args.no_start
    if args.action == "install":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        out().print(f"wrote {path}", markup=False)
        if not manage:
            if not args.dir and not args.no_start:
                out().print("no service manager found: start it with `hostd serve --detach`",
                            markup=False)
            return 0
        steps = (
            [["launchctl", "load", "-w", str(path)]]
            if darwin
            else [["systemctl", "--user", "daemon-reload"],
                  ["systemctl", "--user", "enable", "--now", UNIT_NAME]]
        )
        for argv in steps:
            why = _run(argv)
            if why is not None:
                return fail(f"{why} (the unit is written; fix that and run it again)")
        out().print("hostd runs as a user service (starts at login); `hostd status` to check",
                    markup=False)
        return 0
    # uninstall
    if manage:
        steps = (
            [["launchctl", "unload", "-w", str(path)]]
            if darwin
            else [["systemctl", "--user", "disable", "--now", UNIT_NAME]]
        )
        for argv in steps:
            why = _run(argv)
            if why is not None and path.exists():
                return fail(why)
    if path.exists():
        path.unlink()
        out().print(f"removed {path}", markup=False)
    else:
        out().print(f"no service installed ({path} does not exist)", markup=False)
    if manage and not darwin:
        _run(["systemctl", "--user", "daemon-reload"])
    return 0
