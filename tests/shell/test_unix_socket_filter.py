"""The sandbox's Unix-socket filter (seccomp), run as the sandbox runs it: a script that
installs the filter and execs the command. The e2e test through bubblewrap is
tests/e2e/test_sandbox_holds.py."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from hostd.shell.drivers import unix_socket_filter
from hostd.shell.drivers.sandbox import probe

pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or platform.machine() not in unix_socket_filter.ARCHES,
    reason="seccomp filter for Linux x86_64 / aarch64",
)

PROBE = """
import socket
out = []
try:
    socket.socket(socket.AF_UNIX)
    out.append("unix made")
except PermissionError:
    out.append("unix refused")
a, b = socket.socketpair()
a.sendall(b"x")
out.append("socketpair " + b.recv(1).decode())
socket.socket(socket.AF_INET).close()
out.append("inet made")
print(", ".join(out))
"""


def run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-I", "-S", unix_socket_filter.__file__, "--", *argv],
        capture_output=True, text=True, timeout=60,
    )


def test_the_command_and_its_children_cannot_make_unix_sockets() -> None:
    direct = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60)
    assert direct.stdout.strip() == "unix made, socketpair x, inet made"
    # A child of a child: the filter is inherited and cannot be taken off.
    result = run(sys.executable, "-c", f"import subprocess, sys; subprocess.run([sys.executable, '-c', {PROBE!r}])")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "unix refused, socketpair x, inet made"


def test_a_missing_command_is_one_line_and_exit_127() -> None:
    result = run("/nonexistent/driver")
    assert result.returncode == 127
    assert result.stderr.strip().splitlines() == [
        "hostd sandbox: cannot start /nonexistent/driver: No such file or directory"
    ]


def test_an_unknown_machine_has_no_filter() -> None:
    with pytest.raises(OSError, match="no Unix-socket filter for machine 'mips'"):
        unix_socket_filter.program("mips")


def test_on_an_unknown_machine_confined_is_unavailable_in_one_line() -> None:
    """Said by the probe (`hostd status`, a confined topic's `sandbox_unavailable`), not by
    each driver's exit 126; no bwrap is run."""
    support = probe("/nonexistent/bwrap", machine="riscv64")
    assert not support.available
    assert support.summary() == (
        "unavailable: hostd's Unix-socket filter knows aarch64 and x86_64, not 'riscv64' (a "
        'confined driver could reach any Unix socket); run such topics with sandbox = "off"'
    )
