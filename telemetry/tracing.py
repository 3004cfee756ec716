"""OpenTelemetry tracing: on when the standard OTEL_* variables name an exporter, off otherwise (no
provider, no interceptor, no instrumented library: nothing runs per call).

When on, Temporal's TracingInterceptor (temporalio.contrib.opentelemetry) joins the client that
starts a task, its workflow and every activity into one trace; httpx (provider and fetch calls),
SQLAlchemy and the gateway's FastAPI app add their spans under the activity or request that made them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from opentelemetry import trace

_ENDPOINTS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
_provider: Any = None  # the SDK TracerProvider in use, None while tracing is off


def exporter_configured(env: Mapping[str, str] = os.environ) -> bool:
    """An exporter named by OTEL_TRACES_EXPORTER (other than none) or an OTLP endpoint, and the SDK
    not disabled (OTEL_SDK_DISABLED)."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter:
        return exporter != "none"
    return any(env.get(name) for name in _ENDPOINTS)


def setup_tracing(service: str) -> bool:
    """Once per process, before its Temporal client connects: a provider exporting in batches to the
    configured exporter (OTLP over HTTP by default, or console); False (and nothing done) when off."""
    if _provider is not None or not exporter_configured():
        return _provider is not None
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME")
                                                        or f"reelqueue-{service}"}))
    provider.add_span_processor(BatchSpanProcessor(_exporter()))
    trace.set_tracer_provider(provider)
    activate(provider)
    return True


def _exporter() -> Any:
    names = os.environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower()
    if names.split(",")[0] == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()  # endpoint, headers, timeout from OTEL_EXPORTER_OTLP_*


def activate(provider: Any) -> None:
    """Traces go to `provider` from now on: the clients connected after this carry the interceptor,
    and httpx and SQLAlchemy (engines created after this) are instrumented. Tests pass their own
    provider with an in-memory exporter."""
    global _provider
    from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor
    from opentelemetry.instrumentation.sqlalchemy import SQLAlchemyInstrumentor

    deactivate()
    HTTPXClientInstrumentor().instrument(tracer_provider=provider, request_hook=_redacted_url,
                                         async_request_hook=_redacted_url_async)
    # Its declared range stops below the SQLAlchemy 2.1 this project runs; the engine hooks it uses are there.
    SQLAlchemyInstrumentor().instrument(tracer_provider=provider, enable_commenter=False, skip_dep_check=True)
    _provider = provider


_URL_ATTRIBUTES = ("url.full", "http.url")


def _redacted_url(span: Any, request: Any) -> None:
    """Signed URLs (S3 presigned, media links) carry their token in the query or the path: the
    span keeps the URL as telemetry/redaction.py leaves it in a log line."""
    if span.is_recording():
        from telemetry.redaction import redact

        url = redact(str(request.url))
        span.set_attributes({name: url for name in _URL_ATTRIBUTES if name in (span.attributes or {})})


async def _redacted_url_async(span: Any, request: Any) -> None:
    _redacted_url(span, request)


def deactivate() -> None:
    """Undo `activate` (tests)."""
    global _provider
    if _provider is None:
        return
    from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor
    from opentelemetry.instrumentation.sqlalchemy import SQLAlchemyInstrumentor

    HTTPXClientInstrumentor().uninstrument()
    SQLAlchemyInstrumentor().uninstrument()
    _provider = None


def enabled() -> bool:
    return _provider is not None


def client_interceptors() -> list[Any]:
    """For `Client.connect`: the tracing interceptor (also a worker interceptor, so a worker built on
    the client traces its workflows and activities), or none while tracing is off."""
    if _provider is None:
        return []
    from temporalio.contrib.opentelemetry import TracingInterceptor

    return [TracingInterceptor(_provider.get_tracer("reelqueue"))]


def instrument_app(app: Any) -> None:
    """The gateway's FastAPI app: a server span per request, parent of the workflow starts it makes."""
    if _provider is None:
        return
    from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor

    FastAPIInstrumentor.instrument_app(app, tracer_provider=_provider)


def annotate(**attributes: Any) -> None:
    """Sets `reelqueue.<name>` attributes on the current span (an activity's), when one records."""
    span = trace.get_current_span()
    if span.is_recording():
        span.set_attributes({f"reelqueue.{k}": v for k, v in attributes.items() if v is not None})
