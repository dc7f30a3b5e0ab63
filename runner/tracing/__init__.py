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
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from runner.config.specs import TelemetrySpec

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
    if any(env.get(name, "").strip() for name in TRACES_ENDPOINT_VARIABLES):
        return TraceSettings(None, service)
    if configured is not None and configured.endpoint:
        return TraceSettings(traces_url(configured.endpoint), service)
    return None


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
