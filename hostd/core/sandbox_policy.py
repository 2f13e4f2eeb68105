"""Sandbox policy: what confinement a topic's driver runs in, and the bubblewrap argv for it.

A policy is the `sandbox` option of an assistant or a topic (merged like every option, the
topic winning): `"none"` (the default: the driver runs as the user, as before), `"confined"`,
or a table `{mode = "confined", network = "shared" | "loopback" | "none"}` (plus `ports` and
the limits `pids`, `memory_mb`, `cpu_seconds`).

Rules this module guards:

- A policy never claims a confinement it does not give: a policy this machine or this
  version cannot honour is refused (`SandboxUnavailable`), never run unconfined.
  `network = "loopback"` gives the sandbox its own network namespace (its `lo` is not the
  host's) plus a bridge for the declared `ports` of the host's 127.0.0.1 only: in the
  sandbox a forwarder listens on `127.0.0.1:<port>` and relays through a Unix socket the
  daemon binds in, which the daemon relays to the host's `127.0.0.1:<port>`. Without ports
  it is refused (it would be "none" in disguise).
- Under `confined` the driver and everything it starts (vendor CLI, MCP servers, tools) see:
  the whole file system read-only; a private `/tmp`; the user's home, the daemon's own
  folders (store, runtime socket) and `/run/user/<uid>` hidden behind empty tmpfs; then, on
  top, read-only the interpreter and packages the driver runs from plus what its spec
  declares (`DriverSpec.sandbox_read`), and read-write the working directory, the topic's
  driver-state folder and what the spec declares writable. A deeper bind wins over a
  shallower one, so binds are emitted shortest path first.
- The sandbox is its own pid namespace whose init dies with the daemon's child
  (`--unshare-pid --die-with-parent`): a grandchild that called `setsid` dies with it, which
  `--die-with-parent` alone does not give. `--new-session` keeps it off the daemon's tty.
- A confined tree has a budget: `pids` processes at once, `memory_mb` MiB, `cpu_seconds` CPU
  seconds per process (table keys; defaults `DEFAULT_*`), enforced by the shell
  (`hostd.shell.drivers.limits`: a cgroup leaf where one can be made, else setrlimit).
- No capabilities inside (`--cap-drop ALL`) and no_new_privs (bwrap sets it), also when the
  daemon runs as root: mount, umount and every other privileged call fail.
- No Unix sockets: a read-only mount does not stop `connect()` to a socket on it (another
  hostd daemon's, docker's, the system bus), so the driver starts through a seccomp filter
  that refuses to create them (`hostd.shell.drivers.unix_socket_filter`, run as a script:
  `python -I -S`, ~20 ms), whatever the network policy; only the loopback forwarder, which
  relays to the daemon's bridge sockets, runs outside it.
- The environment is not touched here: the session already gives the driver the minimal one.
- Pure: the shell finds the paths (interpreter, home, data dirs) and checks bwrap works.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any, Literal

from hostd_protocol.errors import InvalidArgument, SandboxUnavailable

Mode = Literal["none", "confined"]
Network = Literal["shared", "loopback", "none"]

MODES: tuple[Mode, ...] = ("none", "confined")
NETWORKS: tuple[Network, ...] = ("shared", "loopback", "none")
#: The option key that holds the policy (assistant `[options]`, `hostd new --option`).
OPTION = "sandbox"
#: Where the daemon's loopback bridge folder appears inside the sandbox (its private /tmp).
BRIDGE_INSIDE = "/tmp/.hostd-loopback"
#: The daemon's credential proxy socket in the bridge folder (`<name>.sock`), reached in the
#: sandbox at `127.0.0.1:credential_port(ports)` (`hostd.shell.drivers.credential_proxy`).
CREDENTIAL_SOCKET = "credential"
#: The module that forwards the sandbox's 127.0.0.1:<port> to that folder's sockets.
LOOPBACK_INSIDE = "hostd.shell.drivers.loopback_inside"


#: Default limits of a confined tree: generous for an agent and its tools, far below what
#: takes a machine down (a pid limit of ~96k, all memory).
DEFAULT_PIDS = 1024
DEFAULT_MEMORY_MB = 8192
DEFAULT_CPU_SECONDS = 4 * 3600
LIMIT_KEYS = ("pids", "memory_mb", "cpu_seconds")


@dataclass(frozen=True)
class SandboxPolicy:
    """How a topic's driver is confined. `network` matters only when `mode` is confined."""

    mode: Mode = "none"
    network: Network = "none"
    #: With `network = "loopback"`: the ports of the host's 127.0.0.1 the sandbox may reach
    #: (bridged; see `hostd.shell.drivers.loopback_bridge`). Nothing else is reachable.
    ports: tuple[int, ...] = ()
    #: Resource limits of the confined tree (`hostd.shell.drivers.limits`): processes at
    #: once, memory in MiB, CPU seconds per process.
    pids: int = DEFAULT_PIDS
    memory_mb: int = DEFAULT_MEMORY_MB
    cpu_seconds: int = DEFAULT_CPU_SECONDS

    @property
    def confined(self) -> bool:
        return self.mode == "confined"

    def describe(self) -> str:
        """One line for a step record or an error: `none` or `confined (network none)`."""
        if not self.confined:
            return "none"
        ports = f" ports {','.join(map(str, self.ports))}" if self.ports else ""
        return f"confined (network {self.network}{ports})"


UNCONFINED = SandboxPolicy()


def credential_port(policy: SandboxPolicy) -> int:
    """The sandbox-side port of the credential proxy: not one of the bridged ports (the
    sandbox has its own network namespace, so nothing else is listening there)."""
    port = 47011
    while port in policy.ports:
        port += 1
    return port


def proxies_credentials(policy: SandboxPolicy) -> bool:
    """Whether a driver's credential can be kept out of this sandbox: it must be confined
    with its own network namespace (`shared` would put the proxy's in-sandbox listener on
    the host's loopback, usable by every local process)."""
    return policy.confined and policy.network != "shared"


def parse_policy(value: object) -> SandboxPolicy:
    """The policy an option value says. Raises `InvalidArgument` naming what is wrong."""
    if value is None or value == "":
        return UNCONFINED
    if isinstance(value, str):
        if value not in MODES:
            raise InvalidArgument(
                f"sandbox {value!r} is not a policy; use one of {', '.join(MODES)} "
                "or a table {mode = \"confined\", network = \"shared|loopback|none\"}"
            )
        return SandboxPolicy(mode=value)
    if not isinstance(value, Mapping):
        raise InvalidArgument(f"sandbox must be a string or a table, not {type(value).__name__}")
    unknown = sorted(set(value) - {"mode", "network", "ports", *LIMIT_KEYS})
    if unknown:
        raise InvalidArgument(
            f"sandbox has unknown keys {unknown}; known: mode, network, ports, "
            + ", ".join(LIMIT_KEYS)
        )
    limits: dict[str, int] = {}
    for key in LIMIT_KEYS:
        if key in value:
            n = value[key]
            if not isinstance(n, int) or isinstance(n, bool) or n <= 0:
                raise InvalidArgument(f"sandbox {key} must be a positive whole number, not {n!r}")
            limits[key] = n
    mode = value.get("mode", "confined")
    network = value.get("network", "none")
    if mode not in MODES:
        raise InvalidArgument(f"sandbox mode {mode!r} is not one of {', '.join(MODES)}")
    if network not in NETWORKS:
        raise InvalidArgument(f"sandbox network {network!r} is not one of {', '.join(NETWORKS)}")
    ports = value.get("ports", [])
    if not isinstance(ports, (list, tuple)) or not all(
        isinstance(p, int) and not isinstance(p, bool) and 0 < p < 65536 for p in ports
    ):
        raise InvalidArgument(f"sandbox ports must be a list of TCP ports, not {ports!r}")
    if ports and network != "loopback":
        raise InvalidArgument("sandbox ports are only used with network 'loopback'")
    return SandboxPolicy(
        mode=mode, network=network, ports=tuple(sorted(set(ports))), **limits
    )


def policy_of(options: Mapping[str, Any]) -> SandboxPolicy:
    """The policy in a session's merged driver options (`sandbox` key)."""
    return parse_policy(options.get(OPTION))


#: Options the host acts on and the driver never sees: the sandbox policy and the
#: standalone workspace policy (`hostd.core.workspaces`).
HOST_OPTIONS: frozenset[str] = frozenset({OPTION, "workspace"})


def driver_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """The options the driver itself gets: the host's own (`HOST_OPTIONS`) are not its."""
    return {k: v for k, v in options.items() if k not in HOST_OPTIONS}


@dataclass(frozen=True)
class SandboxMounts:
    """What the shell found for one driver launch (absolute, normalised paths)."""

    #: The user's home, hidden (its contents are not the driver's business).
    home: str
    #: More folders to hide: the daemon's data and runtime dirs, `/run/user/<uid>`.
    hidden: tuple[str, ...] = ()
    #: Exposed read-only on top (interpreter, packages, the spec's `sandbox_read`).
    read_only: tuple[str, ...] = ()
    #: Exposed read-write on top (the spec's `sandbox_write`, the state dir). The working
    #: directory is added by `bwrap_argv` itself.
    read_write: tuple[str, ...] = ()


def _norm(path: str) -> str:
    return str(PurePosixPath("/", path))


def _within(path: str, parent: str) -> bool:
    p, q = PurePosixPath(path), PurePosixPath(parent)
    return p == q or q in p.parents


def check_policy(policy: SandboxPolicy, working_dir: str, mounts: SandboxMounts) -> None:
    """Refuse what cannot be honoured (before anything starts). Raises `SandboxUnavailable`."""
    if not policy.confined:
        return
    if policy.network == "loopback" and not policy.ports:
        raise SandboxUnavailable(
            "sandbox network 'loopback' needs the ports of the host's 127.0.0.1 to reach "
            "(ports = [8080]): a confined driver has its own network namespace, and only "
            "declared ports are bridged to the host's loopback"
        )
    if not working_dir or not working_dir.startswith("/"):
        raise SandboxUnavailable(
            f"a confined driver needs an absolute working directory, not {working_dir!r}"
        )
    wd = _norm(working_dir)
    for hidden in (mounts.home, *mounts.hidden):
        if hidden and _within(hidden, wd):
            raise SandboxUnavailable(
                f"a confined driver cannot work in {wd}: it contains {hidden}, which the "
                "sandbox hides; give the topic a project folder (hostd new --working-dir DIR)"
            )


def _binds(flag: str, paths: Iterable[str]) -> list[tuple[str, str]]:
    return [(flag, _norm(p)) for p in paths if p]


def bwrap_argv(
    bwrap: str,
    command: Sequence[str],
    policy: SandboxPolicy,
    *,
    working_dir: str,
    mounts: SandboxMounts,
    bridge: str = "",
    python: str = "",
    credential_proxy: bool = False,
    socket_filter: str = "",
) -> list[str]:
    """`command` wrapped in bubblewrap per `policy` (`command` itself when unconfined).

    Checks the policy first (`check_policy`). Paths that may not exist use the `-try`
    variants; the working directory must exist (the shell creates it). With
    `network = "loopback"`, `bridge` is the daemon's bridge folder (bound at `BRIDGE_INSIDE`)
    and `python` runs the in-sandbox forwarder (`LOOPBACK_INSIDE`) in front of the command.
    `python` runs `socket_filter` (both required: the path of the Unix-socket filter script,
    which starts the command).
    With `credential_proxy` (network `none` or `loopback` only), the forwarder also listens on
    `127.0.0.1:credential_port(policy)` for the daemon's credential proxy in that folder.
    """
    if not policy.confined:
        return list(command)
    check_policy(policy, working_dir, mounts)
    wd = _norm(working_dir)
    argv = [
        bwrap,
        "--die-with-parent",
        "--new-session",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        # No capability inside, whoever runs the daemon: run by root, bwrap keeps root's
        # (CapEff 000001fffeffffff) and a tool could `umount` the hidden home or remount /
        # read-write. bwrap also sets no_new_privs, so no setuid binary gives them back.
        "--cap-drop", "ALL",
        "--ro-bind", "/", "/",
        "--dev", "/dev",
        "--proc", "/proc",
        "--tmpfs", "/tmp",
    ]
    if policy.network != "shared":
        argv.append("--unshare-net")
    hidden = sorted({_norm(h) for h in (mounts.home, *mounts.hidden) if h}, key=len)
    for path in hidden:
        # A folder that is not there has nothing to hide (and --tmpfs would create it).
        argv += ["--tmpfs", path]
    binds = _binds("--ro-bind-try", mounts.read_only)
    binds += _binds("--bind-try", mounts.read_write)
    binds.append(("--bind", wd))
    # Shortest first, so a deeper bind is mounted over a shallower one; at equal paths the
    # later (writable, then the working dir) wins.
    order = {"--ro-bind-try": 0, "--bind-try": 1, "--bind": 2}
    seen: dict[str, str] = {}
    for flag, path in sorted(binds, key=lambda b: (len(PurePosixPath(b[1]).parts), order[b[0]])):
        seen[path] = flag
    for path, flag in sorted(seen.items(), key=lambda kv: len(PurePosixPath(kv[0]).parts)):
        argv += [flag, path, path]
    forwards = [str(p) for p in policy.ports] if policy.network == "loopback" else []
    if credential_proxy:
        if not proxies_credentials(policy):
            raise SandboxUnavailable(
                f"sandbox network {policy.network!r} cannot keep a credential out of the sandbox"
            )
        forwards.append(f"{credential_port(policy)}={CREDENTIAL_SOCKET}")
    if not python or not socket_filter:
        raise SandboxUnavailable("a confined driver needs its Unix-socket filter and an interpreter")
    command = [python, "-I", "-S", socket_filter, "--", *command]
    if forwards:
        if not bridge:
            raise SandboxUnavailable("sandbox network 'loopback' needs the daemon's bridge")
        argv += ["--bind", bridge, BRIDGE_INSIDE]
        command = [python, "-I", "-m", LOOPBACK_INSIDE, BRIDGE_INSIDE,
                   ",".join(forwards), "--", *command]
    argv += ["--chdir", wd, "--", *command]
    return argv


__all__ = [
    "BRIDGE_INSIDE",
    "CREDENTIAL_SOCKET",
    "DEFAULT_CPU_SECONDS",
    "DEFAULT_MEMORY_MB",
    "DEFAULT_PIDS",
    "HOST_OPTIONS",
    "LOOPBACK_INSIDE",
    "MODES",
    "NETWORKS",
    "OPTION",
    "UNCONFINED",
    "SandboxMounts",
    "SandboxPolicy",
    "bwrap_argv",
    "check_policy",
    "credential_port",
    "driver_options",
    "parse_policy",
    "policy_of",
    "proxies_credentials",
]
