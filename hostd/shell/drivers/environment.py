"""What a driver process's environment holds: the few variables every driver gets from the
daemon's (`MINIMAL_ENV`), the ones its spec names, and its secrets. Nothing else reaches it.

An option that *names* a variable (`DriverSpec.env_options`, e.g. the OpenAI driver's
`api_key_env`) is a way for whoever sets options to pick one variable of the daemon's
environment and have it sent to a server they also pick (`base_url`). Topic options come from
windows, i.e. any client of the socket, so such a name is honoured only when the local user
allowed it (`check_env_options`): one of the credential variables the spec itself declares
(`env`, e.g. `OPENAI_API_KEY`; not `HTTPS_PROXY`, which may carry a proxy password), or a value that option has in one of the user's assistant files
(`<config>/assistants/*.toml`, files only the user can write). Anything else is refused with
`PermissionDenied` when the topic is created, and again when a process would start (a topic
stored before the rule, a fork, an assistant file removed since).

The same holds for an option whose table becomes the environment of the tool that holds the
daemon's credential (`DriverSpec.env_option`, the Claude Code driver's `env`): an entry
there that changes where requests go or who can read them (`REDIRECT_ENV`: proxies, CA
bundles, preloads; the spec's `redirect_env`: `ANTHROPIC_BASE_URL`, ...) would send the
daemon's key or login to a server the window picked. Refused from a window; allowed with the
value an assistant file's table has for it (`ConfiguredVars("env.NAME")`). Likewise an option
that names where the credential's requests go (`DriverSpec.redirect_options`, the OpenAI
driver's `base_url`): from a window only when the daemon holds no credential the driver would
send, the topic sends none (`api_key_env = ""`), or an assistant file has that value.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

from hostd.core.redaction import is_credential_name
from hostd_protocol.driver_spec import DriverSpec
from hostd_protocol.errors import PermissionDenied

__all__ = ["MINIMAL_ENV", "REDIRECT_ENV", "ConfiguredVars", "check_env_options", "driver_env"]

#: The variables the local user's configuration names for a driver option (option name ->
#: the values that option has in the assistant files).
ConfiguredVars = Callable[[str], Collection[str]]


#: Variables (compared upper-cased) that, set by a window in a driver's `env_option` table,
#: would send what the tool sends (the daemon's credential) elsewhere, or let someone else
#: read or rewrite it on the way: proxies, the TLS trust, code preloaded into the tool.
REDIRECT_ENV: frozenset[str] = frozenset({
    "HTTPS_PROXY",
    "HTTP_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "NODE_EXTRA_CA_CERTS",
    "NODE_TLS_REJECT_UNAUTHORIZED",
    "NODE_OPTIONS",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "LD_PRELOAD",
    "LD_AUDIT",
    "LD_LIBRARY_PATH",
})


#: Variables a driver gets from the daemon's environment without asking: enough to run a
#: Python interpreter and find its packages, nothing that could carry a credential. No
#: PYTHON* variable: drivers run isolated (`DriverSpec.argv`), and a Python child a driver
#: starts must not inherit a path into a planted directory either.
MINIMAL_ENV: tuple[str, ...] = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "LANGUAGE",
    "LC_ALL",
    "LC_CTYPE",
    "LC_MESSAGES",
    "TZ",
    "TMPDIR",
    "TEMP",
    "TMP",
    "SYSTEMROOT",
    "VIRTUAL_ENV",
)


def driver_env(
    needs: Iterable[str], base_env: Mapping[str, str], secrets: Mapping[str, str]
) -> dict[str, str]:
    """The environment of one driver: `MINIMAL_ENV`, the variables its spec names, its secrets.

    A variable the spec names but the daemon does not have is simply absent: the driver
    reports missing credentials itself (`DriverFatal`), with a message that says which.
    """
    env = {name: base_env[name] for name in MINIMAL_ENV if name in base_env}
    env.setdefault("PATH", os.defpath)
    for name in needs:
        if name in base_env:
            env[name] = base_env[name]
    env.update(secrets)
    return env


def check_env_options(
    spec: DriverSpec,
    options: Mapping[str, Any],
    configured: ConfiguredVars,
    environ: Mapping[str, str] | None = None,
) -> None:
    """Raise `PermissionDenied` when an option of `spec.env_options` in `options` names a
    variable the local user did not allow (see the module docstring); "" (no variable) and an
    absent option are always fine. With `environ` (the daemon's environment), also the
    `redirect_options` rule (see `_check_redirect_options`)."""
    own = [name for name in spec.env if is_credential_name(name)]
    for option in spec.env_options:
        value = options.get(option)
        if value is None or value == "" or value in own:
            continue
        if isinstance(value, str) and value in configured(option):
            continue
        declared = " or ".join([*own, '""'])
        raise PermissionDenied(
            f"{option} = {value!r} is not allowed for driver {spec.name!r}: options from a "
            f"window may name {declared}, or a variable an assistant file names (add "
            f"`{option} = {value!r}` to the [options] of an assistant in the config dir's "
            "assistants/; `hostd paths` shows where)",
            details={"driver": spec.name, "option": option, "variable": str(value)},
        )
    _check_redirects(spec, options, configured)
    if environ is not None:
        _check_redirect_options(spec, options, configured, environ)


def _check_redirect_options(
    spec: DriverSpec,
    options: Mapping[str, Any],
    configured: ConfiguredVars,
    environ: Mapping[str, str],
) -> None:
    """`PermissionDenied` for a `spec.redirect_options` option (openai: `base_url`) a window
    set while the driver would send it a credential the daemon holds: a variable of
    `spec.env_names(options)` that looks like a credential and is set. Fine when an
    `env_options` option is "" (the driver sends no key) or an assistant file has the value."""
    if any(options.get(option) == "" for option in spec.env_options):
        return
    held = [n for n in spec.env_names(options) if is_credential_name(n) and environ.get(n)]
    if not held:
        return
    for option in spec.redirect_options:
        value = options.get(option)
        if value is None or value == "" or (isinstance(value, str) and value in configured(option)):
            continue
        keys = " or ".join(f"`{o} = \"\"`" for o in spec.env_options) or "no key"
        raise PermissionDenied(
            f"{option} {value!r} from a window would receive the daemon's {held[0]}: for a "
            f"server without a key set {keys}, else set {option} in the [options] of an "
            "assistant in the config dir's assistants/ (`hostd paths` shows where)",
            details={"driver": spec.name, "option": option, "variable": held[0]},
        )


def _check_redirects(
    spec: DriverSpec, options: Mapping[str, Any], configured: ConfiguredVars
) -> None:
    """`PermissionDenied` for an entry of `spec.env_option`'s table that redirects the
    credential (see the module docstring), unless an assistant file sets the same value."""
    table = options.get(spec.env_option) if spec.env_option else None
    if not isinstance(table, Mapping):
        return  # absent, or a wrong type the options check refuses
    redirects = REDIRECT_ENV | {name.upper() for name in spec.redirect_env}
    for name, value in table.items():
        if not isinstance(name, str) or name.upper() not in redirects:
            continue
        if isinstance(value, str) and value in configured(f"{spec.env_option}.{name}"):
            continue
        raise PermissionDenied(
            f"{spec.env_option} {name} is not allowed for driver {spec.name!r} from a window: "
            "it changes where the daemon's credential goes; set it in the "
            f"[options.{spec.env_option}] of an assistant in the config dir's assistants/ "
            "(`hostd paths` shows where)",
            details={"driver": spec.name, "option": spec.env_option, "variable": name},
        )
