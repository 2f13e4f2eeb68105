"""How a driver distribution tells hostd what it is and how to launch it.

A driver distribution declares an entry point in the group `hostd.drivers` whose value is a
`DriverSpec`, e.g. in its pyproject.toml:

    [project.entry-points."hostd.drivers"]
    scripted = "hostd_scripted.spec:SPEC"

The module holding the spec must import quickly and must not import the vendor SDK: the
daemon loads every spec at start-up to list drivers.
"""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Mapping
from typing import Any, Literal

import msgspec

from hostd_protocol.common import DriverMode

ENTRY_POINT_GROUP = "hostd.drivers"

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")


class CredentialStatus(msgspec.Struct, frozen=True, kw_only=True):
    """What a driver's credential check found (see `DriverSpec.check`)."""

    #: A credential was found (the driver should be able to answer).
    ok: bool
    #: Which credential, in words ("API key (ANTHROPIC_API_KEY ...)"), or "not logged in".
    summary: str = ""
    #: When not ok: the one thing to do about it.
    fix: str = ""
    #: A problem worth saying although the credential works (e.g. a world-readable file).
    warning: str = ""


class ProxiedCredential(msgspec.Struct, frozen=True, kw_only=True):
    """A credential the daemon keeps out of a confined sandbox (`DriverSpec.credential_proxy`).

    The driver gets `key_env` = a per-session placeholder and `base_url_env` = the URL of the
    daemon's credential proxy as the sandbox sees it; the proxy swaps the placeholder for
    `value` in `header` and forwards to `upstream` only.
    """

    #: The vendor API's base URL (e.g. https://api.anthropic.com).
    upstream: str
    #: The header that carries the credential upstream (e.g. `x-api-key`).
    header: str
    value: str = msgspec.field(default="")
    #: The variable the driver reads its base URL from (set to the proxy's).
    base_url_env: str
    #: The variable the driver reads its key from (set to the placeholder).
    key_env: str
    #: Variables that must not reach the sandbox (other credentials the spec passes).
    remove_env: tuple[str, ...] = ()
    #: Bound read-only instead of `DriverSpec.sandbox_read` (which names the files the key
    #: may come from, e.g. `~/.claude.json`).
    sandbox_read: tuple[str, ...] = ()

    def __repr__(self) -> str:  # never the value
        return f"ProxiedCredential(upstream={self.upstream!r}, header={self.header!r})"


class DriverSpec(msgspec.Struct, frozen=True, kw_only=True):
    """What a driver is and how to start it."""

    name: str
    #: Module run as `python -I -m <module>` with the daemon's interpreter.
    module: str
    description: str = ""
    version: str = ""
    #: Environment variables the driver needs from the daemon's environment or its config
    #: (API keys, base URLs). Only these are passed on; nothing else of the daemon's.
    env: tuple[str, ...] = ()
    #: Extra argv after `-m module`.
    args: tuple[str, ...] = ()
    #: Driver options whose value *names* one more variable to pass on (e.g. `api_key_env`:
    #: an assistant says which variable holds its key). Only that variable, only to this
    #: driver; a value that is not a plain variable name is ignored. The daemon honours a
    #: name only when the local user allowed it: a credential variable of `env`, or a value
    #: the option has in one of the user's assistant files (else `PermissionDenied`).
    env_options: tuple[str, ...] = ()
    #: Driver options whose values (strings anywhere inside them) may refer to secrets as
    #: `${NAME}` (`hostd_protocol.secret_refs`): the daemon passes each variable referred to,
    #: from `<config>/secrets.env` (mode 0600) or its own environment, to this driver only,
    #: redacts its value from everything the driver says, and never stores it; the driver
    #: resolves the references in memory. A name is honoured only when `secrets.env` defines
    #: it or one of the user's assistant files refers to it (else `PermissionDenied`).
    secret_options: tuple[str, ...] = ()
    #: Driver options naming a file (e.g. an `mcp.json`) whose `${NAME}` references count
    #: like those of `secret_options`.
    secret_file_options: tuple[str, ...] = ()
    #: (option, one-line help) pairs for `Init.options`, shown by `hostd drivers NAME`.
    #: Without `options_type` these names are the options the daemon accepts for a topic;
    #: a driver that declares neither takes no options (`check_options`).
    options_help: tuple[tuple[str, str], ...] = ()
    #: Optional "module:Struct": the msgspec Struct of `Init.options`. The daemon then checks a
    #: topic's options when it is created (unknown names, wrong types, values outside a
    #: Literal's choices) instead of the driver failing at the first turn. The module must
    #: import quickly (no vendor SDK).
    options_type: str = ""
    #: Modes the driver switches between per message (`Send.options[mode_option]` = a mode
    #: id), the first one its default; `hostd acp` offers them as ACP session modes.
    modes: tuple[DriverMode, ...] = ()
    mode_option: str = ""
    #: The option that takes MCP servers ("" = the driver takes none) and its shape: "acp"
    #: (a list as ACP's `mcpServers`) or "mcp.json" (an object name -> {command, args, env}
    #: or {url, headers, type}, as Claude Desktop / Cursor write it). `hostd acp` passes an
    #: editor's MCP servers there.
    mcp_option: str = ""
    mcp_format: Literal["", "acp", "mcp.json"] = ""
    #: True when the driver hands a message's images (`Send.attachments`, protocol 1.5) to
    #: its model; windows offer images only then (`hostd acp` advertises image prompts).
    images: bool = False
    #: True when the driver has no default model (an OpenAI-compatible server serves many):
    #: the daemon then refuses a topic (or an extra answer) whose model resolves to nothing
    #: when it is created, not at its first message.
    needs_model: bool = False
    #: The option whose table of strings is added to the environment of the tool the driver
    #: runs with the daemon's credential (claude-code: `env`), and the variables in it that
    #: change where that credential goes (`ANTHROPIC_BASE_URL`, ...). The daemon refuses
    #: those (and proxies, CA bundles, preloads, whatever the driver) from a window; an
    #: assistant file may set them (`hostd.shell.drivers.window_options`).
    env_option: str = ""
    redirect_env: tuple[str, ...] = ()
    #: Options naming where the requests carrying the daemon's credential go, or what they
    #: carry (openai: `base_url`, `headers`: a `Host` header routes them elsewhere). From a window only when the daemon holds no credential the driver would
    #: send (none is set, or an `env_options` option is "": no key), or with a value an
    #: assistant file has.
    redirect_options: tuple[str, ...] = ()
    #: Options only an assistant file may set (claude-code: `cli_path`, a program the driver
    #: runs with its whole environment, keys included): refused from a window unless an
    #: assistant file has the same value.
    assistant_only: tuple[str, ...] = ()
    #: A list option naming where the tool loads the working folder's own configuration
    #: (claude-code `setting_sources`): a repository's settings can run programs on the
    #: host and send the key elsewhere, and a repository is data only. `folder_values` are
    #: the list items that load it (null: all of them). The driver's default leaves them
    #: out; a confined topic with its own network (key behind the credential proxy, programs
    #: in the sandbox) gets `confined_folder_values` when the option is not set. From a
    #: window they are refused on any other topic, unless an assistant file has the same value
    #: (`hostd.shell.drivers.window_options`).
    folder_option: str = ""
    folder_values: tuple[str, ...] = ()
    confined_folder_values: tuple[str, ...] = ()

    def env_names(self, options: Mapping[str, Any]) -> list[str]:
        """The variables this driver gets for these options: `env` plus those `env_options`
        name."""
        names = list(self.env)
        for option in self.env_options:
            value = options.get(option)
            if isinstance(value, str) and _ENV_NAME.match(value) and value not in names:
                names.append(value)
        return names

    #: Under a confined sandbox policy: paths outside the working directory this driver needs
    #: to read (its login or config), e.g. `~/.claude` or `$CLAUDE_CONFIG_DIR`; `~` and
    #: `$NAME` expand against the driver's environment, a path naming an unset variable is
    #: skipped. The user's home is otherwise hidden. The interpreter and its packages are
    #: always visible; nothing needs declaring for them.
    sandbox_read: tuple[str, ...] = ()
    #: Like `sandbox_read`, but writable (a cache the driver must keep between runs).
    sandbox_write: tuple[str, ...] = ()

    def sandbox_paths(self, environ: Mapping[str, str]) -> tuple[list[str], list[str]]:
        """(read-only, read-write) absolute paths of `sandbox_read` / `sandbox_write`."""
        return _expand_all(self.sandbox_read, environ), _expand_all(self.sandbox_write, environ)

    #: Optional credential check, "module:function": called in the daemon with the
    #: environment the driver would get (a `Mapping[str, str]`), returns a
    #: `CredentialStatus`. Must be quick, offline, and import nothing heavy.
    check: str = ""

    #: Optional "module:function" called in the daemon with (the driver's environment, the
    #: session's options) before a confined session starts: a `ProxiedCredential` when the
    #: credential it would use can be kept out of the sandbox (see `ProxiedCredential`),
    #: None to run as without. Quick, offline, no heavy import.
    credential_proxy: str = ""

    def proxied_credential(
        self, environ: Mapping[str, str], options: Mapping[str, Any]
    ) -> ProxiedCredential | None:
        """Run `credential_proxy` (None when the driver declares none). Raises what the
        function raises: the caller must not start a session it cannot confine as asked."""
        if not self.credential_proxy:
            return None
        module, _, name = self.credential_proxy.partition(":")
        result = getattr(importlib.import_module(module), name)(environ, options)
        if result is not None and not isinstance(result, ProxiedCredential):
            raise TypeError(f"{self.credential_proxy} returned {type(result).__name__}")
        return result

    def check_options(self, options: Mapping[str, Any]) -> None:
        """Raise `InvalidArgument` when `options` are not what this driver declares: with
        `options_type`, an unknown name (listing the known ones and the closest) or a bad
        value; with only `options_help`, an unknown name; with neither, any option at all (a
        driver that declares none takes none, rather than silently ignoring a typo)."""
        if not options:
            return
        from hostd_protocol.errors import InvalidArgument

        struct: Any = None
        if self.options_type:
            module, _, name = self.options_type.partition(":")
            try:
                struct = getattr(importlib.import_module(module), name)
                known = list(struct.__struct_encode_fields__)  # as options spell them
            except Exception:
                return  # the driver checks its options itself at init
        else:
            known = [option for option, _ in self.options_help]
        unknown = sorted(k for k in options if k not in known)
        if unknown and not known:
            raise InvalidArgument(
                f"driver {self.name!r} takes no options (it declares none), so "
                f"{', '.join(repr(k) for k in unknown)} would be ignored; remove "
                f"{'it' if len(unknown) == 1 else 'them'}",
                details={"driver": self.name, "unknown": unknown, "known": []},
            )
        if unknown:
            import difflib

            close = difflib.get_close_matches(unknown[0], known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise InvalidArgument(
                f"unknown option {unknown[0]!r} for driver {self.name!r}{hint}; known options: "
                f"{', '.join(sorted(known))} (`hostd drivers {self.name}` explains them)",
                details={"driver": self.name, "unknown": unknown, "known": sorted(known)},
            )
        if struct is None:
            return
        try:
            msgspec.convert(dict(options), struct, strict=False)
        except msgspec.ValidationError as exc:
            raise InvalidArgument(
                f"invalid option for driver {self.name!r}: {exc}",
                details={"driver": self.name},
            ) from None

    def check_credentials(self, environ: Mapping[str, str]) -> CredentialStatus | None:
        """Run `check` (None when the driver declares none). A check that fails to load or
        raises is reported as a failed check, never raised."""
        if not self.check:
            return None
        module, _, name = self.check.partition(":")
        try:
            fn = getattr(importlib.import_module(module), name)
            status = fn(environ)
        except Exception as exc:
            return CredentialStatus(
                ok=False, summary=f"credential check {self.check!r} failed: {exc}"
            )
        if not isinstance(status, CredentialStatus):
            return CredentialStatus(
                ok=False, summary=f"credential check {self.check!r} returned {status!r}"
            )
        return status

    def argv(self, python: str | None = None) -> list[str]:
        """The command line that starts this driver.

        Isolated mode (`-I` = `-E -P -s`): a driver runs in the topic's working directory,
        which is a repository the user opened, i.e. data. Without it, a `trio.py` there would
        shadow the real one (the cwd is `sys.path[0]` for `-m`), and `PYTHONPATH`,
        `PYTHONSTARTUP` or a user site dir could run code with the driver's credentials.
        The driver still finds its own packages: they are installed in the interpreter's
        site-packages (editable installs included, through their `.pth` files).
        """
        return [python or sys.executable, "-I", "-m", self.module, *self.args]


_VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


def _expand(path: str, environ: Mapping[str, str]) -> str | None:
    missing = False

    def sub(m: re.Match[str]) -> str:
        nonlocal missing
        value = environ.get(m.group(1) or m.group(2), "")
        missing = missing or not value
        return value

    out = _VAR.sub(sub, path)
    if out == "~" or out.startswith("~/"):
        home = environ.get("HOME", "")
        missing = missing or not home
        out = home + out[1:]
    if missing or not out.startswith("/"):
        return None
    return out


def _expand_all(paths: tuple[str, ...], environ: Mapping[str, str]) -> list[str]:
    return [p for p in (_expand(x, environ) for x in paths) if p is not None]
