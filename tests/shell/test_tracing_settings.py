"""When the daemon traces (`hostd.shell.tracing.tracing_settings`): off by default, on with
the standard OTLP variables or `config.toml`'s `[tracing]`, off again with the SDK's own
switches; content capture only on request."""

from __future__ import annotations

from pathlib import Path

import pytest

from hostd.shell.tracing import TracingSettings, tracing_settings
from hostd_protocol.errors import ConfigError

EP = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:6006"}


def test_off_without_an_endpoint(tmp_path: Path) -> None:
    assert tracing_settings({}, None) is None
    assert tracing_settings({"OTEL_SERVICE_NAME": "x"}, tmp_path / "config.toml") is None
    # Capture alone turns nothing on.
    assert (
        tracing_settings({"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true"}, None)
        is None
    )


def test_on_with_the_standard_variables() -> None:
    assert tracing_settings(EP, None) == TracingSettings()
    traces_only = {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}
    assert tracing_settings(traces_only, None) == TracingSettings()
    on = {**EP, "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "TRUE"}
    assert tracing_settings(on, None) == TracingSettings(capture_content=True)


@pytest.mark.parametrize(
    "switch", [{"OTEL_SDK_DISABLED": "true"}, {"OTEL_TRACES_EXPORTER": "none"}]
)
def test_the_sdks_own_switches_turn_it_off(switch: dict[str, str]) -> None:
    assert tracing_settings({**EP, **switch}, None) is None


def test_the_config_file(tmp_path: Path) -> None:
    cfg = tmp_path / "config.toml"
    cfg.write_text(
        '[tracing]\nendpoint = "http://127.0.0.1:6006"\nservice_name = "desk"\n'
        "capture_content = true\n"
    )
    assert tracing_settings({}, cfg) == TracingSettings(
        endpoint="http://127.0.0.1:6006", service_name="desk", capture_content=True
    )
    # The variable decides capture when it is set.
    off = {"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "false"}
    settings = tracing_settings(off, cfg)
    assert settings is not None and not settings.capture_content


def test_a_bad_config_file_is_a_clear_error(tmp_path: Path) -> None:
    cfg = tmp_path / "config.toml"
    cfg.write_text("[tracing]\nendpoint = 6006\n")
    with pytest.raises(ConfigError, match=r"\[tracing\] endpoint and service_name must be strings"):
        tracing_settings({}, cfg)
    cfg.write_text("[tracing\n")
    with pytest.raises(ConfigError, match=r"^cannot read .*config.toml: .*; fix or remove it$"):
        tracing_settings({}, cfg)


def test_the_start_up_line_names_the_endpoint_without_credentials(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    pytest.importorskip("opentelemetry.sdk", reason="pip install 'hostd[otel]'")
    from hostd.shell.tracing import tracing_from_environment

    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    monkeypatch.setenv(
        "OTEL_EXPORTER_OTLP_ENDPOINT", "https://pk-1:sk-secret@otel.example:8443/api/public/otel"
    )
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "Authorization=Basic c2stc2VjcmV0")
    with caplog.at_level("INFO", logger="hostd.shell.tracing"):
        tracing = tracing_from_environment(None)
    assert tracing is not None
    tracing.shutdown()
    assert caplog.messages == [
        "tracing turns: OpenTelemetry spans to https://otel.example:8443/api/public/otel "
        "(content not captured)"
    ]
