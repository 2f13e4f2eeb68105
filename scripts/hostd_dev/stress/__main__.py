"""`python -m hostd_dev.stress` (what `scripts/stress` runs): the long reliability campaigns.

    scripts/stress --kills 200            kill -9 / restart campaign
    scripts/stress --soak 30              30-minute soak
    scripts/stress --fuzz 100000          socket fuzzing (seeded random cases)
    scripts/stress --kills 50 --fuzz 20000 --soak 5 --seed 7

Each prints its figures (paste them into docs/reliability.md) and exits 1 if anything was
violated. Folders are made under /tmp (short, for the socket path) and removed unless
--keep is given.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import trio


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="scripts/stress", description=__doc__.split("\n\n")[0])
    p.add_argument("--kills", type=int, default=0, help="kill -9 / restart cycles")
    p.add_argument("--topics", type=int, default=3, help="topics streaming in the crash run")
    p.add_argument("--soak", type=float, default=0.0, metavar="MINUTES", help="soak duration")
    p.add_argument("--soak-topics", type=int, default=8)
    p.add_argument("--fuzz", type=int, default=0, metavar="N", help="fuzzed connections")
    p.add_argument("--seed", type=int, default=int(time.time()) % 100_000)
    p.add_argument("--keep", action="store_true", help="keep the daemon folders")
    args = p.parse_args(argv)
    if not (args.kills or args.soak or args.fuzz):
        p.error("nothing to do: give --kills N, --soak MINUTES and/or --fuzz N")
    print(f"seed {args.seed}", flush=True)
    return trio.run(_run, args)


async def _run(args: argparse.Namespace) -> int:
    failed = False
    homes: list[Path] = []

    def home(prefix: str) -> Path:
        path = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
        homes.append(path)
        return path

    def say(msg: str) -> None:
        print(msg, flush=True)

    try:
        if args.fuzz:
            from hostd.client import open_client
            from hostd_dev.stress.fuzz import run_fuzz
            from hostd_dev.stress.process import DaemonProcess

            daemon = DaemonProcess(home("hdf"))
            await daemon.start()
            try:
                async with open_client(daemon.paths) as c:
                    t = await c.create_topic(driver="scripted")
                    await c.send(t.id, "/text stored before the fuzzing\nq", "start")
                before = daemon.sample()
                fuzz = await run_fuzz(daemon.paths.socket_path, args.fuzz, seed=args.seed,
                                      existing_topics=[t.id])
                after = daemon.sample()
                alive = daemon.running
            finally:
                await daemon.stop()
            say(f"fuzz: {fuzz.summary()}; daemon alive: {alive}; RSS {before.rss_kib // 1024}->"
                f"{after.rss_kib // 1024} MiB, fds {before.fds}->{after.fds}")
            for problem in fuzz.problems[:50]:
                say(f"  PROBLEM {problem}")
            failed |= bool(fuzz.problems) or not alive
        if args.kills:
            from hostd_dev.stress.crash import run_crash_campaign

            crash = await run_crash_campaign(home("hdc"), kills=args.kills, topics=args.topics,
                                             seed=args.seed, log=say)
            say(f"crash: {crash.summary()}")
            for v in crash.violations[:50]:
                say(f"  VIOLATION {v}")
            for stall in crash.stalls[:20]:
                say(f"  stalled life: {stall}")
            failed |= bool(crash.violations)
        if args.soak:
            from hostd_dev.stress.soak import run_soak

            soak = await run_soak(home("hds"), seconds=args.soak * 60, topics=args.soak_topics,
                                  seed=args.seed, sample_every=max(1.0, args.soak * 60 / 600))
            say(f"soak: {soak.summary()}")
            step = max(1, len(soak.samples) // 40)
            say("  RSS MiB / fds over time: " + " ".join(
                f"{x.rss_kib // 1024}/{x.fds}" for x in soak.samples[::step]))
            for v in soak.violations[:50]:
                say(f"  VIOLATION {v}")
            failed |= bool(soak.violations)
    finally:
        for path in homes:
            if args.keep:
                say(f"kept {path}")
            else:
                shutil.rmtree(path, ignore_errors=True)
    say("stress: FAILED" if failed else "stress: ok")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
