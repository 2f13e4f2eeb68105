"""The sandbox policy model and the bubblewrap argv it builds (pure)."""

from __future__ import annotations

import pytest

from hostd.core.sandbox_policy import (
    BRIDGE_INSIDE,
    CREDENTIAL_SOCKET,
    LOOPBACK_INSIDE,
    UNCONFINED,
    SandboxMounts,
    SandboxPolicy,
    bwrap_argv,
    credential_port,
    driver_options,
    parse_policy,
    policy_of,
    proxies_credentials,
)
from hostd_protocol.errors import InvalidArgument, SandboxUnavailable

MOUNTS = SandboxMounts(
    home="/home/u",
    hidden=("/home/u/.local/share/hostd", "/run/user/1000"),
    read_only=("/home/u/.venv", "/usr/lib/python3", "/home/u/.claude"),
    read_write=("/home/u/.local/share/hostd/driver-state/t1",),
)
CMD = ["/home/u/.venv/bin/python", "-I", "-m", "drv"]
PY = "/usr/bin/python3"
FILTER = "/srv/hostd/shell/drivers/unix_socket_filter.py"
#: Every confined command starts through the Unix-socket filter.
FILTERED = [PY, "-I", "-S", FILTER, "--", *CMD]


def pairs(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv) if a == flag]


@pytest.mark.parametrize(
    ("value", "policy"),
    [
        (None, UNCONFINED),
        ("", UNCONFINED),
        ("none", UNCONFINED),
        ("confined", SandboxPolicy("confined", "none")),
        ({"mode": "confined", "network": "shared"}, SandboxPolicy("confined", "shared")),
        ({"network": "loopback"}, SandboxPolicy("confined", "loopback")),
        ({"pids": 64, "memory_mb": 512, "cpu_seconds": 60},
         SandboxPolicy("confined", "none", pids=64, memory_mb=512, cpu_seconds=60)),
    ],
)
def test_parse(value: object, policy: SandboxPolicy) -> None:
    assert parse_policy(value) == policy


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("jail", r"^sandbox 'jail' is not a policy; use one of none, confined"),
        ({"mode": "confined", "net": "x"}, r"^sandbox has unknown keys \['net'\]"),
        ({"network": "lan"}, r"^sandbox network 'lan' is not one of shared, loopback, none$"),
        (3, r"^sandbox must be a string or a table, not int$"),
        ({"pids": 0}, r"^sandbox pids must be a positive whole number, not 0$"),
        ({"memory_mb": "1G"}, r"^sandbox memory_mb must be a positive whole number, not '1G'$"),
        ({"cpu_seconds": True}, r"^sandbox cpu_seconds must be a positive whole number"),
    ],
)
def test_bad_policies_are_typed_errors(value: object, message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        parse_policy(value)


def test_the_policy_is_an_option_the_driver_never_sees() -> None:
    opts = {"sandbox": "confined", "scenario": "echo"}
    assert policy_of(opts).confined
    assert driver_options(opts) == {"scenario": "echo"}


def test_unconfined_is_the_command_itself() -> None:
    assert bwrap_argv("bwrap", CMD, UNCONFINED, working_dir="", mounts=MOUNTS) == CMD


def test_confined_argv() -> None:
    argv = bwrap_argv(
        "/usr/bin/bwrap", CMD, SandboxPolicy("confined", "none"),
        working_dir="/srv/project", mounts=MOUNTS, python=PY, socket_filter=FILTER,
    )
    assert argv[0] == "/usr/bin/bwrap"
    assert argv[-10:] == ["--", *FILTERED]
    assert argv[argv.index("--cap-drop") + 1] == "ALL"
    for flag in ("--die-with-parent", "--new-session", "--unshare-pid", "--unshare-net"):
        assert flag in argv
    assert pairs(argv, "--ro-bind") == ["/"]
    assert pairs(argv, "--tmpfs") == [
        "/tmp", "/home/u", "/run/user/1000", "/home/u/.local/share/hostd",
    ]
    # Everything exposed comes after everything hidden, shallow before deep.
    last_hide = max(i for i, a in enumerate(argv) if a == "--tmpfs")
    first_bind = min(i for i, a in enumerate(argv) if a.startswith(("--bind", "--ro-bind-try")))
    assert last_hide < first_bind
    assert pairs(argv, "--bind") == ["/srv/project"]
    assert pairs(argv, "--bind-try") == ["/home/u/.local/share/hostd/driver-state/t1"]
    assert pairs(argv, "--ro-bind-try") == ["/home/u/.venv", "/usr/lib/python3", "/home/u/.claude"]
    assert pairs(argv, "--chdir") == ["/srv/project"]


def test_shared_network_keeps_the_host_network() -> None:
    argv = bwrap_argv(
        "bwrap", CMD, SandboxPolicy("confined", "shared"), working_dir="/srv/p", mounts=MOUNTS,
        python=PY, socket_filter=FILTER,
    )
    assert "--unshare-net" not in argv


def test_a_deeper_writable_bind_wins_over_a_read_only_parent() -> None:
    mounts = SandboxMounts(home="/home/u", read_only=("/srv/p",), read_write=())
    argv = bwrap_argv("bwrap", CMD, SandboxPolicy("confined"), working_dir="/srv/p/sub",
                      mounts=mounts, python=PY, socket_filter=FILTER)
    assert argv.index("/srv/p") < argv.index("/srv/p/sub")


def test_loopback_without_ports_is_refused_not_faked() -> None:
    with pytest.raises(SandboxUnavailable, match=r"^sandbox network 'loopback' needs the ports"):
        bwrap_argv("bwrap", CMD, SandboxPolicy("confined", "loopback"), working_dir="/srv/p",
                   mounts=MOUNTS)


def test_loopback_bridges_the_declared_ports_only() -> None:
    policy = parse_policy({"network": "loopback", "ports": [8080, 11434, 8080]})
    assert policy == SandboxPolicy("confined", "loopback", (8080, 11434))
    argv = bwrap_argv("bwrap", CMD, policy, working_dir="/srv/p", mounts=MOUNTS,
                      bridge="/run/hostd/loopback-x", python=PY, socket_filter=FILTER)
    assert "--unshare-net" in argv
    i = argv.index("/run/hostd/loopback-x")
    assert argv[i - 1:i + 2] == ["--bind", "/run/hostd/loopback-x", BRIDGE_INSIDE]
    tail = argv[argv.index("--") + 1:]
    assert tail == ["/usr/bin/python3", "-I", "-m", LOOPBACK_INSIDE, BRIDGE_INSIDE,
                    "8080,11434", "--", *FILTERED]


@pytest.mark.parametrize("network", ["none", "loopback"])
def test_a_credential_proxy_gets_its_own_port_in_the_sandbox(network: str) -> None:
    ports = (47011,) if network == "loopback" else ()
    policy = SandboxPolicy("confined", network, ports)  # type: ignore[arg-type]
    assert proxies_credentials(policy)
    port = credential_port(policy)
    assert port not in ports
    argv = bwrap_argv("bwrap", CMD, policy, working_dir="/srv/p", mounts=MOUNTS,
                      bridge="/run/hostd/loopback-x", python=PY, socket_filter=FILTER,
                      credential_proxy=True)
    assert "--unshare-net" in argv
    tail = argv[argv.index("--") + 1:]
    forwards = ",".join([*map(str, ports), f"{port}={CREDENTIAL_SOCKET}"])
    assert tail == ["/usr/bin/python3", "-I", "-m", LOOPBACK_INSIDE, BRIDGE_INSIDE,
                    forwards, "--", *FILTERED]


def test_a_shared_network_cannot_keep_a_credential_out() -> None:
    policy = SandboxPolicy("confined", "shared")
    assert not proxies_credentials(policy)
    with pytest.raises(SandboxUnavailable, match="cannot keep a credential out"):
        bwrap_argv("bwrap", CMD, policy, working_dir="/srv/p", mounts=MOUNTS,
                   bridge="/run/hostd/loopback-x", python=PY, socket_filter=FILTER,
                   credential_proxy=True)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"network": "loopback", "ports": [0]}, r"^sandbox ports must be a list of TCP ports"),
        ({"network": "loopback", "ports": "80"}, r"^sandbox ports must be a list of TCP ports"),
        ({"network": "none", "ports": [80]}, r"^sandbox ports are only used with network"),
    ],
)
def test_bad_ports(value: object, message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        parse_policy(value)


@pytest.mark.parametrize("wd", ["/home/u", "/home", "/", "/home/u/.local/share/hostd"])
def test_a_working_dir_that_would_expose_what_is_hidden_is_refused(wd: str) -> None:
    with pytest.raises(SandboxUnavailable, match=r"^a confined driver cannot work in ") as err:
        bwrap_argv("bwrap", CMD, SandboxPolicy("confined"), working_dir=wd, mounts=MOUNTS)
    assert err.value.message.endswith("(hostd new --working-dir DIR)")  # a flag that exists


def test_a_relative_working_dir_is_refused() -> None:
    with pytest.raises(SandboxUnavailable, match=r"^a confined driver needs an absolute working"):
        bwrap_argv("bwrap", CMD, SandboxPolicy("confined"), working_dir="p", mounts=MOUNTS)


def test_a_confined_command_without_its_socket_filter_is_refused() -> None:
    with pytest.raises(SandboxUnavailable, match=r"^a confined driver needs its Unix-socket filter"):
        bwrap_argv("bwrap", CMD, SandboxPolicy("confined"), working_dir="/srv/p", mounts=MOUNTS)
