"""`hostd serve`, `hostd status`, `hostd stop`: the daemon's process life.

`serve` runs the daemon in the foreground, logging to stderr and to `<log dir>/hostd.log`;
SIGTERM / SIGINT stop it gracefully (stop turns, flush, remove the socket). `serve --detach`
starts the same command as a new session leader with its output on the log file and returns
once the child says it serves (a readiness pipe, not a guess), or prints why it did not.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import signal
import sys
import time
from typing import TYPE_CHECKING, Any

from hostd.cli.common import NOT_RUNNING, fail, out, paths_from, request, requests, text_table
from hostd.shell.paths import HOME_ENV, Paths
from hostd_protocol import child_process

if TYPE_CHECKING:
    from hostd.shell.daemon import DaemonConfig

log = logging.getLogger("hostd")

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def setup_logging(paths: Paths, level: str, *, to_stderr: bool = True) -> logging.Handler:
    """A rotating file in the log dir (+ stderr unless detached, where stderr already goes
    to that file); returns the file handler (close it at exit)."""
    import logging.handlers

    from hostd.shell.paths import ensure_private_dir, ensure_private_file

    # Private, ours, never through a link another user planted (raises ConfigError).
    ensure_private_dir(paths.log_dir)
    ensure_private_file(paths.log_path)
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    file_handler = logging.handlers.RotatingFileHandler(
        paths.log_path, maxBytes=10 * 1024 * 1024, backupCount=3, encoding="utf-8"
    )
    file_handler.setFormatter(fmt)
    root = logging.getLogger()
    root.setLevel(level.upper())
    root.addHandler(file_handler)
    if to_stderr:
        stream_handler = logging.StreamHandler(sys.stderr)
        stream_handler.setFormatter(fmt)
        root.addHandler(stream_handler)
    return file_handler


def cmd_serve(args: argparse.Namespace) -> int:
    paths = paths_from(args)
    nice = _driver_nice(args)
    if isinstance(nice, str):
        return fail(nice)
    # Checked before detaching: the detached daemon's own complaint would only reach its log.
    if args.log_level.upper() not in LOG_LEVELS:
        return fail(f"--log-level must be one of {', '.join(LOG_LEVELS)}, not {args.log_level!r}")
    if args.flush_interval is not None and not 0 <= args.flush_interval < math.inf:
        return fail(f"--flush-interval is in seconds, 0 or more, not {args.flush_interval:g}")
    if args.detach:
        return _detach(paths, args)
    import trio

    from hostd.shell import probe
    from hostd.shell.daemon import serve_daemon
    from hostd.shell.server import DaemonAlreadyRunning
    from hostd_protocol.errors import HostdError

    try:
        paths.ensure()  # a squatted or foreign folder: one line saying what to do
        # Detached (`--ready-fd`), stderr is the log file already (see `_detach`).
        file_handler = setup_logging(paths, args.log_level, to_stderr=args.ready_fd is None)
    except HostdError as exc:
        if args.ready_fd is not None:
            try:
                os.write(args.ready_fd, f"error {exc.message}\n".encode())
            finally:
                os.close(args.ready_fd)
        print(f"hostd: {exc.message}", file=sys.stderr)
        return 1
    if paths.home is not None:
        # Every process the daemon starts finds hostd's folders as the daemon does (the ACP
        # driver reads `<config>/acp-agents.toml`): a `--home` daemon passes it on as HOSTD_HOME.
        os.environ[HOME_ENV] = str(paths.home)
    ready_fd: int | None = args.ready_fd
    config = serve_config(args, nice)
    # The daemon process (not a test's in-process daemon) reaps the orphans of a driver that
    # died without ending its own tree; the supervisor ends them (`child_process`).
    child_process.become_subreaper()

    def tell(msg: str) -> None:
        nonlocal ready_fd
        if ready_fd is not None:
            try:
                os.write(ready_fd, (msg + "\n").encode())
            finally:
                os.close(ready_fd)
                ready_fd = None

    async def main() -> None:
        async with trio.open_nursery() as nursery:

            async def run_daemon(task_status: trio.TaskStatus[object]) -> None:
                try:
                    await serve_daemon(paths, config=config, task_status=task_status)
                finally:
                    # Shutdown is complete (or failed): stop listening for signals too.
                    nursery.cancel_scope.cancel()

            # Catch the signals before saying "ready": a SIGTERM right after it must stop the
            # daemon gracefully, not kill it with the default action.
            with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as sigs:
                daemon = await nursery.start(run_daemon)
                tell(f"ready {os.getpid()}")
                async for signum in sigs:
                    log.info("signal %s: shutting down", signal.Signals(signum).name)
                    daemon.request_shutdown()

    try:
        trio.run(main, instruments=probe.instruments())  # none unless HOSTD_PROBE is set
    except (HostdError, BaseExceptionGroup) as exc:
        err = _first_hostd_error(exc)
        if err is None:
            raise
        if isinstance(err, DaemonAlreadyRunning):
            tell(f"running {err.details.get('pid') or ''}")
        else:
            tell(f"error {err.message}")
        print(f"hostd: {err.message}", file=sys.stderr)
        return 1
    finally:
        tell("error the daemon exited before it was ready")
        logging.getLogger().removeHandler(file_handler)
        file_handler.close()
    return 0


def serve_config(args: argparse.Namespace, nice: int | None) -> DaemonConfig:
    """The daemon's configuration for `hostd serve` (`nice`: the checked `--driver-nice`)."""
    from hostd.shell.daemon import DaemonConfig
    from hostd.shell.interpreter import SERVE_SWITCH_INTERVAL

    # This process is the daemon: it owns the interpreter's settings (hostd.shell.interpreter).
    config_kw: dict[str, object] = {
        "default_driver": args.default_driver,
        "freeze_startup_heap": True,
        "switch_interval": SERVE_SWITCH_INTERVAL,
    }
    if args.flush_interval is not None:
        config_kw["flush_interval"] = args.flush_interval
    if nice is not None:
        config_kw["driver_nice"] = nice
    return DaemonConfig(**config_kw)  # type: ignore[arg-type]


def _first_hostd_error(exc: BaseException) -> Any:
    from hostd_protocol.errors import HostdError

    if isinstance(exc, HostdError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for sub in exc.exceptions:
            found = _first_hostd_error(sub)
            if found is not None:
                return found
    return None


def _detach(paths: Paths, args: argparse.Namespace) -> int:
    """Start `hostd serve` in a new session; return when it is ready (or failed)."""
    from hostd_protocol.errors import HostdError

    try:
        paths.ensure()
    except HostdError as exc:
        return fail(exc.message)
    read_fd, write_fd = os.pipe()
    argv = [sys.executable, "-m", "hostd", "serve", "--ready-fd", str(write_fd),
            "--log-level", args.log_level]
    if paths.home is not None:
        argv += ["--home", str(paths.home)]
    if args.default_driver:
        argv += ["--default-driver", args.default_driver]
    if args.flush_interval is not None:
        argv += ["--flush-interval", str(args.flush_interval)]
    if args.driver_nice is not None:
        argv += ["--driver-nice", str(args.driver_nice)]
    from hostd.shell.paths import open_private_file

    # The daemon's stdout/stderr go to its log file too, so a start that fails before its
    # logging is set up (or a crash) still leaves its reason where the error points. Opened
    # ours, 0600, never through a link (`paths.ensure` checked the folder).
    try:
        fd = open_private_file(paths.log_path, os.O_WRONLY | os.O_APPEND)
    except HostdError as exc:
        return fail(exc.message)
    with open(os.devnull, "rb") as devnull_in, os.fdopen(fd, "ab") as log_out:
        # Its own session, no parent-death signal: the daemon outlives this command.
        proc = child_process.popen(
            argv,
            stdin=devnull_in,
            stdout=log_out,
            stderr=log_out,
            pass_fds=(write_fd,),
        )
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as pipe:
        line = pipe.readline().decode().strip()
    word, _, rest = line.partition(" ")
    if word == "ready":
        out().print(f"hostd started (pid {proc.pid}), socket {paths.socket_path}", markup=False)
        return 0
    if word == "running":
        proc.wait()
        out().print(f"hostd is already running{f' (pid {rest})' if rest else ''}", markup=False)
        return 0
    code = proc.wait()
    reason = rest or f"it exited with code {code}"
    return fail(f"hostd did not start: {reason} (log: {paths.log_path})")


def cmd_status(args: argparse.Namespace) -> int:
    from hostd_protocol.client_messages import ListSchedules, Status, StatusResult

    # The schedule list too: `StatusResult.schedules` counts the enabled ones only, and the
    # line must agree with `hostd schedule list`, paused ones included.
    results = requests(args, Status(id=0), ListSchedules(id=0))
    if isinstance(results, int):
        return results
    st, listed = results
    assert isinstance(st, StatusResult)
    log_file = str(paths_from(args).log_path)
    # Probed here, as the same user on the same machine the daemon runs on: the wire's
    # status stays as it is (no daemon-side field to keep in step with the clients).
    from hostd.shell.drivers.limits import probe_limits
    from hostd.shell.drivers.sandbox import probe

    sandbox = probe().summary()
    limits = probe_limits().summary()
    if args.json:
        from hostd.cli.common import plain, print_json

        print_json({**plain(st), "log": log_file, "sandbox": sandbox, "limits": limits})
        return 0
    rows = [
        ("pid", st.pid),
        ("version", st.version),
        ("uptime", f"{st.uptime_s:.0f} s"),
        ("topics", st.topics),
        ("active turns", st.active_turns),
        ("connections", st.connections),
        ("drivers running", st.drivers_running),
        ("warm drivers", st.warm_drivers),
        ("socket", st.socket_path),
        ("data", st.data_dir),
        ("log", log_file),
        ("sandbox", sandbox),
        ("confined limits", limits),
    ]
    if listed.schedules:
        from hostd.cli.schedule_cmds import due_text, local_zone

        nxt = "-"
        if st.next_schedule_due is not None:
            nxt = f"{st.next_schedule_id} " + due_text(st.next_schedule_due, local_zone(), time.time())
        total = len(listed.schedules)
        paused = sum(1 for s in listed.schedules if not s.enabled)
        counted = f"{total - paused} enabled, {paused} paused" if paused else "all enabled"
        rows.insert(6, ("schedules", f"{total} ({counted})"))
        rows.insert(7, ("next scheduled run", nxt))
    out().print("hostd\n" + text_table(None, rows), markup=False)
    return 0


def cmd_stop(args: argparse.Namespace) -> int:
    from hostd_protocol.client_messages import Shutdown

    if args.topic:
        from hostd.cli.manage_cmds import cmd_stop_turn

        return cmd_stop_turn(args)
    if args.row:
        return fail("--row needs a topic: hostd stop TOPIC --row ROW")

    paths = paths_from(args)
    pid = _lock_pid(paths)
    # The daemon closes our connection once its turns are stopped and the store is flushed.
    # Stopped is what was asked for: no daemon is said so, without advice to start one.
    res = request(args, Shutdown(id=0), wait_closed=True, if_not_running="nothing to stop")
    if res is NOT_RUNNING:
        return 0
    if isinstance(res, int):
        return res
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        if not _lock_held(paths):
            out().print("hostd stopped" + (f" (pid {pid})" if pid else ""), markup=False)
            return 0
        time.sleep(0.05)
    return fail(f"hostd did not stop within {args.timeout:.0f} s" + (f" (pid {pid})" if pid else ""))


def _lock_pid(paths: Paths) -> int | None:
    """The pid the daemon wrote in its lock file (what `hostd.shell.server.read_lock_pid` reads,
    without importing the server and trio)."""
    try:
        text = paths.lock_path.read_text().strip()
        return int(text) if text else None
    except (OSError, ValueError):
        return None


def _lock_held(paths: Paths) -> bool:
    import fcntl

    try:
        fd = os.open(paths.lock_path, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def _driver_nice(args: argparse.Namespace) -> int | str | None:
    """`--driver-nice`, else `$HOSTD_DRIVER_NICE`, else None (the default); a message when
    the value is not a nice value a process may lower itself to."""
    raw: object = args.driver_nice
    if raw is None:
        raw = os.environ.get("HOSTD_DRIVER_NICE") or None
        if raw is None:
            return None
    try:
        value = int(str(raw))
    except ValueError:
        value = -1
    if not 0 <= value <= 19:
        return f"--driver-nice (or HOSTD_DRIVER_NICE) must be 0 (off) to 19, not {raw!r}"
    return value
