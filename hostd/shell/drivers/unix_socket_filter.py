"""No Unix sockets in a sandbox: a seccomp filter, then exec the driver.

    python -I -m hostd.shell.drivers.unix_socket_filter -- DRIVER ARGV...

A confined driver sees the host's file system read-only, but a read-only mount does not stop
`connect()` to a Unix socket on it. Every socket the sandbox does not hide was reachable from
a tool: another hostd daemon of the same user (its socket outside the hidden folders: an
unconfined topic there is a way out), `/var/run/docker.sock`, the system D-Bus and
`/run/systemd/private` (as root: `systemd-run` outside the sandbox). So the driver and
everything it starts get a seccomp filter that refuses to create `AF_UNIX` sockets
(`socket(AF_UNIX, ...)` fails with EACCES). `socketpair()` stays (pipes between a process
and its children: trio, asyncio, libuv use it), and so do sockets passed in already open.
`io_uring_setup` is refused too (ENOSYS): io_uring can make and connect sockets without the
`socket` system call. The same filter as Anthropic's sandbox-runtime and Codex apply.

The loopback forwarder (`loopback_inside`) relays to the daemon's Unix sockets, so it runs
before this filter, and starts the driver through it.

Rules this module guards:

- A machine whose architecture this filter does not know (its system call numbers) refuses
  to start the driver (exit 126, one line on stderr): a confined driver never runs without it.
- Other architectures' system calls from the same process (x86's 32-bit `int 0x80`, x32) are
  refused whole: `socketcall` would create a socket past the filter.
- Standard library only: it runs before the driver, in the driver's interpreter or the
  daemon's.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct
import sys

#: (AUDIT_ARCH_*, the `socket` system call, the `io_uring_setup` system call) per machine.
ARCHES: dict[str, tuple[int, int, int]] = {
    "x86_64": (0xC000003E, 41, 425),
    "aarch64": (0xC00000B7, 198, 425),
}
#: x86-64's x32 ABI: system call numbers with this bit set.
X32_BIT = 0x40000000
AF_UNIX = 1

# Classic BPF, as seccomp runs it.
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_RET_K = 0x06
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000
# struct seccomp_data: int nr; u32 arch; u64 instruction_pointer; u64 args[6].
_NR, _ARCH, _ARG0_LOW = 0, 4, 16 if sys.byteorder == "little" else 20

_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2


def program(machine: str | None = None) -> list[tuple[int, int, int, int]]:
    """The filter's instructions (code, jt, jf, k) for `machine` (this one by default).
    Raises `OSError` (ENOSYS) for a machine it does not know."""
    machine = machine or platform.machine()
    if machine not in ARCHES:
        raise OSError(errno.ENOSYS, f"no Unix-socket filter for machine {machine!r}")
    arch, sys_socket, sys_io_uring_setup = ARCHES[machine]
    deny_arch = _RET_ERRNO | errno.ENOSYS
    return [
        (_LD_W_ABS, 0, 0, _ARCH),
        (_JEQ_K, 1, 0, arch),  # 1: the native ABI goes on
        (_RET_K, 0, 0, deny_arch),  # 2: another ABI (x86's int 0x80: socketcall)
        (_LD_W_ABS, 0, 0, _NR),  # 3
        (_JGE_K, 0, 1, X32_BIT),  # 4: x32 system calls
        (_RET_K, 0, 0, deny_arch),  # 5
        (_JEQ_K, 0, 1, sys_io_uring_setup),  # 6
        (_RET_K, 0, 0, _RET_ERRNO | errno.ENOSYS),  # 7
        (_JEQ_K, 1, 0, sys_socket),  # 8: socket() -> look at its family
        (_RET_K, 0, 0, _RET_ALLOW),  # 9: every other call
        (_LD_W_ABS, 0, 0, _ARG0_LOW),  # 10: the family (an int: the low 32 bits)
        (_JEQ_K, 0, 1, AF_UNIX),  # 11
        (_RET_K, 0, 0, _RET_ERRNO | errno.EACCES),  # 12
        (_RET_K, 0, 0, _RET_ALLOW),  # 13
    ]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def install(machine: str | None = None) -> None:
    """Apply the filter to this process (and so to everything it starts). Raises `OSError`."""
    code = b"".join(struct.pack("=HBBI", *ins) for ins in program(machine))
    buf = ctypes.create_string_buffer(code, len(code))
    prog = _SockFprog(len(code) // 8, ctypes.addressof(buf))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_SET_NO_NEW_PRIVS): {os.strerror(err)}")
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.addressof(prog), 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_SET_SECCOMP): {os.strerror(err)}")


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] != "--":
        print("usage: unix_socket_filter -- ARGV...", file=sys.stderr)
        return 2
    try:
        install()
    except OSError as exc:
        print(f"hostd sandbox: cannot refuse Unix sockets here ({exc.strerror}); "
              "the driver was not started", file=sys.stderr)
        return 126
    try:
        os.execvp(argv[1], argv[1:])
    except OSError as exc:
        print(f"hostd sandbox: cannot start {argv[1]}: {exc.strerror}", file=sys.stderr)
        return 127


if __name__ == "__main__":
    sys.stdout.flush()
    os._exit(main(sys.argv[1:]))
