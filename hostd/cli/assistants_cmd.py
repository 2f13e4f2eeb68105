"""`hostd assistants`: list the configured assistants and how their models resolve.

Reads `<config>/assistants/*.toml` and `<config>/roles.toml` directly (no daemon needed), so a
broken file can be fixed before the daemon ever sees it. Every bad file is reported as
`file:line: message`; the exit status is 1 when any file is bad.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

Handler = Callable[[argparse.Namespace], int]


def register(sub: argparse._SubParsersAction, handlers: dict[str, Handler]) -> None:  # type: ignore[type-arg]
    """Add the `assistants` command to the `hostd` parser."""
    p = sub.add_parser(
        "assistants", help="list assistants (config dir) and the driver/model each resolves to"
    )
    # `--home` is the global `hostd --home DIR` option (a sub-option would shadow it).
    p.add_argument("--config-dir", default=None, help="read this config folder instead")
    p.add_argument("--profile", default="", help="resolve `use::<role>` models for this profile")
    handlers["assistants"] = run


def config_dir_of(args: argparse.Namespace) -> Path:
    if getattr(args, "config_dir", None):
        return Path(args.config_dir).expanduser()
    from hostd.shell.paths import Paths

    return Paths.from_env(getattr(args, "home", None)).config_dir


def _bare_topic(roles: object, profile: str) -> tuple[str, str]:
    """What the built-in `default` assistant (a topic that names nothing) runs on: the
    `default` role, else the built-in default driver (checked with this shell's environment: the daemon uses its own)."""
    from rich.markup import escape

    from hostd.core.assistants import RolesConfig, default_assistant
    from hostd.core.connector import resolve_connector
    from hostd.shell.drivers.registry import DriverRegistry
    from hostd.shell.drivers.session import driver_env
    from hostd_protocol.errors import ConfigError, HostdError

    assert isinstance(roles, RolesConfig)
    try:
        conn = resolve_connector(default_assistant(), roles, profile=profile)
        via = "[dim](default role)[/dim]"
        return f"{escape(conn.driver)} / {escape(conn.model or '(default)')} {via}", ""
    except ConfigError:
        pass
    import os

    try:
        name = DriverRegistry.discover().pick_default(lambda s: driver_env(s.env, os.environ, {}))
    except HostdError as exc:
        return "[red]no driver is ready[/red]", exc.message
    return f"{escape(name)} / (default) [dim](built-in default)[/dim]", ""


def run(args: argparse.Namespace, console: Console | None = None) -> int:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from hostd.core.assistants import DEFAULT_ASSISTANT_NAME, DEFAULT_HISTORY_SIZE
    from hostd.core.connector import has_file, resolve_connector
    from hostd.shell.config import load_assistants, load_roles
    from hostd_protocol.errors import ConfigError

    console = console or Console()
    config = config_dir_of(args)
    catalog = load_assistants(config)
    errors: list[ConfigError] = list(catalog.errors)
    try:
        roles = load_roles(config)
    except ConfigError as exc:
        errors.append(exc)
        roles = None

    table = Table(title=f"hostd assistants ({config / 'assistants'})")
    for column in ("assistant", "driver / model", "workdir", "history", "hooks", "description"):
        table.add_column(column)
    for name, cfg in sorted(catalog.assistants.items()):
        if roles is None:
            resolved = f"{cfg.driver or '?'} / {cfg.model or '?'} (roles.toml is broken)"
        else:
            try:
                conn = resolve_connector(cfg, roles, profile=args.profile)
                via = f" [dim]({cfg.model} via {conn.tier})[/dim]" if conn.role else ""
                resolved = f"{escape(conn.driver)} / {escape(conn.model or '(default)')}{via}"
            except ConfigError as exc:
                resolved = f"[red]{escape(exc.message)}[/red]"
        workdir = cfg.workdir.policy + (f" {cfg.workdir.path}" if cfg.workdir.path else "")
        hooks = ", ".join(
            f"{kind}={spec}"
            for kind, spec in (("create", cfg.create_hook), ("next", cfg.next_hook))
            if spec
        )
        table.add_row(
            escape(name),
            resolved,
            escape(workdir),
            str(cfg.history_size),
            escape(hooks),
            escape(cfg.description),
        )
    note = ""
    if roles is not None and not has_file(catalog, DEFAULT_ASSISTANT_NAME):
        # The built-in `default` (a file of that name replaces it): what a topic that names
        # no assistant runs on, and what `--assistant default` means.
        cell, note = _bare_topic(roles, args.profile)
        table.add_row(f"{DEFAULT_ASSISTANT_NAME} [dim](built-in)[/dim]", cell, "per-topic",
                      str(DEFAULT_HISTORY_SIZE), "", "topics without --assistant")
    console.print(table)
    if note:
        console.print(f"[red]no default:[/red] {escape(note)}")
    if not catalog.assistants and not catalog.errors:
        console.print(
            f"no assistants yet: add TOML files to {config / 'assistants'} (e.g. "
            'coder.toml with driver = "NAME", model = "MODEL", system_prompt = "...")'
        )
    for err in errors:
        console.print(f"[red]error:[/red] {escape(err.message)}")
    return 1 if errors else 0
