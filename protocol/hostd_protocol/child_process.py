"""Every child process hostd starts, and the end of its whole tree (one module, one place).

The daemon starts drivers through it, drivers start their agents and servers through it (the
driver harness makes each driver process a subreaper and ends its tree at exit), and short
tools (git, probes) run through `run`. So one set of rules holds for every process hostd
starts:

- **Parent death does not depend on the spawning thread.** Linux ties PR_SET_PDEATHSIG (and
  bwrap's `--die-with-parent`, the same prctl) to the *thread* that forked the child. trio
  forks in worker threads it retires after 10 s idle, which killed every confined driver
  ~10 s after its start. Here every child is forked by one thread that lives as long as the
  process (`_Forker`), whoever asks: the parent-death signal then means "this process died".
- **No descendant escapes.** A process that starts children calls `become_subreaper`
  (PR_SET_CHILD_SUBREAPER): a descendant whose parent exits, `setsid` or not, is re-parented
  to it rather than to init, so `descendants(pid)` walks the whole tree while its root lives.
- **A tree is ended in one sweep** (`end_tree`): collect it, SIGSTOP every member so nothing
  forks or re-parents while we look, collect again until nothing new appears, then SIGKILL
  all. A gentle end (`end_tree(grace=...)`) sends SIGTERM first and waits, bounded.
- **Orphans come home.** A process that is a subreaper and not a driver (the daemon:
  `hostd serve`) also gets the orphans of a child that died without ending its own tree (a
  driver SIGKILLed from outside, or one that crashed): `end_orphans` ends and reaps every
  child it did not start through this module. It knows which those are: every child is
  registered, under one lock, by the forker thread as it is forked.
- **Pids are signalled only while they are known alive**: a child is signalled only before
  it is reaped (its pid cannot be recycled before), and a tree is read from /proc at once.
- **Between fork and exec** nothing runs where it can be avoided: `setpriv` (util-linux)
  sets the parent-death signal after the exec, so the fork can be a vfork; where it is
  missing, or rlimits are asked for, a `preexec_fn` runs only `prctl` (resolved before the
  fork) and `setrlimit`: no import, no lock a parent thread could hold.

stdlib only at import time (the CLI's one-shot commands use `run` and `descendants`); trio is
imported by the async face (`spawn`, `Child`), which needs `hostd-protocol[driver]`.
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import errno
import os
import queue
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    import trio

__all__ = [
    "Child",
    "Limits",
    "become_subreaper",
    "descendants",
    "end_orphans",
    "end_tree",
    "is_subreaper",
    "popen",
    "run",
    "spawn",
]

LINUX = sys.platform.startswith("linux")
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_PR_SET_NO_NEW_PRIVS = 38


def _libc_prctl() -> Callable[..., int] | None:
    if not LINUX:
        return None
    try:
        fn: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    return fn


#: `prctl`, resolved once in the parent (never looked up between fork and exec).
_PRCTL = _libc_prctl()


@dataclass(frozen=True)
class Limits:
    """setrlimit limits a child starts with (0: leave as inherited). They hold for the child
    and everything it starts (rlimits are inherited across fork and exec).

    `processes` is RLIMIT_NPROC, which counts every process of the real uid, and which Linux
    does not apply to uid 0 at all: a per-tree pid limit needs a cgroup (the sandbox's)."""

    #: RLIMIT_AS: bytes of address space per process (breaks runtimes that reserve
    #: address space up front, such as node: prefer `data`).
    address_space: int = 0
    #: RLIMIT_DATA: bytes of writable private memory (heap, anonymous maps) per process.
    data: int = 0
    #: RLIMIT_CPU: seconds of CPU time per process (SIGXCPU, then SIGKILL).
    cpu_seconds: int = 0
    #: RLIMIT_NPROC: processes of the real uid (see above).
    processes: int = 0

    def apply(self) -> None:  # in the child, between fork and exec
        for which, value in (
            (resource.RLIMIT_AS, self.address_space),
            (resource.RLIMIT_DATA, self.data),
            (resource.RLIMIT_CPU, self.cpu_seconds),
            (resource.RLIMIT_NPROC, self.processes),
        ):
            if value > 0:
                resource.setrlimit(which, (value, value))


#: util-linux `setpriv`: sets the parent-death signal and no_new_privs and then execs the
#: command, so the child needs no Python between fork and exec and can be started with
#: vfork (a full fork of a 35 MiB daemon costs ~8 ms, during which its other threads' page
#: faults wait). Without it, a `preexec_fn` does the same.
_SETPRIV = shutil.which("setpriv") if _PRCTL is not None else None


def _launch(
    argv: Sequence[str],
    pdeathsig: int,
    no_new_privs: bool,
    limits: Limits | None,
    env: Mapping[str, str] | None,
    cwd: str | None,
) -> tuple[list[str], Callable[[], None] | None]:
    """The argv to exec and the preexec function (if any) for these options."""
    if not (pdeathsig or no_new_privs or limits is not None):
        return list(argv), None
    if limits is not None or _SETPRIV is None:
        return list(argv), _preexec(int(pdeathsig), no_new_privs, limits)
    # setpriv would report a missing command itself, after the start: say it now, as
    # Popen would.
    exe = argv[0]
    if "/" in exe:
        found = os.path.join(cwd, exe) if cwd and not os.path.isabs(exe) else exe
        if not os.access(found, os.X_OK):
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), exe)
    elif shutil.which(exe, path=(env if env is not None else os.environ).get("PATH")) is None:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), exe)
    wrapper = [_SETPRIV]
    if pdeathsig:
        wrapper += ["--pdeathsig", signal.Signals(pdeathsig).name.removeprefix("SIG")]
    if no_new_privs:
        wrapper.append("--no-new-privs")
    return [*wrapper, "--", *argv], None


def _preexec(pdeathsig: int, no_new_privs: bool, limits: Limits | None) -> Callable[[], None]:
    prctl = _PRCTL

    def child() -> None:
        if prctl is not None:
            if pdeathsig:
                prctl(_PR_SET_PDEATHSIG, pdeathsig, 0, 0, 0)
            if no_new_privs:
                prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        if limits is not None:
            limits.apply()

    return child


#: Pids this process started through the module and has not reaped (see `end_orphans`).
_KNOWN: set[int] = set()
#: Held while a child is forked and registered, and while orphans are picked.
_KNOWN_LOCK = threading.Lock()
_SUBREAPER = False


def _popen_known(argv: Sequence[str], **options: Any) -> subprocess.Popen[bytes]:
    with _KNOWN_LOCK:
        proc: subprocess.Popen[bytes] = subprocess.Popen(list(argv), **options)
        _KNOWN.add(proc.pid)
    return proc


def _forget(pid: int) -> None:
    with _KNOWN_LOCK:
        _KNOWN.discard(pid)


class _Forker:
    """The one thread that forks every child of this process; it lives as long as the
    process, so a parent-death signal fires only when the process dies (module rules)."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[
            tuple[Callable[[], Any], concurrent.futures.Future[Any]]
        ] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def submit(self, job: Callable[[], Any]) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._serve, name="hostd-forker", daemon=True
                )
                self._thread.start()
        self._jobs.put((job, future))
        return future

    def _serve(self) -> None:
        while True:
            job, future = self._jobs.get()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(job())
            except BaseException as exc:  # handed to the caller, who raises it
                future.set_exception(exc)

    def _after_fork_in_child(self) -> None:
        # A forked copy of this process (not exec'd) has no forker thread: start afresh.
        self._jobs = queue.SimpleQueue()
        self._thread = None
        self._lock = threading.Lock()


_FORKER = _Forker()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_FORKER._after_fork_in_child)


def popen(
    argv: Sequence[str],
    *,
    pdeathsig: int = 0,
    no_new_privs: bool = False,
    limits: Limits | None = None,
    new_session: bool = True,
    **kwargs: Any,
) -> subprocess.Popen[bytes]:
    """`subprocess.Popen(argv, **kwargs)`, forked by the process's forker thread.

    `pdeathsig`: the signal the child gets when this process dies (0: none). `new_session`:
    its own session and process group (a terminal's Ctrl-C does not reach it; its group can
    be signalled as one). Blocks the caller for the fork and exec (milliseconds). Raises
    `OSError` if it cannot start.
    """
    argv, preexec = _launch(
        argv, pdeathsig, no_new_privs, limits, kwargs.get("env"), kwargs.get("cwd")
    )
    options = dict(kwargs, start_new_session=new_session, preexec_fn=preexec)
    future = _FORKER.submit(lambda: _popen_known(argv, **options))
    proc: subprocess.Popen[bytes] = future.result()
    return proc


def run(
    argv: Sequence[str],
    *,
    timeout: float,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    input: bytes | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """Run a short tool to its end (blocking; call it from a thread in trio code): its own
    session, stdout and stderr captured, its whole tree ended if it outlasts `timeout`
    (raises `subprocess.TimeoutExpired` then) or when the caller is interrupted."""
    proc = popen(
        argv,
        stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=dict(env) if env is not None else None,
        cwd=cwd,
    )
    try:
        with proc:
            try:
                out, err = proc.communicate(input, timeout=timeout)
            except BaseException:
                end_tree(proc.pid)
                proc.wait()
                raise
    finally:
        _forget(proc.pid)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


# --- trees ------------------------------------------------------------------------------------


def become_subreaper() -> bool:
    """Make this process the reaper of its orphaned descendants (Linux; else False)."""
    global _SUBREAPER
    if _PRCTL is None:
        return False
    _SUBREAPER = _PRCTL(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    return _SUBREAPER


def is_subreaper() -> bool:
    """Whether `become_subreaper` made this process one."""
    return _SUBREAPER


def end_orphans(rounds: int = 50) -> list[int]:
    """In a subreaper: end and reap every child this process did not start through the
    module (orphans re-parented to it), their trees included; returns their pids. A no-op
    in a process that is not a subreaper (blocking: up to `rounds` x 10 ms while killed
    members of an orphan's tree finish exiting and come home to be reaped)."""
    if not _SUBREAPER:
        return []
    me, ended = os.getpid(), []
    for _ in range(rounds):
        with _KNOWN_LOCK:
            strays = [c for c in children(me) if c not in _KNOWN]
        if not strays:
            break
        for pid in strays:
            if _alive(pid):
                end_tree(pid)
                ended.append(pid)
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
        time.sleep(0.01)
    return ended


def children(pid: int) -> list[int]:
    """The direct children of `pid` (every thread's), read from /proc; [] if it is gone."""
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out.extend(int(c) for c in f.read().split())
        except (OSError, ValueError):
            continue
    return out


def descendants(pid: int) -> list[int]:
    """Every descendant of `pid`, parents before children (not `pid` itself)."""
    out: list[int] = []
    seen = {pid}
    todo = [pid]
    while todo:
        for c in children(todo.pop()):
            if c not in seen:
                seen.add(c)
                out.append(c)
                todo.append(c)
    return out


def _signal_all(pids: Iterable[int], sig: int) -> None:
    for p in pids:
        try:
            os.kill(p, sig)
        except (ProcessLookupError, PermissionError):
            pass


def end_tree(pid: int, *, include_root: bool = True, grace: float = 0.0) -> list[int]:
    """End `pid`'s whole tree; returns the pids signalled (root first when included).

    With `grace`, SIGTERM first and up to `grace` seconds (blocking) for the tree to go;
    then, or at once, stop every member and SIGKILL them all (module rules). The root must
    be unreaped (a child of ours not yet waited for, or ourselves with include_root=False).
    """
    root = [pid] if include_root else []
    tree = root + descendants(pid)
    if not tree:
        return []
    if grace > 0:
        _signal_all(tree, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            left = [p for p in tree if _alive(p)] + [
                d for d in descendants(pid) if d not in tree
            ]
            if not left:
                return tree
            time.sleep(0.01)
    # Stop, collect again until nothing new appears (a member forked or re-parented while
    # we looked), then kill. A stopped process cannot fork; SIGKILL ends it stopped.
    stopped: list[int] = []
    current = tree
    for _ in range(64):
        new = [p for p in current if p not in stopped]
        if not new:
            break
        _signal_all(new, signal.SIGSTOP)
        stopped.extend(new)
        current = root + descendants(pid)
    _signal_all(stopped, signal.SIGKILL)
    return stopped


def _alive(pid: int) -> bool:
    """Running or stopped (a zombie has ended; its stat says Z)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3] not in (b"Z", b"X")


# --- the async face (trio) --------------------------------------------------------------------


class Child:
    """A started child (`spawn`): pipes as trio streams, its exit awaited on a pidfd.

    Public: `pid`, `returncode` (None until reaped), `stdin` / `stdout` / `stderr` (trio
    streams or None), `wait()`, `signal(sig, group=...)`, `end_tree()`.
    """

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        import trio

        self._popen = proc
        self.pid = proc.pid
        self._pidfd = os.pidfd_open(proc.pid) if hasattr(os, "pidfd_open") else -1
        self._wait_lock = trio.Lock()
        # FdStream takes ownership of a descriptor: give it its own, close Popen's files.
        self.stdin: trio.lowlevel.FdStream | None = _stream(proc.stdin)
        self.stdout: trio.lowlevel.FdStream | None = _stream(proc.stdout)
        self.stderr: trio.lowlevel.FdStream | None = _stream(proc.stderr)

    @property
    def returncode(self) -> int | None:
        return self._popen.poll()

    async def wait(self) -> int:
        """Wait for the exit and reap it; returns the exit code (-N: killed by signal N)."""
        import trio

        async with self._wait_lock:
            while self._popen.poll() is None:
                if self._pidfd >= 0:
                    await trio.lowlevel.wait_readable(self._pidfd)
                else:  # no pidfd (old kernel): a thread waits
                    await trio.to_thread.run_sync(self._popen.wait, abandon_on_cancel=True)
            self._close_pidfd()
            _forget(self.pid)
        return self._popen.returncode

    def signal(self, sig: int, *, group: bool = False) -> None:
        """Send `sig` to the child (and its process group), only while it is unreaped."""
        if self._popen.returncode is not None or self._popen.poll() is not None:
            return
        if group:
            try:
                os.killpg(self.pid, sig)
                return
            except (ProcessLookupError, PermissionError):
                pass
        try:
            os.kill(self.pid, sig)
        except ProcessLookupError:
            pass

    def end_tree(self) -> None:
        """SIGKILL the child, its process group and every descendant (while unreaped)."""
        if self._popen.poll() is not None:
            return
        end_tree(self.pid)
        self.signal(signal.SIGKILL, group=True)

    def _close_pidfd(self) -> None:
        if self._pidfd >= 0:
            os.close(self._pidfd)
            self._pidfd = -1

    def __del__(self) -> None:
        if getattr(self, "_pidfd", -1) >= 0:
            os.close(self._pidfd)


def _stream(f: IO[bytes] | None) -> trio.lowlevel.FdStream | None:
    import trio

    if f is None:
        return None
    stream = trio.lowlevel.FdStream(os.dup(f.fileno()))
    f.close()
    return stream


async def spawn(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    stdin: int | IO[Any] | None = subprocess.PIPE,
    stdout: int | IO[Any] | None = subprocess.PIPE,
    stderr: int | IO[Any] | None = subprocess.PIPE,
    pdeathsig: int = signal.SIGKILL,
    no_new_privs: bool = False,
    limits: Limits | None = None,
    new_session: bool = True,
    pass_fds: Sequence[int] = (),
) -> Child:
    """Start `argv` (see `popen`) without blocking the trio thread. Raises `OSError`."""
    import trio

    argv, preexec = _launch(argv, pdeathsig, no_new_privs, limits, env, cwd)
    future = _FORKER.submit(
        lambda: _popen_known(
            argv,
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            start_new_session=new_session,
            pass_fds=tuple(pass_fds),
            preexec_fn=preexec,
        )
    )
    done = trio.Event()
    token = trio.lowlevel.current_trio_token()
    future.add_done_callback(lambda _: token.run_sync_soon(done.set))
    # Shielded: a fork + exec takes milliseconds, and a child started for a caller that
    # was cancelled meanwhile must still be ended, not leaked.
    with trio.CancelScope(shield=True):
        await done.wait()
    proc: subprocess.Popen[bytes] = future.result()
    try:
        child = Child(proc)
    except OSError:
        proc.kill()
        proc.wait()
        raise
    try:
        await trio.lowlevel.checkpoint_if_cancelled()
    except trio.Cancelled:
        child.end_tree()
        with trio.CancelScope(shield=True):
            await child.wait()
        raise
    return child


# --- the watchdog (a process of its own) ------------------------------------------------------

#: How a process starts its watchdog: `[python, *WATCHDOG_ARGS]`.
WATCHDOG_ARGS = ("-I", "-c", "from hostd_protocol.child_process import watchdog; watchdog()")


def watchdog() -> None:
    """The body of a watchdog process: read "+pid" / "-pid" lines on stdin until it ends
    (its owner exited or was killed: the kernel closes the pipe either way), then end the
    tree of every pid still listed. Ignores SIGINT, SIGTERM and SIGHUP: it ends only with its
    pipe. The owner lists a child while it is unreaped and unlists it before the reap."""
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, signal.SIG_IGN)
    pids: dict[int, None] = {}
    for line in sys.stdin.buffer:
        line = line.strip()
        try:
            n = int(line[1:])
        except ValueError:
            continue
        if line[:1] == b"+":
            pids[n] = None
        elif line[:1] == b"-":
            pids.pop(n, None)
    for pid in pids:
        end_tree(pid)
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
