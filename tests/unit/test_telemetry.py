"""Log lines, redaction, the tracing switch and the SDK metrics collector (telemetry/, metrics/sdk.py)."""

from __future__ import annotations

import json
import logging

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from temporalio.runtime import MetricBuffer, MetricBufferDurationFormat, Runtime, TelemetryConfig

from metrics.sdk import SdkMetrics
from telemetry import redaction, tracing
from telemetry.logs import StructuredFormatter, bind, bound, task_of_workflow


def _record(message: str, *args, **extra) -> logging.LogRecord:
    record = logging.LogRecord("reelqueue.test", logging.WARNING, __file__, 1, message, args, None)
    record.__dict__.update(extra)
    return record


def test_a_json_line_carries_time_level_service_and_the_ids_it_knows() -> None:
    activity = {"workflow_id": "gen-t_abc-run2", "workflow_run_id": "r-1", "attempt": 3, "activity_type": "submit"}
    with bound(provider="emulator", request_id="req-9"):
        line = StructuredFormatter("worker").format(_record("sent %s", "x", temporal_activity=activity))
    fields = json.loads(line)
    assert fields["level"] == "warning" and fields["service"] == "worker" and fields["message"] == "sent x"
    assert fields["time"].endswith("+00:00")
    assert {k: fields[k] for k in ("task_id", "workflow_id", "run_id", "attempt", "activity", "provider",
                                   "request_id")} == {
        "task_id": "t_abc", "workflow_id": "gen-t_abc-run2", "run_id": "r-1", "attempt": 3, "activity": "submit",
        "provider": "emulator", "request_id": "req-9"}
    outside = json.loads(StructuredFormatter("worker").format(_record("later")))
    assert "provider" not in outside and "task_id" not in outside  # bound fields end with their block


def test_the_text_format_has_the_same_fields_on_one_line() -> None:
    with bound(request_id="req-1"):
        line = StructuredFormatter("cli", "text").format(_record("asked? %s", "yes"))
    assert line.endswith(" warning cli reelqueue.test: asked? yes request_id=req-1")


def test_tenant_text_reaches_a_log_line_as_escapes() -> None:
    """Issue 44.10: a product id with ESC, BEL, CSI or U+202E logged as it was coloured the operator's
    terminal (`tail -f`); both formats write those characters escaped (JSON: the same value)."""
    from contracts.tenant_text import UNSAFE

    hostile = "p\x1b[41mX\x07\x9b\u202ey"
    for fmt in ("json", "text"):
        line = StructuredFormatter("gateway", fmt).format(_record("product %s", hostile, fields={"pid": hostile}))
        assert UNSAFE.search(line) is None, (fmt, line)
    assert json.loads(StructuredFormatter("gateway").format(_record("product %s", hostile)))["message"] == \
        f"product {hostile}"


def test_signed_urls_tokens_and_configured_secrets_never_reach_a_line(monkeypatch) -> None:
    monkeypatch.setattr(redaction, "_secrets", ())
    redaction.add_secrets(["s3-secret-value-123", "postgresql+psycopg://rq:pg-password-77@h/db", "", "short"])
    message = ("GET http://s3:9000/b/k.mp4?X-Amz-Signature=abc /media/tok.en.sig/proxy.mp4 "
               "Authorization: Bearer sk_live_42 key=s3-secret-value-123 dsn password pg-password-77")
    line = StructuredFormatter("gateway").format(_record(message))
    for secret in ("X-Amz-Signature=abc", "tok.en.sig", "sk_live_42", "s3-secret-value-123", "pg-password-77"):
        assert secret not in line
    assert "/media/[redacted]/proxy.mp4" in line and "k.mp4?[redacted]" in line and "dsn password" in line


@pytest.mark.parametrize(("env", "on"), [
    ({}, False),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, True),
    ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, True),
    ({"OTEL_TRACES_EXPORTER": "console"}, True),
    ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, False),
    ({"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, False),
])
def test_tracing_is_on_only_when_otel_variables_name_an_exporter(env, on) -> None:
    assert tracing.exporter_configured(env) is on


def test_with_tracing_off_no_client_carries_an_interceptor() -> None:
    assert not tracing.enabled() and tracing.client_interceptors() == []


def test_task_of_workflow() -> None:
    assert task_of_workflow("gen-t_1") == "t_1" and task_of_workflow("gen-t_1-run3") == "t_1"
    assert task_of_workflow("renditions-t_1") == "t_1"
    assert task_of_workflow("gate-emulator") is None and task_of_workflow(None) is None


def test_sdk_metrics_add_counters_keep_gauges_and_bucket_histograms() -> None:
    buffer = MetricBuffer(1000, MetricBufferDurationFormat.SECONDS)
    meter = Runtime(telemetry=TelemetryConfig(metrics=buffer)).metric_meter
    polls = meter.create_counter("temporal_poll", "polls")
    polls.add(2, {"kind": "activity"})
    polls.add(3, {"kind": "activity"})
    polls.add(1, {"kind": "workflow", "extra": "x"})  # a label set with a key the others lack
    meter.create_gauge("temporal_slots", "slots").set(7, {"slot_type": "activity"})
    latency = meter.create_histogram_float("temporal_latency", "latency", "s")
    latency.record(0.02, {})
    latency.record(3.0, {})
    registry = CollectorRegistry()
    registry.register(SdkMetrics(buffer))
    text = generate_latest(registry).decode()
    assert 'temporal_poll_total{extra="",kind="activity",service_name="temporal-core-sdk"} 5.0' in text
    assert 'temporal_slots{service_name="temporal-core-sdk",slot_type="activity"} 7.0' in text
    assert 'temporal_latency_bucket{le="0.025",service_name="temporal-core-sdk"} 1.0' in text
    assert 'temporal_latency_bucket{le="+Inf",service_name="temporal-core-sdk"} 2.0' in text
    assert 'temporal_latency_sum{service_name="temporal-core-sdk"} 3.02' in text
    polls.add(1, {"kind": "activity"})
    assert 'kind="activity",service_name="temporal-core-sdk"} 6.0' in generate_latest(registry).decode()


def test_with_tracing_on_the_gateway_answers_under_a_server_span() -> None:
    from fastapi.testclient import TestClient
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from config.settings import Settings
    from gateway.app import create_app

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.activate(provider)
    try:
        app = create_app(lambda: pytest.fail("/healthz needs no dependency"), settings=Settings())
        with TestClient(app) as http:
            assert http.get("/healthz", headers={"X-Request-ID": "span-1"}).status_code == 200
    finally:
        tracing.deactivate()
    assert "GET /healthz" in [span.name for span in exporter.get_finished_spans()]
    assert not tracing.enabled()


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_the_cli_logs_in_the_format_it_is_given(fmt) -> None:
    from typer.testing import CliRunner

    from starter import app

    root = logging.getLogger()
    before, level = list(root.handlers), root.level
    try:
        result = CliRunner().invoke(app, ["--log-format", fmt, "providers", "--json"])
        assert result.exit_code == 0, result.output
        (ours,) = [h for h in root.handlers if isinstance(h.formatter, StructuredFormatter)]
        assert (ours.formatter.service, ours.formatter.fmt) == ("cli", fmt)
    finally:
        root.handlers[:] = before
        root.setLevel(level)
    assert CliRunner().invoke(app, ["--log-format", "xml", "providers"]).exit_code == 2


def test_a_bind_outside_any_block_leaves_nothing_behind() -> None:
    """An activity's method called without the worker's interceptor (tests do) binds its provider;
    later lines of the same thread must not carry it."""
    bind(provider="emulator")
    assert "provider" not in json.loads(StructuredFormatter("worker").format(_record("after")))
    with bound(task_id="t_1"):
        bind(provider="emulator")
        assert json.loads(StructuredFormatter("worker").format(_record("inside")))["provider"] == "emulator"
