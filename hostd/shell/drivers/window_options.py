"""What a window may set in a driver's options, and what only the local user's configuration
(an assistant file in `<config>/assistants/`, which only the user can write) may set.

A window is any client of the daemon's socket: the CLI, the web page (a browser tab holding
the gateway's token), `hostd acp` (an editor). Whoever sets a topic's options must not be
able to take the daemon's credentials: point the requests that carry a key at a server of
their choosing, pick which of the daemon's variables is sent as a key, or have the driver
run a program of their choosing with the key in its environment. This module is the one
place that says which options those are; the driver's spec declares them:

- `DriverSpec.env_options` (openai `api_key_env`): an option that *names* a variable. From a
  window only a credential variable the spec declares itself (`OPENAI_API_KEY`) or "" (none).
- `DriverSpec.env_option` (claude-code `env`): the table added to the environment of the tool
  holding the credential. Refused there: `REDIRECT_ENV` and `REDIRECT_ENV_ENDINGS` (proxies,
  base URLs, endpoints, CA bundles, TLS switches, preloads, config locations that can set any
  of these) and the spec's `redirect_env`.
- `DriverSpec.redirect_options` (openai `base_url`, `headers`): where the key's requests go
  and what they carry (a `Host` header routes them elsewhere). From a window only when the
  driver would send no key the daemon holds (none is set, or `api_key_env = ""`).
- `DriverSpec.assistant_only` (claude-code `cli_path`): an executable the driver runs with
  its whole environment. Never from a window.

Each is fine with a value an assistant file has for the same option (`ConfiguredValues`):
the user chose it. A refusal is `PermissionDenied`, one line that says where to put the
value instead. Checked when a topic is created, when a message is accepted (its per-message
options over the topic's), before a `Send` reaches a driver, and before a process starts (a
topic stored before a rule, a fork, an assistant file removed since).

- `DriverSpec.folder_option` (claude-code `setting_sources`): loading the working folder's
  own settings (`folder_values`: "project", "local"; null loads all). A repository's
  `.claude/settings.json` can set `ANTHROPIC_BASE_URL` or run hooks with the key in their
  environment, unasked: a repository is data only. Off by default (the driver's default);
  a confined topic with its own network (not "shared") gets `confined_folder_values`
  (`folder_default`: the key is a placeholder behind the credential proxy and hooks run in
  the sandbox). From a window only on such a topic.

- `DriverSpec.secret_options` (openai `mcp_servers`): a server entry holding a `${NAME}`
  reference to a secret only as an assistant file defines that server (the same entry):
  else a window would pick the URL or program the secret goes to. `secret_file_options`
  (`mcp_config`): a file with references only at a path an assistant file names. Which
  names may be referred to at all is `secrets.check_references`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any

from hostd.core.redaction import is_credential_name
from hostd.core.sandbox_policy import policy_of, proxies_credentials
from hostd.shell.drivers.secrets import file_references
from hostd_protocol.driver_spec import DriverSpec
from hostd_protocol.errors import PermissionDenied
from hostd_protocol.secret_refs import references

__all__ = [
    "REDIRECT_ENV",
    "REDIRECT_ENV_ENDINGS",
    "ConfiguredValues",
    "check_window_options",
    "folder_default",
    "redirects_credential",
]

#: The values the local user's assistant files give a driver option (option name -> its
#: values; `"TABLE.NAME"`: the values of entry NAME of table option TABLE).
ConfiguredValues = Callable[[str], Collection[Any]]

#: Variables (compared upper-cased) that, set by a window in a driver's `env_option` table,
#: would send what the tool sends (the daemon's credential) elsewhere, let someone else read
#: or rewrite it on the way, or load a configuration that can do either.
REDIRECT_ENV: frozenset[str] = frozenset({
    "HTTPS_PROXY",
    "HTTP_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "NODE_EXTRA_CA_CERTS",
    "NODE_TLS_REJECT_UNAUTHORIZED",
    "NODE_OPTIONS",
    "NODE_PATH",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "LD_PRELOAD",
    "LD_AUDIT",
    "LD_LIBRARY_PATH",
    # Where the tool reads settings that can set any variable above or run a key helper.
    "CLAUDE_CONFIG_DIR",
    "HOME",
    "AWS_CONFIG_FILE",
    "AWS_ENDPOINT_URL",
})

#: Name endings (upper-cased) of more such variables: any vendor's base URL or endpoint
#: (`ANTHROPIC_BEDROCK_BASE_URL`, `AWS_ENDPOINT_URL_BEDROCK_RUNTIME` ends in _RUNTIME, so
#: AWS endpoints are matched by prefix too), proxies, CA bundles.
REDIRECT_ENV_ENDINGS: tuple[str, ...] = ("_BASE_URL", "_PROXY", "_CA_BUNDLE", "_CA_CERTS")
_REDIRECT_PREFIXES: tuple[str, ...] = ("AWS_ENDPOINT_URL_",)

_WHERE = "an assistant in the config dir's assistants/ (`hostd paths` shows where)"


def redirects_credential(name: str, spec: DriverSpec) -> bool:
    """True when variable `name` in `spec.env_option`'s table would redirect the credential."""
    upper = name.upper()
    return (
        upper in REDIRECT_ENV
        or upper.endswith(REDIRECT_ENV_ENDINGS)
        or upper.startswith(_REDIRECT_PREFIXES)
        or upper in {n.upper() for n in spec.redirect_env}
    )


def check_window_options(
    spec: DriverSpec,
    options: Mapping[str, Any],
    configured: ConfiguredValues,
    environ: Mapping[str, str] | None = None,
) -> None:
    """Raise `PermissionDenied` for the first option in `options` a window may not set for
    `spec` (see the module docstring). `environ` is the daemon's environment (which keys it
    holds); without it the `redirect_options` rule is not applied."""
    if not options:
        return
    _check_assistant_only(spec, options, configured)
    _check_folder_option(spec, options, configured)
    _check_env_options(spec, options, configured)
    _check_env_table(spec, options, configured)
    _check_secret_servers(spec, options, configured)
    if environ is not None:
        _check_redirect_options(spec, options, configured, environ)


def _chosen(value: Any, configured: ConfiguredValues, option: str) -> bool:
    """Absent, empty, or a value an assistant file has for `option`."""
    return value is None or value == "" or value == {} or value in configured(option)


def _check_assistant_only(
    spec: DriverSpec, options: Mapping[str, Any], configured: ConfiguredValues
) -> None:
    for option in spec.assistant_only:
        value = options.get(option)
        if _chosen(value, configured, option):
            continue
        raise PermissionDenied(
            f"{option} {value!r} is not allowed for driver {spec.name!r} from a window: the "
            "driver would run that program with the daemon's credentials; set "
            f"`{option} = {value!r}` in the [options] of {_WHERE}",
            details={"driver": spec.name, "option": option},
        )


def _loads_folder(spec: DriverSpec, options: Mapping[str, Any]) -> bool:
    """The options set `spec.folder_option` to load the working folder's own settings."""
    if not spec.folder_option or spec.folder_option not in options:
        return False
    value = options[spec.folder_option]
    if value is None:  # null: every source, the folder's included
        return True
    return isinstance(value, list) and any(v in spec.folder_values for v in value)


def _check_folder_option(
    spec: DriverSpec, options: Mapping[str, Any], configured: ConfiguredValues
) -> None:
    if not _loads_folder(spec, options) or _kept_out(options):
        return
    option = spec.folder_option
    value = options[option]
    if value in configured(option):
        return
    shown = "null" if value is None else repr(value)
    raise PermissionDenied(
        f"{option} {shown} is not allowed for driver {spec.name!r} from a window on a topic "
        "that is not confined (network none or loopback): the working folder's settings could run programs with the "
        f"daemon's credentials or send them elsewhere; for a folder you trust set `{option}` "
        f"in the [options] of {_WHERE}, or use sandbox = \"confined\"",
        details={"driver": spec.name, "option": option},
    )


def _kept_out(options: Mapping[str, Any]) -> bool:
    """Confined with its own network (`proxies_credentials`): the key stays behind the
    credential proxy and the folder's programs run in the sandbox. Under `network =
    "shared"` a key is readable in the sandbox and the host's network is reachable."""
    return proxies_credentials(policy_of(options))


def folder_default(spec: DriverSpec, options: Mapping[str, Any]) -> dict[str, Any]:
    """`options` (a session's merged options) with `spec.folder_option` set to
    `spec.confined_folder_values` when the topic is `_kept_out` and the option is not set: the
    driver's own default leaves the folder's settings out."""
    out = dict(options)
    if spec.folder_option and spec.folder_option not in out and _kept_out(out):
        out[spec.folder_option] = list(spec.confined_folder_values)
    return out


def _check_env_options(
    spec: DriverSpec, options: Mapping[str, Any], configured: ConfiguredValues
) -> None:
    own = [name for name in spec.env if is_credential_name(name)]
    for option in spec.env_options:
        value = options.get(option)
        if value in own or (isinstance(value, str) and _chosen(value, configured, option)):
            continue
        if value is None:
            continue
        declared = " or ".join([*own, '""'])
        raise PermissionDenied(
            f"{option} = {value!r} is not allowed for driver {spec.name!r}: options from a "
            f"window may name {declared}, or a variable an assistant file names (add "
            f"`{option} = {value!r}` to the [options] of an assistant in the config dir's "
            "assistants/; `hostd paths` shows where)",
            details={"driver": spec.name, "option": option, "variable": str(value)},
        )


def _check_env_table(
    spec: DriverSpec, options: Mapping[str, Any], configured: ConfiguredValues
) -> None:
    table = options.get(spec.env_option) if spec.env_option else None
    if not isinstance(table, Mapping):
        return  # absent, or a wrong type the options check refuses
    for name, value in table.items():
        if not isinstance(name, str) or not redirects_credential(name, spec):
            continue
        if isinstance(value, str) and value in configured(f"{spec.env_option}.{name}"):
            continue
        raise PermissionDenied(
            f"{spec.env_option} {name} is not allowed for driver {spec.name!r} from a window: "
            "it changes where the daemon's credential goes; set it in the "
            f"[options.{spec.env_option}] of {_WHERE}",
            details={"driver": spec.name, "option": spec.env_option, "variable": name},
        )


def _check_redirect_options(
    spec: DriverSpec,
    options: Mapping[str, Any],
    configured: ConfiguredValues,
    environ: Mapping[str, str],
) -> None:
    """A `redirect_options` option is the window's to set only while the driver would send
    no credential the daemon holds: a variable of `spec.env_names(options)` that looks like
    a credential and is set, unless an `env_options` option is "" (no key is sent)."""
    if any(options.get(option) == "" for option in spec.env_options):
        return
    held = [n for n in spec.env_names(options) if is_credential_name(n) and environ.get(n)]
    if not held:
        return
    for option in spec.redirect_options:
        value = options.get(option)
        if _chosen(value, configured, option):
            continue
        keys = " or ".join(f"`{o} = \"\"`" for o in spec.env_options) or "no key"
        what = (
            f"{option} {value!r} from a window would receive"
            if isinstance(value, str)
            else f"{option} from a window would go out with"
        )
        raise PermissionDenied(
            f"{what} the daemon's {held[0]}: for a server "
            f"without a key set {keys}, else set {option} in the [options] of {_WHERE}",
            details={"driver": spec.name, "option": option, "variable": held[0]},
        )


def _check_secret_servers(
    spec: DriverSpec, options: Mapping[str, Any], configured: ConfiguredValues
) -> None:
    for option in spec.secret_options:
        servers = options.get(option)
        if not isinstance(servers, Mapping) or _chosen(servers, configured, option):
            continue
        defined = [
            entry
            for value in configured(option)
            if isinstance(value, Mapping)
            for entry in value.values()
        ]
        for name, entry in servers.items():
            names = references(entry)
            if not names or entry in defined:
                continue
            raise PermissionDenied(
                f"${{{min(names)}}} in {option} {name!r} from a window would go to a server "
                "the window chose; define that server (the same entry) in the "
                f"[options.{option}] of {_WHERE}",
                details={"driver": spec.name, "option": option, "variable": min(names)},
            )
    for option in spec.secret_file_options:
        path = options.get(option)
        if _chosen(path, configured, option) or not (names := file_references(path)):
            continue
        raise PermissionDenied(
            f"{option} {path!r} from a window refers to ${{{min(names)}}}: the window would "
            f"choose where it goes; set `{option} = {path!r}` in the [options] of {_WHERE}",
            details={"driver": spec.name, "option": option, "variable": min(names)},
        )
