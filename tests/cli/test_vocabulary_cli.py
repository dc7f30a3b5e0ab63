"""Issue 11's behaviours through the real CLI, the real openai SDK and the loopback server:
decisions made on types (malformed JSON counts as an invalid call, ``terminate`` failure
fails the run), cached tokens flowing from the endpoint's usage to the report, and prompt
overrides by name."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from runner.model.server import ScriptedServer
from tests.support.project import copy_project, run_cli

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return copy_project(REPO / "tests/runs/project", tmp_path / "project")


def runner(root: Path, server: ScriptedServer, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(root, server, *args, key="sk-test-vocabulary-0001")


def raw_call(name: str, arguments: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def report(root: Path, task: str) -> dict[str, Any]:
    (report_dir,) = (root / "reports" / task).iterdir()
    return json.loads((report_dir / "report.json").read_text())


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("calculator", '{{"expression": {n},'),  # malformed JSON
        ("calculator", "[{n}]"),  # JSON, but not an object
        ("calculator", '{{"expresion": "{n}"}}'),  # does not match the schema
        ("no_such_tool", '{{"n": {n}}}'),  # unknown tool
    ],
    ids=["malformed-json", "not-an-object", "schema-mismatch", "unknown-tool"],
)
def test_invalid_calls_in_a_row_end_the_run_stuck(project: Path, tool: str, arguments: str) -> None:
    # Different arguments each time, so only the invalid-call streak (not repetition) can stop it.
    calls = [raw_call(tool, arguments.format(n=n)) for n in range(8)]
    script = {"rules": [{"times": 1, "reply": c} for c in calls], "fallback": "gave up"}
    with ScriptedServer(script) as server:
        result = runner(project, server, "run", "sum", "-i", "a=1")
    assert result.returncode == 4, result.stderr
    assert "3 invalid tool calls in a row" in result.stderr
    assert report(project, "sum")["status"] == "stuck"


def test_terminate_with_failure_fails_the_run(project: Path) -> None:
    script = {"rules": [{"when": {"last_role": "user"}, "reply": raw_call(
        "terminate", json.dumps({"answer": "I could not get the figures.", "status": "failure"}))}]}
    with ScriptedServer(script) as server:
        result = runner(project, server, "run", "sum", "-i", "a=1")
    assert result.returncode == 1, result.stderr
    record = report(project, "sum")
    assert record["status"] == "failed" and record["steps"][0]["error_kind"] == "gave_up"
    assert "could not get the figures" in record["stop_reason"]


def test_terminate_with_success_completes(project: Path) -> None:
    script = {"rules": [{"when": {"last_role": "user"}, "reply": raw_call("terminate", json.dumps({"answer": "3"}))}]}
    with ScriptedServer(script) as server:
        result = runner(project, server, "run", "sum", "-i", "a=1")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "3"


def test_cached_tokens_reach_the_report(project: Path) -> None:
    usage = {"prompt_tokens": 1200, "completion_tokens": 10, "cached_tokens": 1024}
    script = {"rules": [
        {"when": {"last_role": "user"}, "times": 1, "reply": dict(raw_call("calculator", '{"expression": "1 + 2"}'), usage=usage)},
        {"when": {"last_role": "tool"}, "reply": {"content": "1 + 2 = 3", "usage": usage}},
    ]}
    with ScriptedServer(script) as server:
        result = runner(project, server, "run", "sum", "-i", "a=1", "--json")
    assert result.returncode == 0, result.stderr
    record = report(project, "sum")
    assert record["usage"]["total"]["cached_input_tokens"] == 2048
    assert record["steps"][0]["usage"]["cached_input_tokens"] == 2048
    (report_dir,) = (project / "reports" / "sum").iterdir()
    markdown = (report_dir / "report.md").read_text()
    cached_row = next(line for line in markdown.splitlines() if "gpt-4o-mini" in line and "|" in line)
    assert "2,048" in cached_row or "2048" in cached_row
    finished = json.loads(result.stdout.splitlines()[-1])
    assert finished["event"] == "run_finished" and finished["cached_input_tokens"] == 2048
    show = subprocess.run([sys.executable, "-m", "runner", "runs"], cwd=project, capture_output=True, text=True, timeout=60)
    assert show.returncode == 0, show.stderr


def test_an_agent_overrides_a_prompt_by_name(project: Path) -> None:
    agents = project / "agents.d" / "agents.yaml"
    agents.write_text(agents.read_text().replace(
        "stuck: {max_repeats: 3}",
        "stuck: {max_repeats: 3, max_invalid_calls: 1}\nprompts: {final_turn: 'STOP NOW ({{ reason }}). Answer.'}",
    ))
    script = {"rules": [
        {"when": {"last_message": "^STOP NOW"}, "reply": "final"},
        {"when": {"last_role": "user"}, "reply": raw_call("calculator", "{")},
    ]}
    with ScriptedServer(script) as server:
        result = runner(project, server, "run", "sum", "-i", "a=1")
        assert any("STOP NOW (1 invalid tool calls in a row)" in json.dumps(r.body) for r in server.requests)
    assert result.returncode == 4, result.stderr


def test_an_unknown_prompt_name_is_a_located_error(project: Path) -> None:
    agents = project / "agents.d" / "agents.yaml"
    agents.write_text(agents.read_text().replace("stuck: {max_repeats: 3}", "stuck: {max_repeats: 3}\nprompts: {final_trun: x}"))
    result = subprocess.run([sys.executable, "-m", "runner", "validate"], cwd=project, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "agents.d/agents.yaml:9:" in result.stdout + result.stderr
    assert "final_trun" in result.stdout + result.stderr
