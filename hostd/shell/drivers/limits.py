"""Resource limits of a confined driver's tree: processes, memory, CPU time.

A confined topic's driver and everything it starts (vendor CLI, tools, MCP servers) share
one budget, so a fork bomb or a runaway allocation in a tool hits the limit, not the
machine, while the daemon and the other topics keep answering.

Rules this module guards:

- Where a cgroup can be made, the tree runs in a leaf of its own (`Cgroups`): `pids.max`
  and the memory limit hold for the whole tree, whatever it forks. In order of preference:
  a cgroup v2 subtree this user may write with the `pids` and `memory` controllers
  available (a delegated one, e.g. a `systemd-run --user --scope`, or `HOSTD_CGROUP`
  naming one), then the cgroup v1 `pids` and `memory` hierarchies where they are writable
  (root in a container). Otherwise setrlimit: RLIMIT_NPROC (it counts every process of the
  user, so the budget is added to what the user runs now, and Linux does not apply it to
  uid 0 at all: said in the summary), RLIMIT_DATA for memory (per process; RLIMIT_AS would
  break runtimes that reserve address space, like node). CPU time is RLIMIT_CPU per process
  in every case (cgroups have no total-time limit).
- The tree joins its leaf before the driver starts: a tiny `sh` writes its own pid into
  the leaf, then execs the sandbox (`join_argv`), so nothing it forks starts outside.
- A leaf is removed when its session ended (`Cgroups.remove`); leaves a crashed daemon left
  are removed at the next start (`Cgroups.sweep`). Leaf names carry the daemon's pid.
- No trio here: the CLI's `hostd status` probes as the daemon would.
"""

from __future__ import annotations

import itertools
import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hostd.core.sandbox_policy import SandboxPolicy
from hostd_protocol.child_process import Limits

log = logging.getLogger(__name__)

#: The folder (under a writable cgroup) hostd's leaves go in.
PREFIX = "hostd"
#: Names a delegated cgroup v2 folder to make leaves in (it must enable pids and memory).
CGROUP_ENV = "HOSTD_CGROUP"
_V2_NEEDS = ("pids", "memory")
#: rmdir attempts (50 ms apart) while a leaf's killed members finish exiting.
REMOVE_TRIES = 40
_ids = itertools.count(1)


@dataclass(frozen=True)
class LimitSupport:
    """How a confined tree's limits are enforced here."""

    #: "cgroup2", "cgroup1" or "rlimit".
    mechanism: str
    #: The folders leaves are made in (one per hierarchy; none for rlimit).
    parents: tuple[str, ...] = ()
    #: Why no cgroup is used (rlimit only).
    reason: str = ""

    def summary(self) -> str:
        if self.mechanism == "cgroup2":
            return f"cgroup v2 leaf per confined session (pids, memory) under {self.parents[0]}"
        if self.mechanism == "cgroup1":
            return "cgroup v1 leaf per confined session (pids, memory)"
        root = " (RLIMIT_NPROC does not apply to root: no process limit)" if _is_root() else ""
        return f"setrlimit per process (processes, data, cpu){root}; no cgroup: {self.reason}"


def _is_root() -> bool:
    return os.geteuid() == 0


def _own_cgroups() -> dict[str, str]:
    """Controller (or "" for v2) -> this process's cgroup path, from /proc/self/cgroup."""
    out: dict[str, str] = {}
    try:
        text = Path("/proc/self/cgroup").read_text()
    except OSError:
        return out
    for line in text.splitlines():
        _, controllers, path = line.split(":", 2)
        for c in controllers.split(",") if controllers else [""]:
            out[c] = path
    return out


def _mounts() -> dict[str, str]:
    """"cgroup2" -> its mount point; each v1 controller -> its mount point."""
    out: dict[str, str] = {}
    try:
        text = Path("/proc/self/mounts").read_text()
    except OSError:
        return out
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 4:
            continue
        where, kind, opts = parts[1], parts[2], parts[3].split(",")
        if kind == "cgroup2":
            out.setdefault("cgroup2", where)
        elif kind == "cgroup":
            for c in _V2_NEEDS:
                if c in opts:
                    out.setdefault(c, where)
    return out


def _writable_dir(path: Path) -> bool:
    return path.is_dir() and os.access(path, os.W_OK | os.X_OK)


def _v2_parent(mount: str, own: str) -> str | None:
    candidates = [os.environ.get(CGROUP_ENV, "")]
    candidates.append(str(Path(mount, own.lstrip("/"))))
    for cand in filter(None, candidates):
        path = Path(cand)
        try:
            enabled = (path / "cgroup.subtree_control").read_text().split()
        except OSError:
            continue
        if all(c in enabled for c in _V2_NEEDS) and _writable_dir(path):
            return str(path)
    return None


def probe_limits() -> LimitSupport:
    """Which mechanism applies for this process (blocking, quick: reads /proc and /sys)."""
    mounts, own = _mounts(), _own_cgroups()
    if "cgroup2" in mounts:
        parent = _v2_parent(mounts["cgroup2"], own.get("", "/"))
        if parent is not None:
            return LimitSupport("cgroup2", (parent,))
    if all(c in mounts for c in _V2_NEEDS):
        parents = tuple(str(Path(mounts[c], own.get(c, "/").lstrip("/"))) for c in _V2_NEEDS)
        if all(_writable_dir(Path(p)) for p in parents):
            return LimitSupport("cgroup1", parents)
    if "cgroup2" in mounts:
        reason = ("the cgroup v2 tree here is not delegated to this user with the pids and "
                  f"memory controllers (run the daemon in a `systemd-run --user --scope`, or "
                  f"set {CGROUP_ENV} to a delegated folder)")
    else:
        reason = "no writable cgroup hierarchy"
    return LimitSupport("rlimit", reason=reason)


def rlimits(policy: SandboxPolicy, support: LimitSupport) -> Limits:
    """The setrlimit part: CPU time always; processes and memory without a cgroup."""
    if support.mechanism != "rlimit":
        return Limits(cpu_seconds=policy.cpu_seconds)
    return Limits(
        address_space=0,
        data=policy.memory_mb << 20,
        cpu_seconds=policy.cpu_seconds,
        processes=_user_processes() + policy.pids if not _is_root() else 0,
    )


def _user_processes() -> int:
    uid, n = os.getuid(), 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    n += 1
            except OSError:
                continue
    return n


@dataclass
class Leaf:
    """One confined session's cgroup leaf: a folder per hierarchy."""

    folders: tuple[str, ...]
    procs: tuple[str, ...] = field(default=())


@dataclass
class Cgroups:
    """Leaves for confined sessions under `support`'s parents (one per daemon)."""

    support: LimitSupport

    def _base(self, parent: str) -> Path:
        return Path(parent, f"{PREFIX}-{os.getpid()}")

    def create(self, policy: SandboxPolicy) -> Leaf | None:
        """A new leaf with the policy's limits; None for rlimit. Raises `OSError`."""
        mech = self.support.mechanism
        if mech == "rlimit":
            return None
        name = f"s{next(_ids)}"
        folders: list[str] = []
        try:
            for parent in self.support.parents:
                base = self._base(parent)
                if mech == "cgroup2" and not base.exists():
                    base.mkdir()
                    # A v2 folder hands controllers to its children only if it enables them.
                    (base / "cgroup.subtree_control").write_text("+pids +memory")
                base.mkdir(exist_ok=True)
                leaf = base / name
                leaf.mkdir()
                folders.append(str(leaf))
                if (leaf / "pids.max").exists():
                    (leaf / "pids.max").write_text(str(policy.pids))
                memory = policy.memory_mb << 20
                for knob in ("memory.max", "memory.limit_in_bytes"):
                    if (leaf / knob).exists():
                        (leaf / knob).write_text(str(memory))
                for knob in ("memory.swap.max", "memory.memsw.limit_in_bytes"):
                    try:
                        if (leaf / knob).exists():
                            (leaf / knob).write_text("0" if knob == "memory.swap.max" else
                                                     str(memory))
                    except OSError:
                        pass  # swap accounting off: the memory limit still holds
        except OSError:
            self.remove(Leaf(tuple(folders)))
            raise
        return Leaf(tuple(folders), tuple(str(Path(f, "cgroup.procs")) for f in folders))

    def remove(self, leaf: Leaf | None) -> None:
        """Remove the leaf (its tree is gone: ended and reaped); logged if it cannot be."""
        if leaf is None:
            return
        for folder in leaf.folders:
            for attempt in range(REMOVE_TRIES):
                try:
                    os.rmdir(folder)
                except FileNotFoundError:
                    break
                except OSError as exc:
                    # EBUSY: a killed member has not finished exiting yet.
                    if attempt == REMOVE_TRIES - 1:
                        log.warning("cannot remove cgroup %s: %s", folder, exc)
                    else:
                        time.sleep(0.05)
                else:
                    break

    def close(self) -> None:
        """The daemon stops: remove its own (empty) folder in each hierarchy."""
        for parent in self.support.parents:
            try:
                os.rmdir(self._base(parent))
            except OSError:
                pass

    def sweep(self) -> list[str]:
        """At start: remove empty leaves daemons that are gone left behind."""
        removed: list[str] = []
        for parent in self.support.parents:
            for base in Path(parent).glob(f"{PREFIX}-*"):
                pid = base.name.removeprefix(f"{PREFIX}-")
                if not pid.isdigit() or int(pid) == os.getpid() or Path(f"/proc/{pid}").exists():
                    continue
                for leaf in [*base.iterdir(), base]:
                    if leaf.is_dir():
                        try:
                            os.rmdir(leaf)
                            removed.append(str(leaf))
                        except OSError:
                            pass
        return removed


def join_argv(leaf: Leaf | None, argv: Sequence[str]) -> list[str]:
    """`argv`, started by a shell that first moves itself into `leaf` (so nothing the
    command forks starts outside it); `argv` itself without a leaf."""
    if leaf is None:
        return list(argv)
    script = 'while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; exec "$@"'
    return ["/bin/sh", "-c", script, "sh", *leaf.procs, "--", *argv]


__all__ = [
    "CGROUP_ENV",
    "Cgroups",
    "Leaf",
    "LimitSupport",
    "join_argv",
    "probe_limits",
    "rlimits",
]
