"""What a confined sandbox policy costs on time to first chunk (scripted driver).

Side by side in one daemon: a topic with no sandbox and one with `sandbox = "confined"`
(bubblewrap: own pid/ipc/uts/net namespaces, home and the daemon's folders hidden):

- cold: a new topic, no driver process yet: send -> first chunk at a window (for the
  confined one this includes bwrap setting up the namespaces and mounts);
- warm: a new topic whose driver was prewarmed (the spare is started inside the sandbox
  too, so the sandbox is paid before the send);
- hot: the next send on an open session (the sandbox should cost nothing here);
- the Unix-socket filter (`hostd/shell/drivers/unix_socket_filter.py`, session 9): every
  confined driver starts through `python -I -S <filter> -- driver...`, which installs the
  seccomp filter and execs the driver. Its share of the cold start: that command around
  `/bin/true`, minus `/bin/true` alone, median of interleaved pairs (outside bwrap: the
  filter's own cost, not the sandbox's).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from typing import Any

from hostd_dev.bench.control import with_client
from hostd_dev.bench.procs import DaemonProc
from hostd_dev.bench.report import Context, Result
from hostd_dev.bench.stats import percentile
from hostd_dev.bench.ttft import _first_chunk, _wait_warm

GOAL = ("confined cold - unconfined cold small (tens of ms); warm and hot about equal; the "
        "Unix-socket filter ~20 ms per confined cold start")


def _filter_cost_ms(pairs: int) -> tuple[float, float]:
    """(filter + true, true alone) medians in ms, interleaved so the machine's load moves
    both alike."""
    from hostd.shell.drivers import unix_socket_filter

    true = ["/bin/true"]
    filtered = [sys.executable, "-I", "-S", unix_socket_filter.__file__, "--", *true]
    with_filter: list[float] = []
    bare: list[float] = []
    for _ in range(pairs):
        for argv, out in ((filtered, with_filter), (true, bare)):
            t0 = time.perf_counter()
            subprocess.run(argv, check=True)
            out.append((time.perf_counter() - t0) * 1000)
    return statistics.median(with_filter), statistics.median(bare)

POLICIES = {"none": "none", "confined": "confined"}


def run(ctx: Context) -> Result:
    from hostd.shell.drivers.sandbox import probe

    res = Result("sandbox-ttft", GOAL)
    support = probe()
    if not support.available:
        res.skipped = f"sandbox {support.summary()}"
        return res
    hot_sends = 5 if ctx.quick else 20
    pairs = 5 if ctx.quick else 15
    for _ in range(ctx.runs):
        filtered, bare = _filter_cost_ms(pairs)
        res.add("Unix-socket filter: extra per confined cold start", "ms", filtered - bare,
                goal=("<=", 40))
    res.notes.append(
        f"Unix-socket filter: python -I -S <filter> -- /bin/true minus /bin/true, median of "
        f"{pairs} interleaved pairs per run"
    )
    res.notes.append(
        f"bubblewrap {support.version}; cold/warm: one new topic per run and policy; hot: "
        f"{hot_sends} sends per run on an open session"
    )
    with DaemonProc() as daemon:

        async def measure(client: Any) -> None:
            t = await client.create_topic(title="sandbox-warmup", driver="scripted",
                                          options={"sandbox": "confined"})
            await _first_chunk(client, t.id)  # lazy imports, the sandbox probe
            for _ in range(ctx.runs):
                cold: dict[str, float] = {}
                warm: dict[str, float] = {}
                for name, policy in POLICIES.items():
                    opts = {"sandbox": policy}
                    t = await client.create_topic(title=f"cold-{name}", driver="scripted",
                                                  options=opts)
                    cold[name], _, _ = await _first_chunk(client, t.id)
                    res.add(f"{name}: cold send -> first chunk", "ms", cold[name] * 1000)

                    t = await client.create_topic(title=f"warm-{name}", driver="scripted",
                                                  options=opts)
                    await client.prewarm(t.id)
                    await _wait_warm(client)
                    warm[name], _, _ = await _first_chunk(client, t.id)
                    res.add(f"{name}: warm send -> first chunk", "ms", warm[name] * 1000)

                    hot = [(await _first_chunk(client, t.id))[0] * 1000 for _ in range(hot_sends)]
                    res.add(f"{name}: hot send -> first chunk, p50", "ms", percentile(hot, 50))
                res.add("sandbox cost, cold", "ms", (cold["confined"] - cold["none"]) * 1000)
                res.add("sandbox cost, warm", "ms", (warm["confined"] - warm["none"]) * 1000)

        with_client(daemon, measure)
    return res
