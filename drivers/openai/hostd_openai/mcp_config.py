"""The MCP servers a driver runs: the options' entries, an `mcp.json` file, secrets resolved.

Rules this module guards:

- Servers come from `mcp_servers`, `mcpServers` (both validated by `config`) and the file
  `mcp_config` names: a Claude Desktop / Cursor / VS Code `mcp.json`, whose `mcpServers` (or
  VS Code's `servers`) object is taken as is; its other top-level keys are not ours. A name
  defined twice is an error naming it, as is an unknown key of an entry.
- `${NAME}` (also VS Code's `${env:NAME}`) in an entry's `env` or `headers` values is
  replaced by the variable NAME of this process's environment, which holds only what the
  daemon passed this driver: the secrets the user allowed (`hostd drivers openai` explains).
  A reference that is not set is an error naming it and saying where to set it. The values
  live only in this process's memory: never in options, logs or events.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

import msgspec

from hostd_openai.config import McpServerConfig, OpenAIOptions, check_server, check_server_keys
from hostd_protocol.errors import InvalidArgument
from hostd_protocol.secret_refs import SECRET_REF, references

#: An mcp.json file bigger than this is not a config file.
MAX_FILE_BYTES = 1 << 20


def configured_servers(
    opts: OpenAIOptions, environ: Mapping[str, str] = os.environ
) -> dict[str, McpServerConfig]:
    """Every configured server by name, with its secret references resolved."""
    servers = {**opts.mcp_servers, **opts.mcp_servers_json}
    if opts.mcp_config:
        for name, cfg in read_mcp_json(opts.mcp_config).items():
            if name in servers:
                raise InvalidArgument(
                    f"mcp server {name!r} is defined in the options and in {opts.mcp_config}; "
                    "keep one"
                )
            servers[name] = cfg
    return {name: resolve(name, cfg, environ) for name, cfg in servers.items()}


def read_mcp_json(path_text: str) -> dict[str, McpServerConfig]:
    """The servers of an mcp.json file (see the module docstring)."""
    path = Path(path_text).expanduser()
    where = f"mcp_config {path_text}: "
    if not path.is_absolute():
        raise InvalidArgument(f"{where}give an absolute path (or one starting with ~/)")
    try:
        with path.open("rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise InvalidArgument(f"{where}cannot read it ({exc.strerror or exc})") from None
    if len(data) > MAX_FILE_BYTES:
        raise InvalidArgument(f"{where}larger than {MAX_FILE_BYTES} bytes: not an mcp.json")
    try:
        doc = msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        raise InvalidArgument(f"{where}not valid JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise InvalidArgument(f"{where}expected a JSON object with 'mcpServers'")
    raw = doc.get("mcpServers", doc.get("servers"))
    if not isinstance(raw, dict):
        raise InvalidArgument(f"{where}expected an object 'mcpServers' (or 'servers')")
    check_server_keys(raw, where)
    try:
        servers = msgspec.convert(raw, dict[str, McpServerConfig], strict=False)
    except msgspec.ValidationError as exc:
        raise InvalidArgument(f"{where}{exc}") from None
    for name, cfg in servers.items():
        check_server(name, cfg, where)
    return servers


def resolve(name: str, cfg: McpServerConfig, environ: Mapping[str, str]) -> McpServerConfig:
    """`cfg` with its references replaced by their values (see the module docstring)."""
    if not references([*cfg.env.values(), *cfg.headers.values()]):
        return cfg

    def sub(value: str) -> str:
        def one(match: re.Match[str]) -> str:
            var = match.group(1)
            if var not in environ:
                raise InvalidArgument(
                    f"mcp server {name!r} refers to ${{{var}}}, which is not set: add "
                    f"{var}=... to secrets.env in hostd's config dir (mode 0600; `hostd paths` "
                    "shows where) or set it in the daemon's environment, and name it in an "
                    "assistant file (`hostd drivers openai` explains)"
                )
            return environ[var]

        return SECRET_REF.sub(one, value)

    return msgspec.structs.replace(
        cfg,
        env={k: sub(v) for k, v in cfg.env.items()},
        headers={k: sub(v) for k, v in cfg.headers.items()},
    )
