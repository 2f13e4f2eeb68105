"""Launching a driver inside bubblewrap: is it available here, and which paths to expose.

The policy and the argv are pure (`hostd.core.sandbox_policy`); this module finds what they
need on this machine: the `bwrap` binary and whether it works (unprivileged user namespaces
may be off: a probe run says so), the user's home, the daemon's folders to hide, and the
interpreter and packages a driver runs from (they may live under the hidden home: pyenv,
~/.local, a venv in a project).

Rules this module guards:

- Availability is a real run of bwrap with the flags a confined driver gets (`--unshare-pid
  --unshare-net`), not just "the binary exists"; its result and reason are what
  `hostd drivers` and `hostd status` show, and what a refused turn says.
- No trio here: the CLI imports it for its one-shot commands; the daemon calls the blocking
  probe once, in a thread, and caches it.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import pwd
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

import msgspec

from hostd.core.sandbox_policy import SandboxMounts, SandboxPolicy, bwrap_argv, check_policy
from hostd.shell.drivers import unix_socket_filter
from hostd.shell.drivers.limits import Cgroups, Leaf, join_argv, probe_limits, rlimits
from hostd_protocol import child_process
from hostd_protocol.child_process import Limits
from hostd_protocol.driver_spec import DriverSpec
from hostd_protocol.errors import SandboxUnavailable

log = logging.getLogger(__name__)

#: What `apt-get` calls it (the fix a "not available" reason names).
PACKAGE = "bubblewrap"
PROBE_TIMEOUT = 10.0


@dataclass(frozen=True)
class SandboxSupport:
    """Whether confined policies can run here, and why not."""

    available: bool
    bwrap: str = ""
    version: str = ""
    reason: str = ""

    def summary(self) -> str:
        if self.available:
            return f"available (bubblewrap {self.version or '?'} at {self.bwrap})"
        return f"unavailable: {self.reason}"


def probe(bwrap: str | None = None, machine: str | None = None) -> SandboxSupport:
    """Run bwrap once with the confined flags (blocking, bounded) and say what happened."""
    machine = machine or platform.machine()
    if machine not in unix_socket_filter.ARCHES:
        # Said here, once, by `hostd status` and by a confined topic's refusal, instead of
        # every confined driver exiting 126 at its start (the filter refuses to run).
        known = " and ".join(sorted(unix_socket_filter.ARCHES))
        return SandboxSupport(
            False,
            reason=f"hostd's Unix-socket filter knows {known}, not {machine!r} (a confined "
            'driver could reach any Unix socket); run such topics with sandbox = "off"',
        )
    path = bwrap or shutil.which("bwrap")
    if not path:
        return SandboxSupport(
            False,
            reason=f"bwrap is not installed (apt-get install {PACKAGE}, or run scripts/setup)",
        )
    try:
        ver = child_process.run([path, "--version"], timeout=PROBE_TIMEOUT)
        version = ver.stdout.decode(errors="replace").strip().removeprefix("bubblewrap").strip()
        run = child_process.run(
            [path, "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-net",
             "--cap-drop", "ALL",
             "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp",
             "--", "/bin/true"],
            timeout=PROBE_TIMEOUT,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return SandboxSupport(False, path, reason=f"{path} could not run: {exc}")
    if run.returncode != 0:
        stderr = run.stderr.decode(errors="replace")
        err = (stderr.strip().splitlines() or [f"exit code {run.returncode}"])[-1]
        return SandboxSupport(
            False, path, version,
            reason=f"bwrap cannot create a sandbox here ({err}); unprivileged user "
            "namespaces may be disabled (sysctl kernel.unprivileged_userns_clone / "
            "user.max_user_namespaces)",
        )
    return SandboxSupport(True, path, version)


@lru_cache(maxsize=8)
def interpreter_paths(python: str) -> tuple[str, ...]:
    """Folders `python -I` imports from, plus its prefixes: what a driver needs to start.

    Asked of the interpreter itself (isolated, as drivers run), once per interpreter: editable
    installs add their source folders through `.pth` files only it knows about. setuptools'
    editable installs (PEP 660) do not put those folders on `sys.path` but in a `MAPPING` of
    an `__editable___*_finder` module: without them, a checkout under /tmp or the home (both
    hidden in the sandbox) would leave the driver unable to import its own package.
    """
    code = (
        "import json, sys\n"
        "paths = [sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix, *sys.path]\n"
        "for name, mod in list(sys.modules.items()):\n"
        "    if name.startswith('__editable__') and isinstance(getattr(mod, 'MAPPING', None), dict):\n"
        "        paths += [str(p) for p in mod.MAPPING.values()]\n"
        "print(json.dumps(paths))"
    )
    found: list[str] = [os.path.dirname(os.path.realpath(python)), os.path.dirname(python)]
    try:
        run = child_process.run([python, "-I", "-c", code], timeout=PROBE_TIMEOUT)
        found += [p for p in json.loads(run.stdout) if isinstance(p, str)]
    except (OSError, subprocess.SubprocessError, ValueError):
        found += [sys.prefix, sys.exec_prefix, sys.base_prefix, *sys.path]
    out: list[str] = []
    for p in found:
        if p and os.path.isabs(p) and p not in out:
            out.append(p)
    return tuple(out)


def user_home(environ: Mapping[str, str]) -> str:
    home = environ.get("HOME") or ""
    if not home:
        try:
            home = pwd.getpwuid(os.getuid()).pw_dir
        except KeyError:
            home = ""
    return os.path.realpath(home) if home else ""


def _existing(paths: Iterable[str]) -> tuple[str, ...]:
    return tuple(os.path.realpath(p) for p in paths if p and os.path.isdir(p))


@dataclass
class Sandbox:
    """The sandbox of one daemon: its probe result (cached) and the folders it hides.

    Args:
        hidden: the daemon's own folders (data, runtime): a driver never sees the store or
            the socket (a socket on a read-only mount still accepts connections).
        bwrap: the binary (default: found on PATH).
        bridge_parent: where loopback bridge folders go (never visible to a sandbox).
    """

    hidden: Sequence[str] = ()
    bwrap: str | None = None
    #: Where loopback bridge folders go (the daemon's runtime dir; default: the temp dir).
    bridge_parent: str | None = None
    _support: SandboxSupport | None = None
    _cgroups: Cgroups | None = None

    def support(self) -> SandboxSupport:
        """The probe result, run once (blocking; call from a thread in the daemon)."""
        if self._support is None:
            self._support = probe(self.bwrap)
        return self._support

    def cgroups(self) -> Cgroups:
        """How confined trees are limited here (`limits`), probed once (blocking)."""
        if self._cgroups is None:
            self._cgroups = Cgroups(probe_limits())
            for path in self._cgroups.sweep():
                log.info("removed cgroup %s left by an earlier daemon", path)
        return self._cgroups

    def close(self) -> None:
        """The daemon stops: its cgroup folders go (their leaves went with their sessions)."""
        if self._cgroups is not None:
            self._cgroups.close()

    def limit(self, argv: list[str], policy: SandboxPolicy) -> tuple[list[str], Leaf | None, Limits]:
        """A confined `argv` made to start in a cgroup leaf of its own (where one can be
        made), and the rlimits it starts with (blocking). Raises `SandboxUnavailable` when
        the leaf cannot be made."""
        cgroups = self.cgroups()
        try:
            leaf = cgroups.create(policy)
        except OSError as exc:
            raise SandboxUnavailable(
                f"cannot make a cgroup for a confined driver ({exc}); "
                f"limits here: {cgroups.support.summary()}"
            ) from None
        return join_argv(leaf, argv), leaf, rlimits(policy, cgroups.support)

    def wrap(
        self,
        command: Sequence[str],
        policy: SandboxPolicy,
        *,
        spec: DriverSpec,
        environ: Mapping[str, str],
        working_dir: str,
        state_dir: str = "",
        python: str | None = None,
        bridge: str = "",
        read_also: tuple[str, ...] = (),
        credential_proxy: bool = False,
        spec_read: tuple[str, ...] | None = None,
    ) -> list[str]:
        """`command` as the policy says: itself, or inside bwrap. Raises `SandboxUnavailable`
        when the policy cannot be honoured (never falls back to unconfined). `bridge`: the
        folder of the session's `LoopbackBridge` (network "loopback"). `read_also`: more
        folders visible read-only (a fork's source state dir). `credential_proxy`: the
        bridge folder holds the session's credential proxy (see `bwrap_argv`). `spec_read`:
        bound instead of the spec's `sandbox_read` (a proxied credential's files stay out)."""
        if not policy.confined:
            return list(command)
        home = user_home(environ)
        env_home = {**environ, "HOME": home}
        if spec_read is not None:
            spec = msgspec.structs.replace(spec, sandbox_read=spec_read)
        uid_run = f"/run/user/{os.getuid()}"
        mounts = SandboxMounts(
            home=home,
            hidden=_existing([*self.hidden, uid_run]),
            read_only=(*interpreter_paths(python or sys.executable),
                       *spec.sandbox_paths(env_home)[0], *read_also),
            read_write=tuple(p for p in (*spec.sandbox_paths(env_home)[1], state_dir) if p),
        )
        wd = os.path.realpath(working_dir) if working_dir else ""
        check_policy(policy, wd, mounts)  # what the policy asks, before what the machine has
        support = self.support()
        if not support.available:
            raise SandboxUnavailable(
                f"sandbox policy {policy.describe()} cannot be honoured: {support.reason}",
                driver=spec.name,
            )
        return bwrap_argv(
            support.bwrap, command, policy, working_dir=wd, mounts=mounts, bridge=bridge,
            python=python or sys.executable, credential_proxy=credential_proxy,
            socket_filter=unix_socket_filter.__file__,
        )


__all__ = ["PACKAGE", "Sandbox", "SandboxSupport", "interpreter_paths", "probe", "user_home"]
