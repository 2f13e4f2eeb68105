"""`hostd app` against the page in chromium through `hostd web`: first paint and memory.

Both on one private X server (Debian's Xvfb), on the same real daemon and the same topic (ROWS
finished rows), started cold each run:

- app: `hostd_dev.bench.app_probe`, the App object `hostd app` runs (pywebview, Qt WebEngine),
  one window on the topic;
- web: `hostd web` (started before the clock: it is the long-lived part) and Debian's chromium,
  headed, launched by Playwright on the page URL with the topic, one window.

Times are from just before the process start (app) or the browser launch (web) to the page's
first contentful paint (the Paint Timing API) and to the topic's rows shown. Memory: the sum
of RSS and of PSS (shared pages split between the processes that map them) over every process
of the window (Qt WebEngine's and chromium's renderer, GPU and utility processes included);
the web side adds `hostd web`'s own process, which a browser tab needs.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from hostd_dev.bench.app_probe import SHOWN_JS
from hostd_dev.bench.procs import PYTHON, DaemonProc
from hostd_dev.bench.report import Context, Result

GOAL = "one app window: first paint and memory next to chromium through hostd web"

ROWS = 40


def _tree(root: int) -> set[int]:
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    found = {root}
    while True:
        more = {p for p, pp in parents.items() if pp in found} - found
        if not more:
            return found
        found |= more


def _mem(pids: set[int]) -> tuple[float, float]:
    """Summed RSS and PSS in MiB."""
    rss = pss = 0
    for pid in pids:
        try:
            text = Path(f"/proc/{pid}/smaps_rollup").read_text()
        except OSError:
            continue
        for line in text.splitlines():
            if line.startswith("Rss:"):
                rss += int(line.split()[1])
            elif line.startswith("Pss:"):
                pss += int(line.split()[1])
    return rss / 1024, pss / 1024


def _xvfb() -> tuple[subprocess.Popen[bytes], str]:
    xvfb = shutil.which("Xvfb")
    if xvfb is None:
        raise RuntimeError("Xvfb is not installed (scripts/setup installs xvfb)")
    read, write = os.pipe()
    proc = subprocess.Popen([xvfb, "-displayfd", str(write), "-screen", "0", "1280x900x24", "-nolisten", "tcp"],
                            pass_fds=(write,), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.close(write)
    with os.fdopen(read) as f:
        return proc, ":" + f.readline().strip()


def _topic(daemon: DaemonProc) -> str:
    """A topic of ROWS finished rows: ROWS/2 turns of a question and its echoed answer."""
    import trio

    from hostd.client import open_client
    from hostd_protocol.client_messages import TurnEnded

    async def fill() -> str:
        async with open_client(daemon.paths) as client:
            topic = await client.create_topic(title="bench", driver="scripted", options={"chunk_rate": 0})
            async with client.attach(topic.id) as sub:
                for i in range(ROWS // 2):
                    await client.send(topic.id, f"message {i}: " + "some words of a typical question " * 4)
                    async for ev in sub:
                        if isinstance(ev, TurnEnded):
                            break
            return str(topic.id)

    return trio.run(fill)


def _app_once(env: dict[str, str], home: Path, topic: str) -> dict[str, float]:
    t0 = time.time() * 1000
    proc = subprocess.Popen([PYTHON, "-m", "hostd_dev.bench.app_probe", str(home), topic, str(ROWS)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            env=env, text=True)
    assert proc.stdout is not None and proc.stdin is not None
    try:
        line = proc.stdout.readline()
        got = json.loads(line)
        if "error" in got:
            raise RuntimeError(f"app probe: {got['error']}")
        rss, pss = _mem(_tree(proc.pid))
        return {"fcp": got["fcp"] - t0, "shown": got["shown"] - t0, "rss": rss, "pss": pss}
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)
        proc.stdout.close()


def _web_once(env: dict[str, str], url: str, topic: str, gateway_pid: int) -> dict[str, float]:
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    old = os.environ.get("DISPLAY")
    os.environ["DISPLAY"] = env["DISPLAY"]
    try:
        with sync_playwright() as p:
            t0 = time.time() * 1000
            browser = p.chromium.launch(executable_path=chromium, headless=False,
                                        args=["--no-sandbox", "--no-first-run", "--disable-sync",
                                              "--disable-background-networking", "--disable-component-update"])
            page = browser.new_page(viewport={"width": 1100, "height": 800})
            page.goto(url + f"#topic={topic}")
            got: Any = page.evaluate(SHOWN_JS % ROWS)
            chrome = {pid for pid in _tree(os.getpid())
                      if Path(f"/proc/{pid}/comm").exists()
                      and Path(f"/proc/{pid}/comm").read_text().strip().startswith("chrom")}
            roots = {pid for pid in chrome if _ppid(pid) not in chrome}
            pids = set().union(*(_tree(r) for r in roots)) if roots else set()
            rss, pss = _mem(pids)
            grss, gpss = _mem({gateway_pid})
            browser.close()
    finally:
        if old is None:
            os.environ.pop("DISPLAY", None)
        else:
            os.environ["DISPLAY"] = old
    return {"fcp": got["fcp"] - t0, "shown": got["shown"] - t0, "rss": rss + grss, "pss": pss + gpss,
            "browser_pss": pss, "gateway_pss": gpss}


def _ppid(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def run(ctx: Context) -> Result:
    res = Result("app", GOAL)
    from hostd.app.command import problem

    xvfb, display = _xvfb()
    try:
        env = {**os.environ, "DISPLAY": display}
        env.pop("WAYLAND_DISPLAY", None)
        why = problem(env)
        if why is not None:
            return Result("app", GOAL, skipped=why)
        with DaemonProc() as daemon:
            topic = _topic(daemon)
            env["HOSTD_HOME"] = str(daemon.home)
            gateway = subprocess.Popen([PYTHON, "-m", "hostd", "--home", str(daemon.home), "web"],
                                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
            try:
                assert gateway.stdout is not None
                m = re.search(r"(http://127\.0\.0\.1:\d+/\?token=[\w-]+)", gateway.stdout.readline())
                if m is None:
                    raise RuntimeError("hostd web did not print its URL")
                url = m.group(1)
                res.notes.append(
                    f"a topic of {ROWS} finished rows; one window, 1100x800, on Xvfb (software "
                    "rendering); cold start each run; memory summed over the window's processes "
                    "(PSS splits shared pages; the web side includes hostd web's own process)"
                )
                runs = 1 if ctx.quick else ctx.runs
                _app_once(env, daemon.home, topic)  # warm-up: the page cache, Python's bytecode
                _web_once(env, url, topic, gateway.pid)
                for _ in range(runs):
                    a = _app_once(env, daemon.home, topic)
                    w = _web_once(env, url, topic, gateway.pid)
                    res.add("app: first contentful paint", "s", a["fcp"] / 1000)
                    res.add("web (chromium + hostd web): first contentful paint", "s", w["fcp"] / 1000, baseline=True)
                    res.add(f"app: {ROWS} rows shown", "s", a["shown"] / 1000)
                    res.add(f"web: {ROWS} rows shown", "s", w["shown"] / 1000, baseline=True)
                    res.add("app: RSS, summed over its processes", "MiB", a["rss"])
                    res.add("web: RSS, summed (chromium's processes + hostd web)", "MiB", w["rss"], baseline=True)
                    res.add("app: PSS, summed", "MiB", a["pss"])
                    res.add("web: PSS, summed", "MiB", w["pss"], baseline=True)
                    res.add("web: of which hostd web (PSS)", "MiB", w["gateway_pss"], baseline=True)
            finally:
                gateway.terminate()
                gateway.wait(timeout=20)
                if gateway.stdout is not None:
                    gateway.stdout.close()
    finally:
        xvfb.terminate()
        xvfb.wait(timeout=10)
    return res
