"""Under Airflow a run joins the task instance's trace: the W3C carrier Airflow 3 gives each
task instance (``ti.context_carrier``) becomes the parent, when it is sampled and no span is
current; the Airflow adapter carries the context into the thread it may run in."""

from __future__ import annotations

import asyncio
from pathlib import Path

from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from runner.airflow.execution import call_blocking
from runner.config.project import load_project_or_raise
from runner.model.server import ScriptedServer
from runner.runs.execute import execute_task
from runner.runs.options import RunOptions
from runner.tracing import joined

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"


def run_sum(project_dir: Path, server: ScriptedServer) -> None:
    project = load_project_or_raise(project_dir)
    options = RunOptions(base_url_override=server.base_url, api_key="sk-test")
    asyncio.run(execute_task(project, project.task_for("sum"), {"a": "3"}, options))


def workflow(spans: InMemorySpanExporter):  # type: ignore[no-untyped-def]
    (found,) = [s for s in spans.get_finished_spans() if s.name == "invoke_workflow sum"]
    return found


def test_a_sampled_task_carrier_is_the_parent(project_dir: Path, spans: InMemorySpanExporter) -> None:
    with ScriptedServer({"fallback": {"content": "5"}}) as server, joined({"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"}):
        run_sum(project_dir, server)
    span = workflow(spans)
    assert f"{span.context.trace_id:032x}" == TRACE_ID and f"{span.parent.span_id:016x}" == PARENT_ID


def test_the_context_crosses_into_the_adapters_thread(project_dir: Path, spans: InMemorySpanExporter) -> None:
    async def from_a_running_loop() -> None:  # call_blocking then runs the call in a thread
        call_blocking(run_sum, project_dir, server)

    with ScriptedServer({"fallback": {"content": "5"}}) as server, joined({"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"}):
        asyncio.run(from_a_running_loop())
    assert f"{workflow(spans).context.trace_id:032x}" == TRACE_ID


def test_an_unsampled_carrier_is_not_joined(project_dir: Path, spans: InMemorySpanExporter) -> None:
    with ScriptedServer({"fallback": {"content": "5"}}) as server, joined({"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-00"}):
        run_sum(project_dir, server)
    span = workflow(spans)
    assert span.parent is None and f"{span.context.trace_id:032x}" != TRACE_ID


def test_a_current_span_wins_over_the_carrier(project_dir: Path, spans: InMemorySpanExporter) -> None:
    tracer = trace.get_tracer("airflow-like")
    carrier = {"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"}
    with (
        ScriptedServer({"fallback": {"content": "5"}}) as server,
        tracer.start_as_current_span("worker.summarise") as task_span,
        joined(carrier),
    ):
        run_sum(project_dir, server)
    assert workflow(spans).parent.span_id == task_span.get_span_context().span_id


def test_no_carrier_changes_nothing(project_dir: Path, spans: InMemorySpanExporter) -> None:
    with ScriptedServer({"fallback": {"content": "5"}}) as server, joined(None):
        run_sum(project_dir, server)
    assert workflow(spans).parent is None
