"""Soak: many topics streaming for minutes while windows attach and detach at random, with
steers, stops, approvals and compaction; the daemon's memory (RSS) and open descriptors are
sampled from /proc and must stay flat. At the end every window's transcript (rebuilt by
`hostd.core.transcript` from its snapshot and events, across replays and resyncs) must equal the
stored rows.

Windows come in two kinds: *steady* windows attach every topic for the whole run (their
transcripts span every turn), *churning* windows connect, attach a random subset (half the
time with `since=` their last seq, i.e. a replay), read for a random while, detach or drop the
connection, and start again. At the end every window attaches every topic and is compared.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import trio

from hostd.client import Client, Subscription, open_client
from hostd_dev.stress.process import DaemonProcess, ProcSample
from hostd_protocol.client_messages import (
    ApprovalRequested,
    MessageRow,
    Snapshot,
    TopicDeleted,
    TurnEnded,
)
from hostd_protocol.common import SendIntent
from hostd_protocol.errors import HostdError

__all__ = ["SoakReport", "run_soak"]

SCRIPTS: tuple[tuple[int, str], ...] = (
    (5, "/chunks {n} size=8 rate=120"),
    (3, "/text Looking.\n/tool Read wait-steer=0.5\n/chunks {n} size=8 rate=120"),
    (1, "/approve Bash\n/chunks {n} size=8 rate=120"),
    (1, "/compact anchor duration=0.1\n/chunks {n} size=8 rate=120"),
    (1, "/think Hmm.\n/chunks {n} size=8 rate=120\n/usage 100 20"),
)
INTENTS: tuple[SendIntent, ...] = ("auto", "auto", "queue", "steer")


@dataclass
class SoakReport:
    seconds: float = 0.0
    topics: int = 0
    windows: int = 0
    sends: int = 0
    stops: int = 0
    turns_ended: int = 0
    approvals_answered: int = 0
    attaches: int = 0
    replays: int = 0
    reconnects: int = 0
    resyncs: int = 0
    rows_compared: int = 0
    topics_created: int = 0
    topics_deleted: int = 0
    samples: list[ProcSample] = field(default_factory=list)
    rss_start_kib: int = 0
    rss_end_kib: int = 0
    rss_peak_kib: int = 0
    fds_start: int = 0
    fds_end: int = 0
    violations: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return (
            f"soak {self.seconds:.0f}s, {self.topics} topics, {self.windows} windows: "
            f"{self.sends} sends, {self.turns_ended} turns ended, {self.stops} stops, "
            f"{self.topics_created} topics created / {self.topics_deleted} deleted, "
            f"{self.approvals_answered} approvals answered, {self.attaches} attaches "
            f"({self.replays} replays, {self.reconnects} reconnects, {self.resyncs} resyncs), "
            f"{self.rows_compared} rows compared; RSS {self.rss_start_kib // 1024}->"
            f"{self.rss_end_kib // 1024} MiB (peak {self.rss_peak_kib // 1024} MiB), fds "
            f"{self.fds_start}->{self.fds_end}, {len(self.samples)} samples; "
            f"{len(self.violations)} violations"
        )


class _Shared:
    """The reference transcripts (window steady0) and an event set on every event seen."""

    def __init__(self) -> None:
        self.transcripts: dict[str, Any] = {}
        self.changed = trio.Event()
        self.senders = 0
        self.senders_done = trio.Event()

    def notify(self) -> None:
        self.changed.set()
        self.changed = trio.Event()


class _Window:
    def __init__(self, name: str) -> None:
        self.name = name
        self.subs: dict[str, Subscription] = {}
        self.last_seq: dict[str, int] = {}
        #: Steady windows: attach a (new) topic for the rest of the run.
        self.attach: Callable[[str], Awaitable[None]] | None = None


def _attacher(
    nursery: trio.Nursery, client: Client, window: _Window, answer_p: float,
    report: SoakReport, states: _Shared,
) -> Callable[[str], Awaitable[None]]:
    async def attach(tid: str) -> None:
        await nursery.start(_follow, client, window, tid, None, answer_p, report, states)

    return attach


def _comparable(row: MessageRow) -> MessageRow:
    return msgspec.structs.replace(row, updated_at=0.0)


async def run_soak(
    home: Path,
    *,
    seconds: float,
    topics: int = 6,
    steady_windows: int = 2,
    churn_windows: int = 4,
    seed: int = 0,
    sample_every: float = 1.0,
    rotate_after: int = 30,
    log: Callable[[str], None] = lambda _m: None,
) -> SoakReport:
    """Run the soak for `seconds`. Each topic is deleted after about `rotate_after` sends and
    a new one takes its place, so the data a daemon holds stays bounded and memory that
    still grows is a leak (deleted topics must leave nothing behind)."""
    rng = random.Random(seed)
    report = SoakReport(topics=topics, windows=steady_windows + churn_windows)
    daemon = DaemonProcess(home)
    await daemon.start()
    started = trio.current_time()
    try:
        async with open_client(daemon.paths, client_name="soak-senders") as senders:
            tids = [
                (await senders.create_topic(title=f"soak {i}", driver="scripted")).id
                for i in range(topics)
            ]
            report.topics_created = len(tids)
            steady = [_Window(f"steady{i}") for i in range(steady_windows)]
            churn = [_Window(f"churn{i}") for i in range(churn_windows)]
            stop_sending = trio.Event()
            async with trio.open_nursery() as nursery:
                states = _Shared()
                for i, w in enumerate(steady):
                    # One connection per window (a connection attaches a topic once). The
                    # first one answers every approval, so no turn waits for a human.
                    steady_client = await nursery.start(_connect, daemon, w.name)
                    w.attach = _attacher(nursery, steady_client, w,
                                         1.0 if i == 0 else rng.random(), report, states)
                    for tid in tids:
                        await w.attach(tid)
                churn_scope = trio.CancelScope()

                async def churning() -> None:
                    with churn_scope:
                        async with trio.open_nursery() as n:
                            for w in churn:
                                n.start_soon(_churn, daemon, w, tids, random.Random(rng.random()),
                                             report, states)

                nursery.start_soon(churning)
                for slot in range(len(tids)):
                    nursery.start_soon(_send_loop, senders, tids, slot, steady, states,
                                       stop_sending, random.Random(rng.random()), report,
                                       rotate_after)
                nursery.start_soon(_sampler, daemon, report, sample_every)
                await trio.sleep(seconds)  # the soak's duration (a moment, not a condition)
                stop_sending.set()
                churn_scope.cancel()
                with trio.fail_after(60):
                    await states.senders_done.wait()
                await _quiesce(senders, tids, states, report)
                # Every churning window attaches everything once more, from scratch.
                async with open_client(daemon.paths, client_name="soak-final") as final_client:
                    final = _Window("final")
                    for tid in tids:
                        await nursery.start(_follow, final_client, final, tid, None, 0.0,
                                            report, states)
                    await _compare(senders, tids, [*steady, final], report, states)
                nursery.cancel_scope.cancel()
        report.samples.append(daemon.sample())
        log_text = daemon.log_text()
        if "Traceback" in log_text:
            report.violations.append("the daemon logged a traceback")
    finally:
        report.seconds = trio.current_time() - started
        await daemon.stop()
    _judge_samples(report)
    return report


async def _connect(
    daemon: DaemonProcess, name: str, *, task_status: trio.TaskStatus[Client]
) -> None:
    async with open_client(daemon.paths, client_name=name) as client:
        task_status.started(client)
        await trio.sleep_forever()


async def _follow(
    client: Client,
    window: _Window,
    tid: str,
    since: int | None,
    answer_p: float,
    report: SoakReport,
    states: _Shared,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Attach `tid` and keep the transcript current until cancelled or the connection ends."""
    report.attaches += 1
    report.replays += since is not None
    started = False
    try:
        async with client.attach(tid, since=since, max_rows=10_000) as sub, \
                trio.open_nursery() as answers:
            window.subs[tid] = sub
            task_status.started()
            started = True
            async for item in sub:
                window.last_seq[tid] = sub.seq
                if window.name == "steady0" and sub.transcript is not None:
                    states.transcripts[tid] = sub.transcript
                states.notify()
                if isinstance(item, Snapshot):
                    if answer_p > 0.5:  # approvals asked before this window attached
                        for approval in item.approvals:
                            answers.start_soon(_answer, client, tid, approval.id, report)
                    continue
                if isinstance(item, TopicDeleted):
                    break
                if isinstance(item, TurnEnded) and window.name == "steady0":
                    report.turns_ended += 1
                if isinstance(item, ApprovalRequested) and answer_p > 0.5:
                    answers.start_soon(_answer, client, tid, item.approval.id, report)
    except* HostdError:
        pass  # the connection was lost (a subscription raises it inside the nursery)
    finally:
        if tid in window.subs:
            report.resyncs += window.subs[tid].resyncs
        if not started:
            task_status.started()


async def _answer(client: Client, tid: str, approval_id: str, report: SoakReport) -> None:
    try:
        await client.answer_approval(tid, approval_id, True)
        report.approvals_answered += 1
    except HostdError:
        pass  # another window was first


async def _churn(
    daemon: DaemonProcess,
    window: _Window,
    tids: list[str],
    rng: random.Random,
    report: SoakReport,
    states: _Shared,
) -> None:
    while True:
        report.reconnects += 1
        async with open_client(daemon.paths, client_name=window.name) as client, \
                trio.open_nursery() as nursery:
            for _ in range(rng.randint(1, 4)):
                tid = rng.choice(tids)
                if tid in window.subs and not window.subs[tid].closed:
                    continue
                since = window.last_seq.get(tid) if rng.random() < 0.5 else None
                scope = trio.CancelScope()

                async def one(tid: str = tid, since: int | None = since,
                              scope: trio.CancelScope = scope) -> None:
                    with scope:
                        await _follow(client, window, tid, since, rng.random(), report, states)

                nursery.start_soon(one)
                await trio.sleep(rng.uniform(0.0, 1.0))  # picks when the next attach happens
                if rng.random() < 0.3:
                    scope.cancel()  # detach this one early
            await trio.sleep(rng.uniform(0.2, 2.0))  # how long this window stays
            window.subs.clear()
            nursery.cancel_scope.cancel()  # detach all, then drop the connection


async def _send_loop(
    client: Client,
    tids: list[str],
    slot: int,
    steady: list[_Window],
    states: _Shared,
    stop: trio.Event,
    rng: random.Random,
    report: SoakReport,
    rotate_after: int,
) -> None:
    states.senders += 1
    try:
        await _send_loop_body(client, tids, slot, steady, states, stop, rng, report,
                              rotate_after)
    finally:
        states.senders -= 1
        if not states.senders:
            states.senders_done.set()


async def _send_loop_body(
    client: Client,
    tids: list[str],
    slot: int,
    steady: list[_Window],
    states: _Shared,
    stop: trio.Event,
    rng: random.Random,
    report: SoakReport,
    rotate_after: int,
) -> None:
    weights = [w for w, _ in SCRIPTS]
    n = 0
    left = rng.randint(rotate_after // 2, rotate_after * 3 // 2)
    while not stop.is_set():
        tid = tids[slot]
        if left <= 0:
            # Retire this topic (whatever it is doing) and put a new one in its place.
            try:
                await client.delete_topic(tid)
                report.topics_deleted += 1
                new = await client.create_topic(title=f"soak {slot}", driver="scripted")
            except HostdError as exc:
                report.violations.append(f"rotating topic {tid} failed: {exc}")
                return
            report.topics_created += 1
            states.transcripts.pop(tid, None)
            tids[slot] = tid = new.id
            for w in steady:
                assert w.attach is not None
                await w.attach(tid)
            left = rng.randint(rotate_after // 2, rotate_after * 3 // 2)
        t = states.transcripts.get(tid)
        queued = [r for r in t.rows() if r.status == "queued"] if t is not None else []
        if len(queued) >= 2:
            if t is not None and t.state == "idle":
                try:
                    await client.send_now(tid, queued[0].id)
                except HostdError:
                    pass
            with trio.move_on_after(1.0):  # or the soak ends meanwhile
                await states.changed.wait()
            continue
        n += 1
        script = rng.choices([s for _, s in SCRIPTS], weights)[0].format(n=rng.randint(10, 80))
        try:
            await client.send(tid, f"{script}\nsoak {tid[-4:]} #{n}", rng.choice(INTENTS))
            report.sends += 1
            left -= 1
            if rng.random() < 0.05:
                await client.stop(tid)
                report.stops += 1
        except HostdError:
            pass
        await trio.sleep(rng.uniform(0.05, 0.6))  # pacing: picks the next moment


async def _sampler(daemon: DaemonProcess, report: SoakReport, every: float) -> None:
    while True:
        report.samples.append(daemon.sample())
        await trio.sleep(every)  # a sampling period, not a condition


async def _quiesce(
    client: Client, tids: list[str], states: _Shared, report: SoakReport
) -> None:
    """Until every topic is idle with nothing queued (paused queues are sent on)."""
    with trio.move_on_after(60) as scope:
        for tid in tids:
            while True:
                changed = states.changed
                info = await client.get_topic(tid)
                t = states.transcripts.get(tid)
                queued = [r for r in t.rows() if r.status == "queued"] if t is not None else []
                if info.state == "idle" and not queued and t is not None and t.seq == info.seq:
                    break
                if info.state == "idle" and queued and t is not None and t.state == "idle":
                    try:
                        await client.send_now(tid, queued[0].id)
                    except HostdError:
                        pass
                with trio.move_on_after(5):
                    await changed.wait()
    if scope.cancelled_caught:
        info = await client.get_topic(tid)
        t = states.transcripts.get(tid)
        rows = [(r.role, r.status) for r in t.rows()][-6:] if t is not None else None
        report.violations.append(
            f"topic {tid} did not settle within 60 s: state {info.state} seq {info.seq}, "
            f"the window has seq {getattr(t, 'seq', None)} state {getattr(t, 'state', None)}, "
            f"last rows {rows}"
        )


async def _compare(
    client: Client, tids: list[str], windows: list[_Window], report: SoakReport,
    states: _Shared,
) -> None:
    with trio.fail_after(30):
        for tid in tids:
            seq = (await client.get_topic(tid)).seq
            stored = [_comparable(r) for r in (await client.history(tid, limit=10_000)).rows]
            for w in windows:
                sub = w.subs.get(tid)
                if sub is None or sub.transcript is None:
                    report.violations.append(f"{w.name}: no transcript of {tid}")
                    continue
                while sub.seq < seq:
                    await states.changed.wait()
                rows = [_comparable(r) for r in sub.transcript.rows()]
                report.rows_compared += len(rows)
                if rows != stored:
                    diff = next((i for i, (a, b) in enumerate(zip(rows, stored, strict=False))
                                 if a != b), min(len(rows), len(stored)))
                    report.violations.append(
                        f"{w.name}: transcript of {tid} differs from the store at row {diff} "
                        f"({len(rows)} vs {len(stored)} rows): "
                        f"{rows[diff] if diff < len(rows) else None} != "
                        f"{stored[diff] if diff < len(stored) else None}"
                    )


def _judge_samples(report: SoakReport) -> None:
    s = report.samples
    if len(s) < 8:
        report.violations.append(f"only {len(s)} samples: the soak was too short to judge")
        return
    warm = len(s) // 4
    early = s[warm : warm + max(2, (len(s) - warm) // 3)]
    late = s[-max(2, (len(s) - warm) // 3) :]
    report.rss_start_kib = int(statistics.median(x.rss_kib for x in early))
    report.rss_end_kib = int(statistics.median(x.rss_kib for x in late))
    report.rss_peak_kib = max(x.rss_kib for x in s)
    report.fds_start = max(x.fds for x in early)
    report.fds_end = s[-1].fds
    growth = report.rss_end_kib - report.rss_start_kib
    allowed = max(8 * 1024, report.rss_start_kib // 10)
    if growth > allowed:
        report.violations.append(
            f"RSS grew by {growth} KiB (from {report.rss_start_kib} to {report.rss_end_kib} "
            f"KiB; allowed {allowed})"
        )
    fds_late = max(x.fds for x in late)
    if fds_late > report.fds_start + 8:
        report.violations.append(
            f"open descriptors grew from {report.fds_start} to {fds_late}"
        )
