"""Traces from the real CLI arrive in a real OTLP/HTTP receiver (Arize Phoenix): a run with the
standard OTEL variables, a batch with a kind: Telemetry document; and a run without either
imports no OpenTelemetry at all."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner.model.server import ScriptedServer
from tests.support.project import copy_project, copy_shipped, run_cli
from tests.tracing.phoenix import REPO, Phoenix, phoenix_executable

KEY = "sk-test-phoenix-0123456789abcdef"


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Phoenix]:
    with Phoenix(phoenix_executable(), tmp_path_factory.mktemp("phoenix")) as server:
        yield server


def cli(root: Path, server: ScriptedServer, *args: str, **env_extra: str) -> subprocess.CompletedProcess[str]:
    return run_cli(root, server, *args, env=env_extra, key=KEY, drop=("OTEL_",))


def tool_then_answer() -> dict[str, object]:
    return {"rules": [
        {"when": {"last_role": "user"}, "times": 1,
         "reply": {"tool_calls": [{"name": "calculator", "arguments": {"expression": "3 + 2"}}]}},
        {"when": {"last_role": "tool"}, "reply": {"content": "The answer is 5."}},
    ]}


def test_a_cli_run_arrives_in_phoenix_as_genai_spans(phoenix: Phoenix, tmp_path: Path) -> None:
    root = copy_project(REPO / "tests" / "runs" / "project", tmp_path / "project")
    with ScriptedServer(tool_then_answer()) as server:
        done = cli(root, server, "run", "sum", "-i", "a=3", "--json",
                   OTEL_EXPORTER_OTLP_ENDPOINT=phoenix.url, OTEL_SERVICE_NAME="runner-e2e",
                   OTEL_RESOURCE_ATTRIBUTES="openinference.project.name=cli-run")
    assert done.returncode == 0, done.stderr
    run_id = json.loads(done.stdout.splitlines()[-1])["run_id"]
    spans = phoenix.spans("cli-run", at_least=5)
    named = {s["name"]: s for s in spans}
    assert sorted(s["name"] for s in spans) == sorted(
        ["invoke_workflow sum", "invoke_agent worker", "chat gpt-4o-mini", "chat gpt-4o-mini", "execute_tool calculator"]
    )
    workflow, agent, tool = named["invoke_workflow sum"], named["invoke_agent worker"], named["execute_tool calculator"]
    assert workflow["parent_id"] is None and workflow["attributes"]["runner.run.id"] == run_id
    assert agent["parent_id"] == workflow["context"]["span_id"] and tool["parent_id"] == agent["context"]["span_id"]
    chats = [s for s in spans if s["name"] == "chat gpt-4o-mini"]
    for chat in chats:
        assert chat["parent_id"] == agent["context"]["span_id"]
        attributes = chat["attributes"]
        assert attributes["gen_ai.operation.name"] == "chat" and attributes["gen_ai.provider.name"] == "openai"
        assert attributes["gen_ai.request.model"] == "gpt-4o-mini" and attributes["server.address"] == "127.0.0.1"
        assert attributes["gen_ai.usage.input_tokens"] > 0 and attributes["gen_ai.usage.output_tokens"] > 0
    assert {tuple(c["attributes"]["gen_ai.response.finish_reasons"]) for c in chats} == {("tool_calls",), ("stop",)}
    assert len({s["context"]["trace_id"] for s in spans}) == 1
    assert KEY not in json.dumps(spans)


def test_a_batch_traced_from_a_telemetry_document_is_one_trace(phoenix: Phoenix, tmp_path: Path) -> None:
    root = copy_shipped(tmp_path / "project")
    (root / "tasks.d" / "telemetry.yaml").write_text(
        f"apiVersion: runner/v1\nkind: Telemetry\ntraces: {{endpoint: '{phoenix.url}', service_name: runner-batch}}\n"
    )
    rows = root / "tickets.csv"
    rows.write_text("id,subject,body\nT1,Refund,I was charged twice\nT2,Crash,The app crashes on start\nT3,Hello,Just saying hi\n")
    reply = {"content": '{"category": "other", "urgency": "low", "summary": "ok"}'}
    with ScriptedServer({"fallback": reply}) as server:
        done = cli(root, server, "batch", "triage_ticket", "--input", str(rows), "--output", str(root / "out.jsonl"),
                   "--id-column", "id", "--progress", "none",
                   OTEL_RESOURCE_ATTRIBUTES="openinference.project.name=cli-batch")
    assert done.returncode == 0, done.stderr
    spans = phoenix.spans("cli-batch", at_least=10)
    (batch,) = [s for s in spans if s["name"] == "batch triage_ticket"]
    runs = [s for s in spans if s["name"] == "invoke_workflow triage_ticket"]
    assert len(runs) == 3 and all(r["parent_id"] == batch["context"]["span_id"] for r in runs)
    assert batch["attributes"]["runner.batch.rows.done"] == 3
    assert len([s for s in spans if s["name"] == "chat gpt-4o-mini"]) == 3
    assert len({s["context"]["trace_id"] for s in spans}) == 1


def test_without_an_endpoint_no_opentelemetry_is_imported(tmp_path: Path) -> None:
    root = copy_project(REPO / "tests" / "runs" / "project", tmp_path / "project")
    with ScriptedServer({"fallback": {"content": "5"}}) as server:
        done = subprocess.run(
            [sys.executable, "-X", "importtime", "-m", "runner", "run", "sum", "-i", "a=3"], cwd=root,
            env={**{k: v for k, v in os.environ.items() if not k.startswith(("OPENAI", "OTEL_"))},
                 "OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": KEY},
            capture_output=True, text=True, timeout=300,
        )
    assert done.returncode == 0, done.stderr
    assert "import time:" in done.stderr and "opentelemetry" not in done.stderr


def test_without_the_sdk_the_run_goes_on_and_says_why_it_is_not_traced(tmp_path: Path) -> None:
    root = copy_project(REPO / "tests" / "runs" / "project", tmp_path / "project")
    shadow = tmp_path / "shadow" / "opentelemetry"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("")  # an opentelemetry package without the SDK
    path = os.pathsep.join([str(shadow.parent), os.environ.get("PYTHONPATH", ""), str(REPO)])
    with ScriptedServer({"fallback": {"content": "5"}}) as server:
        done = cli(root, server, "run", "sum", "-i", "a=3", OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9", PYTHONPATH=path)
    assert done.returncode == 0, done.stderr
    assert "the OpenTelemetry SDK is not installed, so this run is not traced: pip install 'runner[otel]'" in done.stderr
