"""OpenTelemetry traces of runs, following the GenAI semantic conventions.

Tracing is off unless the standard ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` /
``OTEL_EXPORTER_OTLP_ENDPOINT`` variables or a ``kind: Telemetry`` document name a receiver
(``OTEL_SDK_DISABLED=true``, ``OTEL_TRACES_EXPORTER=none`` or ``enabled: false`` turn it off).
This module decides that from the environment alone: OpenTelemetry is imported only when
tracing is on, so a run without it pays nothing at start-up.

Spans are made from the events a run already emits (:mod:`runner.tracing.spans`): nothing
in the loop knows about tracing, and what reaches a span has been redacted like the event
stream. Prompts, answers, tool arguments and results are not put in spans.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from runner.config.specs import TelemetrySpec
from runner.errors import UsageError

TRACES_ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
DEFAULT_SERVICE_NAME = "runner"


@dataclass(frozen=True)
class TraceSettings:
    """Where spans go. ``endpoint`` is ``None`` when the OTEL_* variables name it (the OTLP
    exporter reads them itself, headers and timeout included)."""

    endpoint: str | None = None
    service_name: str = DEFAULT_SERVICE_NAME


def trace_settings(configured: TelemetrySpec | None, environ: Mapping[str, str] | None = None) -> TraceSettings | None:
    """The settings when tracing is on, else ``None``. The variables take precedence over YAML."""
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    if env.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return None
    if configured is not None and not configured.enabled:
        return None
    service = configured.service_name if configured and configured.service_name else DEFAULT_SERVICE_NAME
    for name in TRACES_ENDPOINT_VARIABLES:
        if env.get(name, "").strip():
            _check_endpoint(env[name].strip(), name)
            return TraceSettings(None, service)
    if configured is not None and configured.endpoint:
        _check_endpoint(configured.endpoint, "the Telemetry document's traces.endpoint")
        return TraceSettings(traces_url(configured.endpoint), service)
    return None


def _check_endpoint(url: str, where: str) -> None:
    """:class:`UsageError` naming ``where`` unless ``url`` is an http(s) URL with a host and a
    valid port (the URL itself is not repeated: it may hold a credential)."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises for a port that is not a number in 0-65535
        usable = parts.scheme in ("http", "https") and bool(parts.hostname)
    except ValueError:
        usable = False
    if not usable:
        raise UsageError(
            f"{where} is not an OTLP/HTTP URL (http:// or https://, a host, a port from 1 to 65535, e.g. "
            "http://localhost:4318); fix it, or unset it to run without traces"
        )


MISSING_SDK = (
    "traces are on ({why}) but the OpenTelemetry SDK is not installed, so this run is not traced: "
    "pip install 'runner[otel]', or unset the variable"
)


def sdk_installed() -> bool:
    """Whether the OpenTelemetry SDK and its OTLP/HTTP exporter can be imported (without importing them)."""
    from importlib.util import find_spec

    try:
        return all(find_spec(name) is not None for name in ("opentelemetry.sdk", "opentelemetry.exporter.otlp.proto.http"))
    except ImportError:  # a parent package is missing or broken
        return False


def traces_url(endpoint: str) -> str:
    """``http://host:4318`` -> ``http://host:4318/v1/traces``; a URL with a path is kept."""
    parts = urlsplit(endpoint)
    if parts.path in ("", "/"):
        return urlunsplit((parts.scheme, parts.netloc, "/v1/traces", parts.query, ""))
    return endpoint


def flush() -> None:
    """Export the spans still buffered (before a process that may skip ``atexit`` ends, e.g. an
    Airflow task). Does nothing, and imports nothing, when no span was ever made."""
    provider = sys.modules.get("runner.tracing.provider")
    if provider is not None:
        provider.flush_all()


@contextmanager
def joined(carrier: Mapping[str, str] | None) -> Iterator[None]:
    """Make the W3C trace context in ``carrier`` (an Airflow task instance's ``context_carrier``)
    the parent of the runs traced inside, so they join the task's trace.

    Nothing changes when a span is already current (Airflow's own task span, when Airflow's
    tracing is on in this process) or when the carrier is not sampled: nothing records that
    trace (Airflow's tracing is off), and joining it would drop runner's spans as well.
    """
    if not carrier:
        yield
        return
    from opentelemetry import context, trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    parent = TraceContextTextMapPropagator().extract(dict(carrier))
    joinable = trace.get_current_span(parent).get_span_context()
    if trace.get_current_span().get_span_context().is_valid or not (joinable.is_valid and joinable.trace_flags.sampled):
        yield
        return
    token = context.attach(parent)
    try:
        yield
    finally:
        context.detach(token)


@contextmanager
def current_span(configured: TelemetrySpec | None, name: str, attributes: Mapping[str, object]) -> Iterator[Callable[..., None]]:
    """A span around a block (e.g. a whole batch), current inside it so the runs it starts are
    its children; yields ``note(**attributes)`` to add attributes before it ends. A no-op,
    importing nothing, when tracing is off."""
    settings = trace_settings(configured)
    if settings is None or not sdk_installed():
        yield _ignore
        return
    from runner.tracing.provider import tracer_for

    with tracer_for(settings).start_as_current_span(name, attributes=dict(attributes)) as span:  # type: ignore[arg-type]
        yield lambda **found: span.set_attributes(found)


def _ignore(**_: object) -> None:
    return None


@contextmanager
def flushed() -> Iterator[None]:
    """:func:`flush` when the block ends, however it ends (a task process may end without ``atexit``)."""
    try:
        yield
    finally:
        flush()
