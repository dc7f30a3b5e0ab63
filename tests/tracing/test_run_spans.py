"""Runs as spans (in-memory exporter): names, nesting and gen_ai.* attributes of the GenAI
semantic conventions, errors, and no key in any attribute; no spans when tracing is off."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from runner.config.project import load_project_or_raise
from runner.model.server import ScriptedServer
from runner.runs.execute import execute_task
from runner.runs.options import RunOptions
from runner.store.runstore import RunStore

KEY = "sk-test-tracing-0123456789abcdef"


def run(project_dir: Path, task: str, inputs: dict[str, Any], server: ScriptedServer, **options: Any) -> Any:
    project = load_project_or_raise(project_dir)
    opts = RunOptions(base_url_override=server.base_url, api_key=KEY, **options)
    return asyncio.run(execute_task(project, project.task_for(task), inputs, opts))


def by_name(spans: InMemorySpanExporter) -> dict[str, list[ReadableSpan]]:
    found: dict[str, list[ReadableSpan]] = {}
    for span in spans.get_finished_spans():
        found.setdefault(span.name, []).append(span)
    return found


def tool_then_answer() -> dict[str, Any]:
    return {"rules": [
        {"when": {"last_role": "user"}, "times": 1,
         "reply": {"tool_calls": [{"name": "calculator", "arguments": {"expression": "3 + 2"}}],
                   "usage": {"prompt_tokens": 40, "completion_tokens": 9, "cached_tokens": 8}}},
        {"when": {"last_role": "tool"}, "reply": {"content": "The answer is 5.", "usage": {"prompt_tokens": 60, "completion_tokens": 6}}},
    ]}


def test_a_run_is_a_workflow_span_with_agent_model_and_tool_spans(project_dir: Path, spans: InMemorySpanExporter) -> None:
    with ScriptedServer(tool_then_answer()) as server:
        result = run(project_dir, "sum", {"a": "3"}, server)
    assert result.status == "completed"
    named = by_name(spans)
    (workflow,) = named["invoke_workflow sum"]
    (agent,) = named["invoke_agent worker"]
    chats = named["chat gpt-4o-mini"]
    (tool,) = named["execute_tool calculator"]
    assert len(chats) == 2
    assert workflow.parent is None and agent.parent.span_id == workflow.context.span_id
    assert all(c.parent.span_id == agent.context.span_id for c in chats) and tool.parent.span_id == agent.context.span_id
    assert {s.context.trace_id for s in spans.get_finished_spans()} == {workflow.context.trace_id}
    assert workflow.attributes["gen_ai.operation.name"] == "invoke_workflow"
    assert workflow.attributes["gen_ai.workflow.name"] == "sum"
    assert workflow.attributes["runner.run.id"] == result.run_id
    assert workflow.attributes["runner.usage.cost_usd"] == pytest.approx(result.usage.cost_usd)
    assert agent.attributes["gen_ai.operation.name"] == "invoke_agent" and agent.attributes["gen_ai.agent.name"] == "worker"
    first = min(chats, key=lambda s: s.start_time)
    assert first.kind is SpanKind.CLIENT
    assert first.attributes["gen_ai.operation.name"] == "chat"
    assert first.attributes["gen_ai.provider.name"] == "openai"
    assert first.attributes["gen_ai.request.model"] == "gpt-4o-mini"
    assert first.attributes["gen_ai.request.max_tokens"] == 200
    assert first.attributes["server.address"] == "127.0.0.1" and first.attributes["server.port"] == int(server.base_url.rsplit(":", 1)[1].split("/")[0])
    assert first.attributes["gen_ai.usage.input_tokens"] == 40 and first.attributes["gen_ai.usage.output_tokens"] == 9
    assert first.attributes["gen_ai.usage.cache_read.input_tokens"] == 8
    assert tuple(first.attributes["gen_ai.response.finish_reasons"]) == ("tool_calls",)
    assert first.end_time > first.start_time
    assert tool.attributes["gen_ai.operation.name"] == "execute_tool" and tool.attributes["gen_ai.tool.name"] == "calculator"
    assert workflow.status.status_code is not StatusCode.ERROR


def test_span_totals_match_the_run_store(project_dir: Path, spans: InMemorySpanExporter) -> None:
    with ScriptedServer(tool_then_answer()) as server:
        result = run(project_dir, "sum", {"a": "3"}, server)
    store = RunStore(project_dir / ".runner" / "runs.sqlite3")
    calls = store.model_calls(result.run_id)
    store.close()
    chats = sorted(by_name(spans)["chat gpt-4o-mini"], key=lambda s: s.start_time)
    assert [c.attributes["gen_ai.usage.input_tokens"] for c in chats] == [c["input_tokens"] for c in calls]
    assert [c.attributes["gen_ai.usage.output_tokens"] for c in chats] == [c["output_tokens"] for c in calls]


def test_no_attribute_holds_the_key_or_the_prompt(project_dir: Path, spans: InMemorySpanExporter) -> None:
    with ScriptedServer(tool_then_answer()) as server:
        run(project_dir, "sum", {"a": "3"}, server)
    for span in spans.get_finished_spans():
        for value in span.attributes.values():
            text = str(value)
            assert KEY not in text and "What is 3 + 2" not in text and "The answer is 5" not in text


def test_a_failed_model_call_is_an_error_span_with_its_kind(project_dir: Path, spans: InMemorySpanExporter) -> None:
    with ScriptedServer({"rules": [{"reply": {"fault": {"status": 401}}}]}) as server:
        result = run(project_dir, "sum", {"a": "3"}, server)
    assert result.status == "failed"
    named = by_name(spans)
    (chat,) = named["chat gpt-4o-mini"]
    assert chat.status.status_code is StatusCode.ERROR and chat.attributes["error.type"] == result.error_kind
    (agent,) = named["invoke_agent worker"]
    (workflow,) = named["invoke_workflow sum"]
    for span in (agent, workflow):
        assert span.status.status_code is StatusCode.ERROR and span.attributes["error.type"] == result.error_kind


def test_a_capped_run_says_which_cap(project_dir: Path, spans: InMemorySpanExporter) -> None:
    from runner.config.specs import Caps

    with ScriptedServer(tool_then_answer()) as server:
        result = run(project_dir, "sum", {"a": "3"}, server, caps=Caps(max_steps=1))
    assert result.status == "capped"
    (workflow,) = by_name(spans)["invoke_workflow sum"]
    assert workflow.attributes["error.type"] == "max_steps" and workflow.attributes["runner.run.status"] == "capped"


def test_pipeline_tool_steps_and_agent_steps_nest_under_the_run(project_dir: Path, spans: InMemorySpanExporter) -> None:
    with ScriptedServer({"fallback": {"content": "Sales are up."}}) as server:
        result = run(project_dir, "pipeline", {}, server)
    assert result.status == "completed"
    named = by_name(spans)
    (workflow,) = named["invoke_workflow pipeline"]
    steps = named["execute_tool calculator"]
    assert len(steps) == 2 and all(s.parent.span_id == workflow.context.span_id for s in steps)
    assert {s.attributes["runner.step.id"] for s in steps} == {"one", "two"}
    (writer,) = named["invoke_agent writer"]
    assert writer.parent.span_id == workflow.context.span_id


def test_the_run_joins_the_callers_trace(project_dir: Path, spans: InMemorySpanExporter) -> None:
    from opentelemetry import trace

    with ScriptedServer(tool_then_answer()) as server, trace.get_tracer("test").start_as_current_span("caller") as caller:
        run(project_dir, "sum", {"a": "3"}, server)
    (workflow,) = by_name(spans)["invoke_workflow sum"]
    assert workflow.parent.span_id == caller.get_span_context().span_id
    assert workflow.context.trace_id == caller.get_span_context().trace_id


@pytest.mark.parametrize("off", [{}, {"OTEL_SDK_DISABLED": "true"}, {"OTEL_TRACES_EXPORTER": "none"}])
def test_no_spans_when_tracing_is_off(
    project_dir: Path, exporter: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch, off: dict[str, str]
) -> None:
    for name in ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    if off:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
        for name, value in off.items():
            monkeypatch.setenv(name, value)
    exporter.clear()
    with ScriptedServer(tool_then_answer()) as server:
        assert run(project_dir, "sum", {"a": "3"}, server).status == "completed"
    assert exporter.get_finished_spans() == ()
