"""The one module that calls the OpenTelemetry SDK: span operations in, OTLP/HTTP out.

Imported only when tracing is on (`hostd.shell.tracing`); needs `pip install 'hostd[otel]'`.
Applies the sans-IO `hostd.core.genai_spans` operations to SDK spans of a private
`TracerProvider` (the process-wide one is left alone: a program embedding the daemon keeps
its own), exported by a `BatchSpanProcessor` to an `OTLPSpanExporter` over HTTP/protobuf,
both configured by the standard `OTEL_*` variables unless `config.toml` names the endpoint.
The processor exports from its own thread, so the event loop only queues finished spans.
"""

from __future__ import annotations

import logging
import os
import threading

from hostd import __version__
from hostd.core.genai_spans import CloseSpan, OpenSpan, SpanEvent, SpanOp
from hostd_protocol.errors import ConfigError

try:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
    from opentelemetry.trace import Span, SpanKind, Status, StatusCode, set_span_in_context
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError as exc:  # pragma: no cover - depends on the installation
    raise ConfigError(
        f"tracing is on (an OTEL_EXPORTER_OTLP_* variable or [tracing] in config.toml) but "
        f"OpenTelemetry is not installed ({exc.name}): pip install 'hostd[otel]', or unset "
        "the variables"
    ) from None

log = logging.getLogger(__name__)

__all__ = ["SdkSpans"]

_KINDS = {"internal": SpanKind.INTERNAL, "client": SpanKind.CLIENT}
_W3C = TraceContextTextMapPropagator()
#: Seconds a stopping daemon waits for its last spans to be exported.
SHUTDOWN_GRACE = 2.0


class SdkSpans:
    """Open SDK spans by the mapper's keys.

    Args:
        endpoint: The OTLP/HTTP base URL from the config file ("": the `OTEL_*` variables).
        service_name: `service.name` unless the variables name one.
        exporter: Instead of OTLP/HTTP (tests: an in-memory exporter).
    """

    def __init__(
        self,
        endpoint: str = "",
        service_name: str = "hostd",
        exporter: SpanExporter | None = None,
    ) -> None:
        attrs: dict[str, str] = {}
        if not os.environ.get("OTEL_SERVICE_NAME") and "service.name=" not in os.environ.get(
            "OTEL_RESOURCE_ATTRIBUTES", ""
        ):
            attrs["service.name"] = service_name
        attrs["service.version"] = __version__
        self.provider = TracerProvider(resource=Resource.create(attrs))
        if exporter is None:
            url = None
            if endpoint and not (
                os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
                or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            ):
                url = endpoint.rstrip("/") + "/v1/traces"
            exporter = OTLPSpanExporter(endpoint=url)
        self._exporter = exporter
        self.provider.add_span_processor(BatchSpanProcessor(exporter))
        self._tracer = self.provider.get_tracer("hostd", __version__)
        self._open: dict[str, Span] = {}

    def apply(self, ops: list[SpanOp]) -> None:
        for op in ops:
            if type(op) is OpenSpan:
                parent = self._open.get(op.parent) if op.parent is not None else None
                span = self._tracer.start_span(
                    op.name,
                    context=set_span_in_context(parent) if parent is not None else None,
                    kind=_KINDS[op.kind],
                    attributes=op.attrs,
                    start_time=op.start_ns,
                )
                self._open[op.key] = span
            elif type(op) is CloseSpan:
                closing = self._open.pop(op.key, None)
                if closing is None:
                    continue
                closing.set_attributes(op.attrs)
                if op.error is not None:
                    closing.set_status(Status(StatusCode.ERROR, op.error))
                closing.end(end_time=op.end_ns)
            elif type(op) is SpanEvent:
                target = self._open.get(op.key)
                if target is not None:
                    target.add_event(op.name, op.attrs, timestamp=op.time_ns)

    def traceparent(self, key: str) -> str:
        """W3C `traceparent` of open span `key` ("" when it is not open)."""
        span = self._open.get(key)
        if span is None:
            return ""
        carrier: dict[str, str] = {}
        _W3C.inject(carrier, context=set_span_in_context(span))
        return carrier.get("traceparent", "")

    def flush(self) -> None:
        self.provider.force_flush(timeout_millis=5000)

    def shutdown(self) -> None:
        """End spans still open (a daemon stopping mid-turn: they are cut there), then
        export everything queued (the processor bounds the wait)."""
        for span in reversed(list(self._open.values())):
            span.end()
        self._open.clear()
        # An unreachable backend would keep the exporter retrying for its whole timeout
        # (10 s by default) while the daemon stops: its shutdown cuts the retries short.
        cut = threading.Timer(SHUTDOWN_GRACE, self._exporter.shutdown)
        cut.start()
        try:
            self.provider.force_flush(timeout_millis=int(SHUTDOWN_GRACE * 1000))
        finally:
            cut.cancel()
            self.provider.shutdown()
