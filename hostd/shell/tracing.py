"""Opt-in OpenTelemetry tracing of turns: when it is on, and the daemon's observer.

Off by default. On when the daemon's environment names an OTLP endpoint
(`OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) or
`<config>/config.toml` has a `[tracing]` table with an `endpoint`; `OTEL_SDK_DISABLED=true`
or `OTEL_TRACES_EXPORTER=none` turn it off again. The standard variables do the rest
(`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_EXPORTER_OTLP_HEADERS`,
`OTEL_TRACES_SAMPLER`, ...: read by the SDK itself), and
`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true` records prompts, answers and tool
input/output. docs/tracing.md has the how-to.

This module imports no OpenTelemetry: with tracing off nothing of it is loaded (a test checks
a real daemon). With tracing on, `Tracing` feeds the sans-IO `hostd.core.genai_spans`
mapper and hands its operations to `hostd.shell.otel_sdk`, the one module that calls the
SDK (its batch processor exports from its own thread: no network I/O on the event loop).
"""

from __future__ import annotations

import logging
import os
import time
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

from hostd.core.genai_spans import SpanMapper, SpanOp
from hostd_protocol.client_messages import TopicEvent
from hostd_protocol.driver_messages import ChunkEvent, DriverEvent
from hostd_protocol.errors import ConfigError

if TYPE_CHECKING:
    from hostd.shell.otel_sdk import SdkSpans

log = logging.getLogger(__name__)

__all__ = ["Tracing", "TracingSettings", "tracing_from_environment", "tracing_settings"]

_TRUE = {"1", "true", "yes", "on"}


@dataclass(frozen=True)
class TracingSettings:
    """What the daemon traces and where to (see the module docstring)."""

    #: Where spans go, when the config file says it (else the SDK reads the variables).
    endpoint: str = ""
    #: `service.name` unless `OTEL_SERVICE_NAME` / `OTEL_RESOURCE_ATTRIBUTES` say one.
    service_name: str = "hostd"
    capture_content: bool = False


def tracing_settings(env: Mapping[str, str], config_path: Path | None) -> TracingSettings | None:
    """The daemon's tracing settings, or None when tracing is off (the default).

    Raises:
        ConfigError: `config.toml` is unreadable or its `[tracing]` table is malformed.
    """
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() in _TRUE:
        return None
    if env.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return None
    table = _config_table(config_path)
    endpoint = table.get("endpoint", "")
    service = table.get("service_name", "hostd")
    capture = table.get("capture_content", False)
    if (
        not isinstance(endpoint, str)
        or not isinstance(service, str)
        or not isinstance(capture, bool)
    ):
        raise ConfigError(
            f"{config_path}: [tracing] endpoint and service_name must be strings and "
            "capture_content true or false"
        )
    from_env = any(
        env.get(name, "").strip()
        for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    )
    if not (from_env or endpoint):
        return None
    flag = env.get("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "").strip().lower()
    if flag:
        capture = flag in _TRUE
    return TracingSettings(endpoint=endpoint, service_name=service, capture_content=capture)


def tracing_from_environment(config_path: Path | None) -> Tracing | None:
    """The daemon's tracing as its environment and config file say, None when off. On, the
    SDK is imported here, before any topic runs: a missing `hostd[otel]` is a start-up
    error, not a silent no-trace."""
    settings = tracing_settings(os.environ, config_path)
    if settings is None:
        return None
    tracing = Tracing(settings)
    where = (
        os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        or settings.endpoint
    )
    # Scheme, host and path only: headers and a URL's user part may hold credentials.
    url = urlsplit(where)
    log.info(
        "tracing turns: OpenTelemetry spans to %s (content %s)",
        urlunsplit((url.scheme, url.hostname or "", url.path, "", ""))
        if url.port is None
        else urlunsplit((url.scheme, f"{url.hostname}:{url.port}", url.path, "", "")),
        "captured" if settings.capture_content else "not captured",
    )
    return tracing


def _config_table(path: Path | None) -> dict[str, object]:
    if path is None or not path.exists():
        return {}
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}; fix or remove it") from None
    table = doc.get("tracing", {})
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [tracing] must be a table")
    return table


class Tracing:
    """The daemon's tracing observer: topic events and driver events in, spans out.

    Every method runs on the trio thread, synchronously, and never raises: a tracing
    failure is logged once and tracing stops (a turn never fails because of it).
    """

    def __init__(self, settings: TracingSettings, spans: SdkSpans | None = None) -> None:
        if spans is None:
            from hostd.shell.otel_sdk import SdkSpans

            spans = SdkSpans(settings.endpoint, settings.service_name)
        self.settings = settings
        self.mapper = SpanMapper(capture_content=settings.capture_content)
        self._spans: SdkSpans | None = spans

    def _apply(self, ops: list[SpanOp]) -> None:
        if self._spans is None:
            return
        try:
            self._spans.apply(ops)
        except Exception:
            log.exception("tracing failed; it is off until the daemon restarts")
            self._spans = None

    def topic_event(self, topic_id: str, event: TopicEvent, agent: str = "") -> None:
        """An event a topic emitted (`agent`: its assistant, for `turn-started`)."""
        ops = self.mapper.topic_event(topic_id, event, time.time_ns(), agent)
        if ops:
            self._apply(ops)

    def driver_event(self, event: DriverEvent) -> None:
        """An event of a topic's driver, once the runtime applied it."""
        if type(event) is not ChunkEvent:
            ops = self.mapper.driver_event(event, time.time_ns())
            if ops:
                self._apply(ops)

    def traceparent(self, turn_id: str) -> str:
        """The W3C trace context of turn `turn_id`'s span ("" when it has none)."""
        key = self.mapper.turn_key(turn_id)
        if key is None or self._spans is None:
            return ""
        return self._spans.traceparent(key)

    def flush(self) -> None:
        """Export the finished spans now (blocking, bounded; call from a thread)."""
        if self._spans is not None:
            self._spans.flush()

    def shutdown(self) -> None:
        """Export what is left (blocking, bounded): the daemon's last step."""
        if self._spans is not None:
            self._spans.shutdown()
