"""The tracer runner's spans go to: the host's OpenTelemetry SDK provider when the process
already has one (Airflow with its own tracing on, an application embedding runner, a test),
else one made here that exports over OTLP/HTTP in batches and flushes when the process exits.
"""

from __future__ import annotations

import functools
import os
import threading

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider

from runner.tracing import TraceSettings

INSTRUMENTATION = "runner"

# A tracer provider lives as long as the process (OpenTelemetry's own model: its exporter
# thread batches spans from every run and flushes at exit), so the ones made here are kept
# per settings instead of being rebuilt by every run of a batch.
_OWN: dict[TraceSettings, TracerProvider] = {}
_LOCK = threading.Lock()


def tracer_for(settings: TraceSettings) -> trace.Tracer:
    """The tracer for runner's spans."""
    host = trace.get_tracer_provider()
    provider = host if isinstance(host, TracerProvider) else _own_provider(settings)
    return provider.get_tracer(INSTRUMENTATION, _version())


def _own_provider(settings: TraceSettings) -> TracerProvider:
    """One provider per process and settings; ``shutdown_on_exit`` flushes it at exit."""
    with _LOCK:
        if settings not in _OWN:
            _OWN[settings] = _build(settings)
        return _OWN[settings]


def _build(settings: TraceSettings) -> TracerProvider:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    attributes = {} if os.environ.get("OTEL_SERVICE_NAME") else {"service.name": settings.service_name}
    provider = TracerProvider(resource=Resource.create(attributes))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=settings.endpoint)))
    return provider


def flush_all() -> None:
    """Export what the providers made here still buffer (a host flushes its own)."""
    with _LOCK:
        providers = list(_OWN.values())
    for provider in providers:
        provider.force_flush()


@functools.cache
def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("runner")
    except PackageNotFoundError:
        return "0"
