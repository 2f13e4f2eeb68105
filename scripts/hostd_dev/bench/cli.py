"""CLI: `hostd topics` round trip and daemon start-to-ready, with import-time offenders.

Baseline: `python -c pass` (the interpreter's own start-up: what no CLI can beat).
`python -X importtime` of both commands names the modules that cost the most.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from hostd_dev.bench.procs import PYTHON, DaemonProc
from hostd_dev.bench.report import Context, Result

GOAL = "`hostd topics` round trip <= 150 ms; daemon start-to-ready <= 300 ms"

TOP = 8


def _wall(argv: list[str], env: dict[str, str] | None = None) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, env=env, check=False)
    dt = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {proc.stderr.decode()[-500:]}")
    return dt


def importtime_offenders(stderr: str, top: int = TOP) -> list[tuple[str, float, float]]:
    """(module, cumulative ms, self ms) of the top-level imports that cost the most.

    `-X importtime` prints `import time: self | cumulative | name`, nested names indented;
    a top-level import (no indent) is one the program asked for, its cumulative time covers
    everything it pulled in.
    """
    rows: list[tuple[str, float, float]] = []
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        parts = line[len("import time:") :].split("|")
        if len(parts) != 3:
            continue
        self_us, cum_us, name = parts
        # One space after the bar, then two per nesting level.
        depth = (len(name) - len(name.lstrip(" ")) - 1) // 2
        if depth == 0:
            rows.append((name.strip(), int(cum_us) / 1000, int(self_us) / 1000))
    rows.sort(key=lambda r: -r[1])
    return rows[:top]


def _describe(offenders: list[tuple[str, float, float]]) -> str:
    return ", ".join(f"{name} {cum:.0f} ms" for name, cum, _ in offenders)


def run(ctx: Context) -> Result:
    res = Result("cli", GOAL)
    script = Path(PYTHON).parent / "hostd"  # the console script users run
    hostd_cmd = [str(script)] if script.exists() else [PYTHON, "-m", "hostd"]
    n = 2 if ctx.quick else 10

    for label, code in (("pass", "pass"), ("import trio", "import trio")):
        _wall([PYTHON, "-c", code])
        for _ in range(n):
            ms = _wall([PYTHON, "-c", code]) * 1000
            res.add(f"bare python -c '{label}'", "ms", ms, baseline=True)

    # The daemon's imports: run it with -X importtime until ready (also the warm-up start).
    if not ctx.quick:
        with DaemonProc(python_args=("-X", "importtime")) as d:
            log = d.log_text()
        res.notes.append(f"`hostd serve` imports: {_describe(importtime_offenders(log))}")

    # Daemon start-to-ready: a fresh HOSTD_HOME each time.
    for i in range(ctx.runs):
        daemon = DaemonProc().start()
        try:
            res.add("daemon start -> ready", "ms", daemon.ready_s * 1000, goal=("<=", 300.0))
            if i < ctx.runs - 1:
                continue
            argv = [*hostd_cmd, "--home", str(daemon.home), "topics"]
            _wall(argv)
            for _ in range(n):
                ms = _wall(argv) * 1000
                res.add("`hostd topics` round trip", "ms", ms, goal=("<=", 150.0))
            env = {**os.environ, "PYTHONPROFILEIMPORTTIME": "1"}
            proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
            offenders = _describe(importtime_offenders(proc.stderr))
            res.notes.append(f"`hostd topics` imports: {offenders}")
        finally:
            daemon.stop()
    return res
