"""`hostd drivers`: the installed drivers, whether each can answer, and which credential it uses.

The credential a driver uses is the one in the *daemon's* environment (or a login file):
the client passes nothing secret over the socket. So when the daemon runs, it is asked
(`ListDrivers`: the checks run with the environment its drivers get); when it does not, the
checks run here with this shell's environment, which is what a daemon started from this
shell (`hostd serve`, `--autostart`) would get. The output says which.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from hostd.cli.common import out, paths_from, print_json, text_table

#: What `hostd drivers` says of a driver without a default model (`DriverInfo.needs_model`).
NEEDS_MODEL = (
    "needs a model (it has no default): hostd new --driver {name} --model NAME, or an "
    "assistant or role that names one"
)


def register(sub: argparse._SubParsersAction, handlers: dict[str, Any]) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "drivers", help="list installed drivers: available?, which credential, what to fix"
    )
    p.add_argument("name", nargs="?", default="", help="show this driver's options")
    p.add_argument("--json", action="store_true", help="print JSON (for scripts)")
    handlers["drivers"] = run


def _local_infos() -> list[Any]:
    from hostd.shell.drivers.registry import DriverRegistry
    from hostd.shell.drivers.session import driver_env

    registry = DriverRegistry.discover()
    return registry.infos(lambda spec: driver_env(spec.env, os.environ, {}))


def _daemon_infos(args: argparse.Namespace) -> list[Any] | None:
    """The daemon's answer, or None when it is not running."""
    from hostd.client.sync_wire import DaemonNotRunning, WireClient
    from hostd_protocol.client_messages import ListDrivers

    try:
        with WireClient.open(paths_from(args), client_name="hostd-cli") as wire:
            result = wire.request(ListDrivers(id=0))
    except DaemonNotRunning:
        return None
    return list(result.drivers)


def _show_one(args: argparse.Namespace) -> int:
    """`hostd drivers NAME`: what the driver runs, the environment it gets, its options."""
    from hostd.cli.common import fail
    from hostd.shell.drivers.registry import DriverRegistry
    from hostd_protocol.errors import DriverUnavailable

    try:
        spec = DriverRegistry.discover().get(args.name)
    except DriverUnavailable as exc:
        return fail(exc.message)
    if getattr(args, "json", False):
        print_json({
            "name": spec.name, "version": spec.version, "description": spec.description,
            "module": spec.module, "env": list(spec.env), "env_options": list(spec.env_options),
            "needs_model": spec.needs_model,
            "secret_options": [*spec.secret_options, *spec.secret_file_options],
            "options": dict(spec.options_help),
        })
        return 0
    o = out()
    o.print(f"{spec.name} {spec.version}: {spec.description}", markup=False)
    o.print(f"runs: python -m {spec.module}", markup=False)
    if spec.needs_model:
        o.print(NEEDS_MODEL.format(name=spec.name), markup=False)
    if spec.env or spec.env_options:
        passed = ", ".join(spec.env)
        named = ", ".join(f"the variable named by `{opt}`" for opt in spec.env_options)
        o.print(f"environment passed on: {', '.join(x for x in (passed, named) if x)}",
                markup=False)
    if spec.secret_options or spec.secret_file_options:
        where = ", ".join(spec.secret_options)
        files = ", ".join(spec.secret_file_options)
        o.print(
            f"secrets by reference: ${{NAME}} in {where}"
            + (f" (or in the file {files} names)" if files else "")
            + " is the value of NAME from secrets.env in the config dir (NAME=value lines, "
            "mode 0600; `hostd paths` shows the dir), else from the daemon's environment. "
            "It goes to this driver's environment only, redacted from all it says, never "
            "stored in options, rows, the log or events. A server that refers to one is "
            "defined in an assistant file (a window may use it as written there); a "
            "window's own server with a reference is refused.",
            markup=False,
        )
    if not spec.options_help:
        o.print("options: (this driver documents none)", markup=False)
        return 0
    o.print(f"{spec.name} options (an assistant's [options]), or hostd new --option KEY=VALUE:",
            markup=False)
    o.print(text_table(("option", "meaning"), list(spec.options_help)), markup=False)
    return 0


def run(args: argparse.Namespace) -> int:
    if getattr(args, "name", ""):
        return _show_one(args)
    infos = _daemon_infos(args)
    where = "checked in the daemon's environment"
    if infos is None:
        infos = _local_infos()
        where = (
            "the daemon is not running: checked with this shell's environment (a daemon uses "
            "the environment it was started with)"
        )
    from hostd.shell.drivers.sandbox import probe

    # Whether a `confined` sandbox policy can run here (the same for every driver).
    sandbox = probe().summary()
    if getattr(args, "json", False):
        print_json({"drivers": infos, "checked_in": where, "sandbox": sandbox})
        return 0
    rows = []
    for info in infos:
        if not info.available:
            rows.append((info.name, "no", "-", info.reason))
            continue
        if not info.credential:
            credential = "-"
        elif info.credential_ok:
            credential = info.credential
        else:
            credential = f"NONE: {info.credential}"
        # Not ready: no login (claude-code), no agent found (acp), ...: the credential
        # column and the fix line say which.
        rows.append((info.name, "yes" if info.credential_ok else "no", credential,
                     info.description))
    o = out()
    o.print(text_table(("driver", "ready", "credential", "description / reason"), rows),
            markup=False)
    for info in infos:
        if info.fix:
            label = "fix" if not info.credential_ok else "warning"
            o.print(f"{info.name}: {label}: {info.fix}", markup=False)
        if info.available and info.needs_model:
            o.print(f"{info.name}: {NEEDS_MODEL.format(name=info.name)}", markup=False)
    o.print(f"sandbox (option sandbox=confined): {sandbox}", markup=False)
    o.print(f"({where})", markup=False)
    return 0
