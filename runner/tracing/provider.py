"""The tracer runner's spans go to: the host's OpenTelemetry SDK provider when the process
already has one (Airflow with its own tracing on, an application embedding runner, a test),
else one made here that exports over OTLP/HTTP in batches and flushes when the process exits.

A provider made here never holds the process: the flush at exit (and :func:`flush_all`) waits
at most the export timeout (at most 30 s; 1 s once an export has failed), and a receiver
that fails is reported once (:mod:`runner.tracing.export`). OpenTelemetry settings in the
environment that the SDK refuses (``OTEL_BSP_MAX_QUEUE_SIZE=0``, a limit that is not a
number) are a usage error naming the variable, raised before the run starts.
"""

from __future__ import annotations

import atexit
import functools
import os
import threading
from collections.abc import Callable

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider

from runner.errors import UsageError
from runner.tracing import TraceSettings
from runner.tracing.export import (
    AFTER_A_FAILURE,
    MAX_WAIT_AT_EXIT,
    AnswerIgnoringSession,
    ReportingExporter,
    bounded,
    describe_endpoint,
    export_timeout,
    quiet_exporter_logs,
)

INSTRUMENTATION = "runner"

# A tracer provider lives as long as the process (OpenTelemetry's own model: its exporter
# thread batches spans from every run and flushes at exit), so the ones made here are kept
# per settings instead of being rebuilt by every run of a batch.
_OWN: dict[TraceSettings, tuple[TracerProvider, ReportingExporter]] = {}
_LOCK = threading.Lock()
MAX_ATTRIBUTE_CHARS = 4096
"""An attribute value longer than this is cut (a model name or finish reason an endpoint made up)."""


def tracer_for(settings: TraceSettings) -> trace.Tracer:
    """The tracer for runner's spans."""
    host = trace.get_tracer_provider()
    provider = host if isinstance(host, TracerProvider) else _own_provider(settings)
    return provider.get_tracer(INSTRUMENTATION, _version())


def _own_provider(settings: TraceSettings) -> TracerProvider:
    """One provider per process and settings; ``shutdown_on_exit`` flushes it at exit."""
    with _LOCK:
        if settings not in _OWN:
            if not _OWN:
                quiet_exporter_logs()
                atexit.register(_shut_down_all)
            _OWN[settings] = _build(settings)
        return _OWN[settings][0]


def _build(settings: TraceSettings) -> tuple[TracerProvider, ReportingExporter]:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import SpanLimits
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    attributes = {} if os.environ.get("OTEL_SERVICE_NAME") else {"service.name": settings.service_name}
    session = AnswerIgnoringSession()
    try:
        exporter = ReportingExporter(OTLPSpanExporter(endpoint=settings.endpoint, session=session), describe_endpoint(settings.endpoint), session)
        limits = SpanLimits(max_attribute_length=MAX_ATTRIBUTE_CHARS)
        provider = TracerProvider(resource=Resource.create(attributes), shutdown_on_exit=False, span_limits=limits)
        provider.add_span_processor(BatchSpanProcessor(exporter))
    except ValueError as exc:  # an OTEL_* variable the SDK refuses
        raise UsageError(
            f"traces: an OpenTelemetry setting in the environment is not usable: {str(exc).rstrip('.')}. Fix or unset that "
            "OTEL_* variable, or turn traces off with OTEL_SDK_DISABLED=true"
        ) from None
    return provider, exporter


def flush_all() -> None:
    """Export what the providers made here still buffer (a host flushes its own), waiting at
    most the export timeout for each."""
    for provider, exporter in _providers():
        _within_bound(provider.force_flush, exporter)


def _shut_down_all() -> None:
    """At exit: flush and stop every provider made here, each within its bound."""
    for provider, exporter in _providers():
        _within_bound(provider.shutdown, exporter)


def _within_bound(action: Callable[[], object], exporter: ReportingExporter) -> None:
    wait = _wait(exporter)
    if not bounded(action, wait, lambda: exporter.failed):
        exporter.tell(exporter.session.outcome if exporter.failed else f"no answer within {wait:g} s")


def _providers() -> list[tuple[TracerProvider, ReportingExporter]]:
    with _LOCK:
        return list(_OWN.values())


def _wait(exporter: ReportingExporter) -> float:
    return AFTER_A_FAILURE if exporter.failed else min(export_timeout(), MAX_WAIT_AT_EXIT)


@functools.cache
def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("runner")
    except PackageNotFoundError:
        return "0"
