"""The SDK's in-memory exporter behind the process's tracer provider (runner uses a host's
provider when there is one), and a copy of the test project per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.support.project import copy_project

PROJECT = Path(__file__).resolve().parents[1] / "runs" / "project"
_EXPORTER = InMemorySpanExporter()


def _install() -> None:
    """Once per process: OpenTelemetry lets the global provider be set only once."""
    current = trace.get_tracer_provider()
    if isinstance(current, TracerProvider):
        current.add_span_processor(SimpleSpanProcessor(_EXPORTER))
    else:
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        trace.set_tracer_provider(provider)


@pytest.fixture(scope="session")
def exporter() -> InMemorySpanExporter:
    _install()
    return _EXPORTER


@pytest.fixture
def spans(exporter: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    """Tracing on (an endpoint variable set), spans collected in memory for this test."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://127.0.0.1:9/v1/traces")
    for name in ("OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    exporter.clear()
    yield exporter
    exporter.clear()


@pytest.fixture
def project_dir(tmp_path: Path) -> Path:
    return copy_project(PROJECT, tmp_path / "project")
