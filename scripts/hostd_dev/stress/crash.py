"""Crash campaign: kill -9 the real daemon at random moments while topics stream, restart it,
and check what DESIGN.md invariant 8 promises.

One *life* is: start the daemon, attach one observing window per topic, let one sender per
topic send scripted messages (streaming answers, steers, queued messages, approvals that a
window answers, compaction, the odd failing turn, stops), then SIGKILL the daemon at a moment
picked by counting streamed chunks plus a seeded random delay. Between lives, with the daemon
dead, the database is read with stdlib sqlite3 (not hostd's store) and checked:

- `pragma integrity_check` is ok;
- every acknowledged user message is stored exactly once, with its text; no message is stored
  twice; unsent (queued/draft) messages are in acceptance order and messages placed into the
  history are in the order the windows saw them placed;
- streamed text a window saw but the store lost was produced within the flush bound before the
  kill (`flush_interval`, plus a stated scheduling slack);

and after the restart (the new daemon reconciled before serving):

- no row from before the kill is `pending`: each became `error` with its partial content and
  the restart reason; no turn's queued message vanished (still queued or draft, or run by the
  restarted daemon);
- the topic's event seq continues above everything a window saw (no seq is reused).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from hostd.client import Client, open_client
from hostd.core.runtime_rows import UNSENT_BASE
from hostd.shell.store.store import RESTART_REASON
from hostd_dev.stress.dbcheck import StoredRow, integrity_check, read_rows
from hostd_dev.stress.process import DaemonProcess, pids_under, wait_pids_gone
from hostd_protocol.client_messages import (
    ApprovalRequested,
    RowAppended,
    RowOpened,
    RowUpdated,
    Snapshot,
    TopicEvent,
)
from hostd_protocol.common import SendIntent, TextDelta
from hostd_protocol.errors import HostdError, ProtocolError

__all__ = ["CrashReport", "run_crash_campaign"]

#: Scheduling slack on top of the flush interval: the observing window receives an event a
#: little after the daemon produced it, and a batch takes a few ms to commit on a busy box.
FLUSH_SLACK = 0.25

#: (weight, script). Every message ends with a marker line (the prompt) that names it.
SCRIPTS: tuple[tuple[int, str], ...] = (
    (4, "/chunks {n} size=8 rate=250"),
    (3, "/text Checking first.\n/tool Read wait-steer=0.4\n/chunks {n} size=8 rate=250"),
    (2, "/approve Bash\n/chunks {n} size=8 rate=250"),
    (2, "/compact anchor duration=0.15\n/chunks {n} size=8 rate=250"),
    (1, "/think Considering.\n/chunks {n} size=8 rate=250\n/error scripted failure"),
)
INTENTS: tuple[SendIntent, ...] = ("auto", "auto", "queue", "steer", "start")


@dataclass
class CrashReport:
    kills: int = 0
    lives: int = 0
    topics: int = 0
    sends_attempted: int = 0
    sends_acked: int = 0
    acked_by_disposition: dict[str, int] = field(default_factory=dict)
    stops: int = 0
    approvals_answered: int = 0
    chunks_seen: int = 0
    rows_reconciled: int = 0
    queued_at_kill: int = 0
    partial_rows_checked: int = 0
    #: Rows found at a kill with streamed pieces not yet folded into their whole parts.
    rows_with_pieces: int = 0
    rows_with_lost_text: int = 0
    max_lost_chars: int = 0
    #: The largest (kill time - arrival of the first lost chunk), seconds.
    max_loss_window: float = 0.0
    orphan_drivers_left: int = 0
    stalled_lives: int = 0
    #: What every topic was doing when a life reached no kill moment in `max_life`.
    stalls: list[str] = field(default_factory=list)
    seconds: float = 0.0
    violations: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return (
            f"{self.kills} kills survived ({self.lives} lives, {self.topics} topics, "
            f"{self.seconds:.1f}s): {self.sends_acked}/{self.sends_attempted} sends acked "
            f"{dict(sorted(self.acked_by_disposition.items()))}, {self.stops} stops, "
            f"{self.approvals_answered} approvals answered, {self.chunks_seen} chunks seen, "
            f"{self.rows_reconciled} pending rows reconciled ({self.rows_with_pieces} with "
            f"streamed pieces), {self.queued_at_kill} queued "
            f"rows across kills, {self.rows_with_lost_text}/{self.partial_rows_checked} rows "
            f"lost text (max {self.max_lost_chars} chars, max window "
            f"{self.max_loss_window * 1000:.0f} ms), {self.orphan_drivers_left} orphan drivers, "
            f"{self.stalled_lives} stalled lives, {len(self.violations)} violations"
        )


@dataclass
class _Sent:
    marker: str
    index: int  # per-topic attempt order (= acceptance order: one sender per topic)
    acked: bool = False
    disposition: str = ""


@dataclass
class _SeenRow:
    text: list[str] = field(default_factory=list)
    length: int = 0
    #: (arrival time, text length after that chunk)
    marks: list[tuple[float, int]] = field(default_factory=list)


class _Topic:
    """What the campaign knows about one topic across lives."""

    def __init__(self, topic_id: str) -> None:
        self.id = topic_id
        self.sent: dict[str, _Sent] = {}
        self.attempts = 0
        self.placements: dict[str, int] = {}  # user row id -> order of its last placement
        self.placement_counter = 0
        self.seen: dict[str, _SeenRow] = {}  # assistant row id -> text seen by the window
        self.max_seq_seen = 0
        # live, per life
        self.transcript: Any = None
        self.changed = trio.Event()

    def notify(self) -> None:
        self.changed.set()
        self.changed = trio.Event()

    def queued(self) -> int:
        if self.transcript is None:
            return 0
        return sum(1 for r in self.transcript.rows() if r.status == "queued")

    def first_queued(self) -> str:
        assert self.transcript is not None
        return str(next(r.id for r in self.transcript.rows() if r.status == "queued"))

    def state(self) -> str:
        return "idle" if self.transcript is None else str(self.transcript.state)


class _Life:
    def __init__(self) -> None:
        self.chunks = 0
        self.progress = trio.Event()

    def tick(self) -> None:
        self.chunks += 1
        self.progress.set()
        self.progress = trio.Event()


def _marker_of(row: StoredRow) -> str:
    return row.text.rsplit("\n", 1)[-1].strip()


async def run_crash_campaign(
    home: Path,
    *,
    kills: int,
    topics: int = 3,
    seed: int = 0,
    flush_interval: float = 0.1,
    max_life: float = 6.0,
    log: Callable[[str], None] = lambda _m: None,
) -> CrashReport:
    """Run `kills` kill -9 / restart cycles; returns the figures and every violation found."""
    rng = random.Random(seed)
    report = CrashReport(topics=topics)
    daemon = DaemonProcess(home, flush_interval=flush_interval)
    started = trio.current_time()
    workspaces = daemon.paths.data_dir / "workspaces"
    state: list[_Topic] = []
    pre_pending: dict[str, StoredRow] = {}
    pre_queued: dict[str, StoredRow] = {}
    try:
        for life_no in range(kills + 1):
            final = life_no == kills
            t0 = trio.current_time()
            try:
                await daemon.start()
            except RuntimeError as exc:
                tail = daemon.output_path.read_text(errors="replace")[-3000:]
                report.violations.append(f"life {life_no}: {exc}; its output ends:\n{tail}")
                break
            t_up = trio.current_time() - t0
            report.lives += 1
            if life_no == 0:
                async with open_client(daemon.paths, client_name="crash-setup") as c:
                    for i in range(topics):
                        t = await c.create_topic(title=f"crash {i}", driver="scripted")
                        state.append(_Topic(t.id))
            else:
                _check_after_restart(daemon, report, pre_pending, pre_queued)
            life = _Life()
            t_kill = await _run_life(daemon, state, life, rng, report, final=final,
                                     max_life=max_life)
            report.chunks_seen += life.chunks
            if final:
                break
            report.kills += 1
            t1 = trio.current_time()
            left = await wait_pids_gone(pids_under(workspaces), 5.0)
            t_orphans = trio.current_time() - t1
            if left:
                report.orphan_drivers_left += len(left)
                report.violations.append(
                    f"life {life_no}: {len(left)} driver process(es) outlived the killed "
                    f"daemon by 5 s: {sorted(left)}"
                )
                for pid in left:
                    _kill_quietly(pid)
            pre_pending, pre_queued = _check_after_kill(
                daemon, state, report, t_kill, flush_interval, life_no
            )
            log(f"life {life_no}: up in {t_up:.2f}s, drivers gone in {t_orphans:.2f}s, "
                f"lived {t_kill - t0 - t_up:.2f}s, killed after {life.chunks} chunks; "
                f"{len(pre_pending)} pending, {len(pre_queued)} queued rows")
        if not daemon.running:
            return report
        # The last life ends gracefully: SIGTERM stops turns and flushes.
        await daemon.stop()
        rows = read_rows(daemon.paths.db_path)
        ok = integrity_check(daemon.paths.db_path)
        if ok != "ok":
            report.violations.append(f"after the graceful stop: integrity_check says {ok}")
        for tid, trows in rows.items():
            for r in trows:
                if r.status == "pending":
                    report.violations.append(
                        f"topic {tid}: row {r.id} still pending after a graceful stop"
                    )
        _check_acked(state, rows, report, "after the graceful stop")
    finally:
        if daemon.running:
            await daemon.kill9()
        for pid in pids_under(workspaces):
            _kill_quietly(pid)
        report.seconds = trio.current_time() - started
    return report


def _kill_quietly(pid: int) -> None:
    import os
    import signal

    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


async def _run_life(
    daemon: DaemonProcess,
    state: list[_Topic],
    life: _Life,
    rng: random.Random,
    report: CrashReport,
    *,
    final: bool,
    max_life: float,
) -> float:
    """One daemon life; returns the moment of the kill (trio clock)."""
    t_kill = 0.0
    # Per-life randomness drawn up front, so the moment does not depend on task scheduling.
    target = rng.choice((0, rng.randint(1, 40), rng.randint(40, 300), rng.randint(300, 700)))
    extra = rng.uniform(0.0, 0.05)
    seeds = [rng.randrange(2**32) for _ in state]
    try:
        async with open_client(daemon.paths, client_name="crash-windows") as windows, \
                open_client(daemon.paths, client_name="crash-senders") as senders, \
                trio.open_nursery() as nursery:
            for topic, s in zip(state, seeds, strict=True):
                topic.transcript = None
                ready = trio.Event()
                nursery.start_soon(_observe, windows, topic, life, report, random.Random(s),
                                   ready)
                await ready.wait()
            for topic, s in zip(state, seeds, strict=True):
                nursery.start_soon(_send_loop, senders, topic, report, random.Random(s + 1))
            if final:
                with trio.move_on_after(max_life / 2):
                    while life.chunks < 200:
                        await life.progress.wait()
                nursery.cancel_scope.cancel()
                return 0.0
            with trio.move_on_after(max_life) as scope:
                while life.chunks < target:
                    await life.progress.wait()
            if scope.cancelled_caught:
                report.stalled_lives += 1
                report.stalls.append("; ".join(
                    f"{t.id[-6:]}: {t.state()}, {t.queued()} queued, rows "
                    f"{[(r.role[0], r.status) for r in t.transcript.rows()][-4:]}"
                    if t.transcript is not None else f"{t.id[-6:]}: no transcript"
                    for t in state
                ))
            # A seeded delay picks the moment (it is not waiting for a condition).
            await trio.sleep(extra)
            t_kill = trio.current_time()
            await daemon.kill9()
            nursery.cancel_scope.cancel()
    except HostdError:
        pass  # the connections broke because we killed the daemon
    if not t_kill and not final:
        t_kill = trio.current_time()
        await daemon.kill9()
    return t_kill


async def _observe(
    client: Client,
    topic: _Topic,
    life: _Life,
    report: CrashReport,
    rng: random.Random,
    ready: trio.Event,
) -> None:
    first = True
    try:
        async with client.attach(topic.id, max_rows=100_000) as sub, \
                trio.open_nursery() as answers:
            ready.set()
            async for item in sub:
                topic.transcript = sub.transcript
                now = trio.current_time()
                if isinstance(item, Snapshot):
                    if first and topic.max_seq_seen and item.seq <= topic.max_seq_seen:
                        report.violations.append(
                            f"topic {topic.id}: after a restart the seq is {item.seq}, but a "
                            f"window already saw seq {topic.max_seq_seen} (seq reused)"
                        )
                    first = False
                    topic.max_seq_seen = max(topic.max_seq_seen, item.seq)
                    for approval in item.approvals:  # asked before this window attached
                        answers.start_soon(_answer, client, topic.id, approval.id, rng, report)
                    for row in item.rows:
                        if row.role == "assistant":
                            _seen_reset(topic, row.id, row.parts, now)
                        elif row.role == "user" and row.position < UNSENT_BASE:
                            topic.placements.setdefault(row.id, -1)
                    topic.notify()
                    continue
                _on_event(topic, item, now, life, report)
                if isinstance(item, ApprovalRequested):
                    answers.start_soon(_answer, client, topic.id, item.approval.id, rng, report)
                topic.notify()
    except* ProtocolError:
        pass  # the connection was lost (the daemon killed): this window's life is over
    finally:
        ready.set()


def _seen_reset(topic: _Topic, row_id: str, parts: list[Any], now: float) -> None:
    text = "".join(p.text for p in parts if isinstance(p, TextDelta))
    seen = topic.seen.setdefault(row_id, _SeenRow())
    if len(text) > seen.length:
        seen.text = [text]
        seen.length = len(text)
        seen.marks.append((now, seen.length))


def _on_event(topic: _Topic, ev: TopicEvent, now: float, life: _Life, report: CrashReport) -> None:
    topic.max_seq_seen = max(topic.max_seq_seen, ev.seq)
    if isinstance(ev, RowAppended):
        life.tick()
        if isinstance(ev.chunk, TextDelta) and ev.chunk.text:
            seen = topic.seen.setdefault(ev.row_id, _SeenRow())
            seen.text.append(ev.chunk.text)
            seen.length += len(ev.chunk.text)
            seen.marks.append((now, seen.length))
    elif isinstance(ev, RowOpened):
        if ev.row.role == "user" and ev.row.position < UNSENT_BASE:
            _placed(topic, ev.row.id)
    elif isinstance(ev, RowUpdated):
        if ev.position is not None and ev.position < UNSENT_BASE:
            row = topic.transcript.row(ev.row_id) if topic.transcript is not None else None
            if row is not None and row.role == "user":
                _placed(topic, ev.row_id)


def _placed(topic: _Topic, row_id: str) -> None:
    topic.placement_counter += 1
    topic.placements[row_id] = topic.placement_counter


async def _answer(
    client: Client, topic_id: str, approval_id: str, rng: random.Random, report: CrashReport
) -> None:
    await trio.sleep(rng.uniform(0.0, 0.3))  # a human's reaction time: picks a moment
    try:
        await client.answer_approval(topic_id, approval_id, rng.random() < 0.7)
        report.approvals_answered += 1
    except HostdError:
        pass  # already answered / timed out / the turn ended / the daemon died


async def _send_loop(client: Client, topic: _Topic, report: CrashReport, rng: random.Random
                     ) -> None:
    weights = [w for w, _ in SCRIPTS]
    while True:
        while topic.queued() >= 3:
            if topic.state() == "idle":
                # The queue paused after a failed turn: a user would send the next one now.
                try:
                    await client.send_now(topic.id, topic.first_queued())
                except HostdError as exc:
                    if exc.code not in ("not_found", "invalid_argument"):
                        return
            await topic.changed.wait()
        script = rng.choices([s for _, s in SCRIPTS], weights)[0].format(n=rng.randint(5, 120))
        intent = rng.choice(INTENTS)
        if intent == "start" and topic.state() != "idle":
            intent = "auto"
        topic.attempts += 1
        marker = f"msg-{topic.id[-6:]}-{topic.attempts}"
        sent = _Sent(marker, topic.attempts)
        topic.sent[marker] = sent
        report.sends_attempted += 1
        try:
            result = await client.send(topic.id, f"{script}\n{marker}", intent,
                                       client_msg_id=marker)
        except HostdError as exc:
            if exc.code == "topic_busy":
                continue
            return  # the daemon died (or refused): this message is not acknowledged
        sent.acked = True
        sent.disposition = result.disposition
        report.sends_acked += 1
        report.acked_by_disposition[result.disposition] = (
            report.acked_by_disposition.get(result.disposition, 0) + 1
        )
        if rng.random() < 0.07:
            try:
                await client.stop(topic.id)
                report.stops += 1
            except HostdError as exc:
                if exc.code != "nothing_to_stop":
                    return
        await trio.sleep(rng.uniform(0.0, 0.25))  # pacing: picks the next moment to send


def _check_acked(
    state: list[_Topic], rows: dict[str, list[StoredRow]], report: CrashReport, when: str
) -> None:
    """Every acked message stored once; unsent ones in acceptance order; placed ones in the
    order the windows saw them placed."""
    for topic in state:
        trows = rows.get(topic.id, [])
        users = [r for r in trows if r.role == "user"]
        count: dict[str, int] = {}
        for r in users:
            m = _marker_of(r)
            count[m] = count.get(m, 0) + 1
        for marker, n in count.items():
            if n > 1:
                report.violations.append(f"{when}: topic {topic.id}: {marker} stored {n} times")
        for sent in topic.sent.values():
            if sent.acked and count.get(sent.marker, 0) == 0:
                report.violations.append(
                    f"{when}: topic {topic.id}: acknowledged message {sent.marker} "
                    f"({sent.disposition}) is not stored"
                )
        for r in users:
            if r.status not in ("success", "queued", "draft"):
                report.violations.append(
                    f"{when}: topic {topic.id}: user row {r.id} has status {r.status}"
                )
        unsent = [r for r in users if r.position >= UNSENT_BASE]
        order = [topic.sent[m].index for m in map(_marker_of, unsent) if m in topic.sent]
        if order != sorted(order):
            report.violations.append(
                f"{when}: topic {topic.id}: unsent messages out of acceptance order: {order}"
            )
        placed = [r for r in users if r.position < UNSENT_BASE and r.id in topic.placements
                  and topic.placements[r.id] >= 0]
        seen_order = [topic.placements[r.id] for r in placed]
        if seen_order != sorted(seen_order):
            report.violations.append(
                f"{when}: topic {topic.id}: history order differs from the order windows saw "
                f"messages placed: {seen_order}"
            )


def _check_after_kill(
    daemon: DaemonProcess,
    state: list[_Topic],
    report: CrashReport,
    t_kill: float,
    flush_interval: float,
    life_no: int,
) -> tuple[dict[str, StoredRow], dict[str, StoredRow]]:
    when = f"after kill {life_no + 1}"
    ok = integrity_check(daemon.paths.db_path)
    if ok != "ok":
        report.violations.append(f"{when}: integrity_check says {ok}")
    rows = read_rows(daemon.paths.db_path)
    _check_acked(state, rows, report, when)
    by_id = {r.id: r for trows in rows.values() for r in trows}
    report.rows_with_pieces += sum(1 for r in by_id.values() if r.pieces)
    bound = flush_interval + FLUSH_SLACK
    for topic in state:
        for row_id, seen in topic.seen.items():
            seen_text = "".join(seen.text)
            stored = by_id.get(row_id)
            stored_text = stored.text if stored is not None else ""
            if not seen_text:
                continue
            report.partial_rows_checked += 1
            if stored_text.startswith(seen_text):
                continue
            if not seen_text.startswith(stored_text):
                report.violations.append(
                    f"{when}: topic {topic.id}: row {row_id}: stored text is not a prefix of "
                    f"what windows saw (stored {stored_text[-40:]!r}, seen {seen_text[-40:]!r})"
                )
                continue
            lost = len(seen_text) - len(stored_text)
            first_lost = next(t for t, n in seen.marks if n > len(stored_text))
            window = t_kill - first_lost
            report.rows_with_lost_text += 1
            report.max_lost_chars = max(report.max_lost_chars, lost)
            report.max_loss_window = max(report.max_loss_window, window)
            if window > bound:
                report.violations.append(
                    f"{when}: topic {topic.id}: row {row_id} lost {lost} chars streamed "
                    f"{window * 1000:.0f} ms before the kill (bound {bound * 1000:.0f} ms)"
                )
            # Windows will see the stored text after the restart.
            seen.text = [stored_text]
            seen.length = len(stored_text)
            seen.marks = [(t, n) for t, n in seen.marks if n <= len(stored_text)]
    pending = {r.id: r for r in by_id.values() if r.status == "pending"}
    queued = {r.id: r for r in by_id.values() if r.status == "queued"}
    report.queued_at_kill += len(queued)
    return pending, queued


def _check_after_restart(
    daemon: DaemonProcess,
    report: CrashReport,
    pre_pending: dict[str, StoredRow],
    pre_queued: dict[str, StoredRow],
) -> None:
    rows = read_rows(daemon.paths.db_path, readonly=True)
    by_id = {r.id: r for trows in rows.values() for r in trows}
    for rid, before in pre_pending.items():
        after = by_id.get(rid)
        report.rows_reconciled += 1
        if after is None:
            report.violations.append(f"after restart: pending row {rid} vanished")
        elif after.status != "error" or after.error != RESTART_REASON:
            report.violations.append(
                f"after restart: pending row {rid} is {after.status} ({after.error!r}), "
                f"not error ({RESTART_REASON!r})"
            )
        elif after.parts != before.parts:
            report.violations.append(f"after restart: row {rid} lost its partial content")
    for rid in pre_queued:
        after = by_id.get(rid)
        if after is None or after.status not in ("queued", "draft", "success"):
            report.violations.append(
                f"after restart: queued row {rid} is "
                f"{'gone' if after is None else after.status}"
            )
    for r in by_id.values():
        if r.status == "pending" and r.id in pre_pending:
            report.violations.append(f"after restart: row {r.id} is still pending")
