"""`hostd_protocol.child_process`: parent death does not depend on the spawning thread, and a
tree ends whole (a `setsid` grandchild included)."""

from __future__ import annotations

import ctypes
import signal
import subprocess
import sys
import threading

import pytest
import trio

from hostd_protocol import child_process
from tests.polling import holds_within, thread_retired

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="PDEATHSIG and /proc are Linux-only"
)


def _in_a_thread(fn):  # type: ignore[no-untyped-def]
    """Run `fn` in a thread that then ends (as trio's idle workers do); return its result."""
    box: list[object] = []
    t = threading.Thread(target=lambda: box.append(fn()))
    t.start()
    t.join()
    return box[0]


def _echo(proc: subprocess.Popen[bytes]) -> bytes:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(b"ping\n")
    proc.stdin.flush()
    return proc.stdout.readline()


def test_the_kernel_ties_pdeathsig_to_the_thread_that_forked() -> None:
    """The defect this module exists for: a child with PR_SET_PDEATHSIG forked by a thread
    that then ends is killed, though its parent process lives on."""
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    proc = _in_a_thread(
        lambda: subprocess.Popen(
            ["cat"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            preexec_fn=lambda: prctl(1, int(signal.SIGKILL), 0, 0, 0),
        )
    )
    with proc:
        assert proc.wait(timeout=10) == -signal.SIGKILL


def test_a_child_started_for_a_thread_that_ended_lives_on() -> None:
    proc = _in_a_thread(
        lambda: child_process.popen(
            ["cat"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            pdeathsig=signal.SIGKILL,
        )
    )
    with proc:
        try:
            assert _echo(proc) == b"ping\n"
            assert proc.poll() is None
        finally:
            proc.kill()


async def test_spawn_from_trio_after_its_worker_threads_retired(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from trio._core import _thread_cache  # the idle timeout of trio's worker threads

    monkeypatch.setattr(_thread_cache, "IDLE_TIMEOUT", 0.05)
    with trio.fail_after(10):
        child = await child_process.spawn(["cat"], stderr=None)
        try:
            worker = await trio.to_thread.run_sync(threading.get_ident)
            await thread_retired(worker)
            assert child.stdin is not None and child.stdout is not None
            await child.stdin.send_all(b"ping\n")
            assert await child.stdout.receive_some(5) == b"ping\n"
            assert child.returncode is None
        finally:
            child.end_tree()
            assert await child.wait() == -signal.SIGKILL
            await child.stdin.aclose()  # type: ignore[union-attr]
            await child.stdout.aclose()  # type: ignore[union-attr]


#: A child that starts a grandchild in its own session, prints the grandchild's pid, waits.
_FAMILY = (
    "import subprocess, sys, time\n"
    "g = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'],"
    " start_new_session=True)\n"
    "print(g.pid, flush=True)\n"
    "time.sleep(600)\n"
)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def test_end_tree_ends_a_setsid_grandchild() -> None:
    proc = child_process.popen([sys.executable, "-c", _FAMILY], stdout=subprocess.PIPE)
    with proc:
        assert proc.stdout is not None
        grandchild = int(proc.stdout.readline())
        assert child_process.descendants(proc.pid) == [grandchild]
        ended = child_process.end_tree(proc.pid)
        assert sorted(ended) == sorted([proc.pid, grandchild])
        assert proc.wait(timeout=10) == -signal.SIGKILL
    # Ours to end, not ours to reap (init or a subreaper reaps it): SIGKILL is delivered
    # asynchronously, so its end is waited for (bounded).
    assert _ends(grandchild)


def _ends(pid: int, within: float = 10.0) -> bool:
    return holds_within(lambda: not _alive(pid), within)


def test_a_subreaper_keeps_an_orphaned_setsid_grandchild_in_its_tree() -> None:
    """In a process of its own (subreaping is process-wide): the child exits, its setsid'd
    child is re-parented to the subreaper, so ending the subreaper's tree still ends it."""
    code = (
        "import os, subprocess, sys\n"
        "from hostd_protocol import child_process as cp\n"
        "assert cp.become_subreaper()\n"
        f"p = cp.popen([sys.executable, '-c', {_FAMILY!r}], stdout=subprocess.PIPE)\n"
        "g = int(p.stdout.readline())\n"
        "p.kill(); p.wait()\n"
        "assert cp.children(os.getpid()) == [g], cp.children(os.getpid())\n"
        "cp.end_tree(os.getpid(), include_root=False, grace=0.5)\n"
        "os.waitpid(g, 0)\n"
        "print('ended', g)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("ended ")
    assert _ends(int(out.stdout.split()[1]))


def test_run_ends_the_tree_of_a_tool_that_outlasts_its_timeout() -> None:
    with pytest.raises(subprocess.TimeoutExpired):
        child_process.run([sys.executable, "-c", "import time; time.sleep(600)"], timeout=0.2)
    done = child_process.run([sys.executable, "-c", "print('hi')"], timeout=30)
    assert (done.returncode, done.stdout) == (0, b"hi\n")


def test_end_orphans_ends_what_came_home_and_spares_known_children() -> None:
    """In a process of its own: a subreaper's child that it started through the module
    lives on; the setsid grandchild of a child that died is re-parented to it and ended."""
    code = (
        "import os, subprocess, sys\n"
        "from hostd_protocol import child_process as cp\n"
        "assert cp.end_orphans() == []  # not a subreaper yet: a no-op\n"
        "assert cp.become_subreaper()\n"
        "known = cp.popen(['cat'], stdin=subprocess.PIPE)\n"
        f"p = cp.popen([sys.executable, '-c', {_FAMILY!r}], stdout=subprocess.PIPE)\n"
        "g = int(p.stdout.readline())\n"
        "p.kill(); p.wait(); p.stdout.close()\n"
        "assert sorted(cp.children(os.getpid())) == sorted([known.pid, g])\n"
        "assert cp.end_orphans() == [g]\n"
        "assert cp.children(os.getpid()) == [known.pid] and known.poll() is None\n"
        "known.stdin.close(); known.wait()\n"
        "print('ok')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=False
    )
    assert (out.returncode, out.stdout) == (0, "ok\n"), out.stderr


def test_a_child_dies_with_the_process_that_started_it() -> None:
    """The parent-death signal holds whichever way it is set (setpriv or preexec)."""
    code = (
        "import os, signal, subprocess, sys\n"
        "from hostd_protocol import child_process as cp\n"
        "for lim in (None, cp.Limits(cpu_seconds=600)):\n"
        "    p = cp.popen(['sleep', '600'], pdeathsig=signal.SIGKILL, limits=lim)\n"
        "    print(p.pid, flush=True)\n"
        "os._exit(0)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=False
    )
    assert out.returncode == 0, out.stderr
    pids = [int(p) for p in out.stdout.split()]
    assert len(pids) == 2 and all(_ends(p) for p in pids)


def test_a_missing_command_is_an_oserror_at_the_start() -> None:
    with pytest.raises(FileNotFoundError):
        child_process.popen(["hostd-no-such-command"], pdeathsig=signal.SIGTERM)
    with pytest.raises(FileNotFoundError):
        child_process.popen(["/nonexistent/hostd-cmd"], pdeathsig=signal.SIGTERM)
