"""OpenTelemetry tracing's cost per streamed chunk, on against off (issue 37).

Two measurements, each repeated `--runs` times:

- **In the daemon's path, per chunk** (the goal): what tracing adds to one streamed chunk on
  the event loop: the observer's call for the chunk's driver event and for the `row-appended`
  it becomes (`hostd.shell.tracing.Tracing`, with the real SDK and a batch processor whose
  exporter drops spans), inside a running `invoke_agent` span, against the `tracing is None`
  test the daemon pays when tracing is off. Timed over 200,000 chunks in this process, also
  with content capture on (each chunk's text is then kept for `gen_ai.output.messages`).
- **The whole daemon, per chunk** (for scale, no goal): the daemon subprocess's CPU per chunk
  of a `/chunks n=N size=8 rate=0` turn read by one window, off and then on (exporting
  OTLP/HTTP to a sink in this process that answers 200), alternated; their difference is
  tracing's share, within the noise of a shared machine.
"""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from hostd_dev.bench.control import create_topics, send_all
from hostd_dev.bench.cpu_stats import cpu_seconds
from hostd_dev.bench.procs import DaemonProc, WindowsProc
from hostd_dev.bench.report import Context, Result
from hostd_dev.bench.stats import median

GOAL = "tracing on adds <= 5 us per streamed chunk in the daemon's path"

CHUNKS_MICRO = 200_000


def run(ctx: Context) -> Result:
    res = Result("otel", GOAL)
    try:
        import opentelemetry.sdk  # noqa: F401
    except ImportError:
        res.skipped = "OpenTelemetry is not installed (pip install 'hostd[otel]')"
        return res
    n = 20_000 if ctx.quick else CHUNKS_MICRO
    for capture in (None, False, True):  # warm-up: first calls import and build things
        _micro(5_000, capture)
    for _ in range(ctx.runs):
        off = _micro(n, None)
        on = _micro(n, False)
        captured = _micro(n, True)
        res.add("per chunk, tracing off (the None test)", "us", off, baseline=True)
        res.add("per chunk, tracing on", "us", on)
        res.add("per chunk, tracing on + content capture", "us", captured)
        res.add("added per chunk by tracing", "us", on - off, goal=("<=", 5.0))
        res.add("added per chunk by tracing with content capture", "us", captured - off)
    res.notes.append(
        f"in-process: {n} chunks through the daemon's tracing observer (driver event + "
        "row-appended) inside an open turn span; the SDK's batch processor, spans dropped"
    )
    if ctx.quick:  # the smoke test's time: two more daemons and their turns are not in it
        res.notes.append("--quick: the whole-daemon part is left out")
    else:
        _whole_daemon(ctx, res)
    return res


def _micro(n: int, capture: bool | None) -> float:
    """Microseconds per chunk of the observer calls the daemon makes for one streamed chunk
    (`capture` None: tracing off, only the daemon's `tracing is None` tests)."""
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

    from hostd.shell.otel_sdk import SdkSpans
    from hostd.shell.tracing import Tracing, TracingSettings
    from hostd_protocol.client_messages import RowAppended, TurnEnded, TurnStarted
    from hostd_protocol.common import TextDelta
    from hostd_protocol.driver_messages import ChunkEvent

    class Drop(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    tracing: Tracing | None = None
    if capture is not None:
        tracing = Tracing(TracingSettings(capture_content=capture), SdkSpans(exporter=Drop()))
        tracing.topic_event("T", TurnStarted(topic_id="T", seq=1, turn_id="u1", driver="scripted"))
    events = [
        (
            ChunkEvent(turn_id="u1", chunk=TextDelta(text=f"word{i % 97} ")),
            RowAppended(topic_id="T", seq=i, row_id="a1", chunk=TextDelta(text=f"word{i % 97} ")),
        )
        for i in range(1000)
    ]
    rounds = max(1, n // len(events))
    t0 = time.perf_counter_ns()
    for _ in range(rounds):
        for driver_event, topic_event in events:
            # What topic_driver.feed and Daemon._observe do per chunk.
            if tracing is not None:
                tracing.driver_event(driver_event)
            if tracing is not None:
                tracing.topic_event("T", topic_event, "")
    elapsed = time.perf_counter_ns() - t0
    if tracing is not None:
        tracing.topic_event("T", TurnEnded(topic_id="T", seq=n + 2, turn_id="u1", status="success"))
        tracing.shutdown()
    return elapsed / (rounds * len(events)) / 1000


class _Sink(BaseHTTPRequestHandler):
    """An OTLP/HTTP endpoint that takes every export and answers 200."""

    exports = 0

    def do_POST(self) -> None:
        type(self).exports += 1
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


def _whole_daemon(ctx: Context, res: Result) -> None:
    n = 100_000
    script = f"/chunks n={n} size=8 rate=0"
    sink = ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    threading.Thread(target=sink.serve_forever, daemon=True).start()
    endpoint = f"http://127.0.0.1:{sink.server_address[1]}"
    per_chunk: dict[str, list[float]] = {"off": [], "on": []}
    try:
        daemons = {
            "off": DaemonProc(),
            "on": DaemonProc(env={"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint}),
        }
        with daemons["off"], daemons["on"]:
            wins: dict[str, tuple[WindowsProc, str]] = {}
            for name, daemon in daemons.items():
                (tid,) = create_topics(daemon, 1)
                wp = WindowsProc(daemon.socket, [tid], 1, ctx.runs + 1, mode="text")
                wp.read()  # attached
                send_all(daemon, [tid], script)
                wp.read(timeout=300)  # warm-up: spawns the driver
                wins[name] = (wp, tid)
            try:
                for _ in range(ctx.runs):
                    for name, daemon in daemons.items():  # alternated: same machine moment
                        wp, tid = wins[name]
                        cpu0 = cpu_seconds(daemon.pid)
                        send_all(daemon, [tid], script)
                        wp.read(timeout=300)
                        us = (cpu_seconds(daemon.pid) - cpu0) / n * 1e6
                        per_chunk[name].append(us)
                        res.add(
                            f"daemon CPU per chunk, tracing {name}",
                            "us",
                            us,
                            baseline=name == "off",
                        )
                    res.add(
                        "daemon CPU per chunk, on - off",
                        "us",
                        per_chunk["on"][-1] - per_chunk["off"][-1],
                    )
            finally:
                for wp, _ in wins.values():
                    wp.close()
    finally:
        sink.shutdown()
    # The traced daemon exported its turns' spans (at the latest when it stopped).
    res.check("the traced daemon exported spans", _Sink.exports > 0, f"{_Sink.exports} exports")
    res.notes.append(
        f"whole daemon: {n} chunks of 8 chars per turn, one window; median on - off "
        f"{median([a - b for a, b in zip(per_chunk['on'], per_chunk['off'], strict=False)]) if per_chunk['on'] else 0:.2f} us"
    )
