"""A retry on another worker (a wiped local disk) resumes the run from the shared store: the
real CLI, the loopback model server, a pipeline of tool (data) steps and agent steps, the
run store on both backends (SQLite on a shared path, PostgreSQL)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from runner.model.server import ScriptedServer
from tests.support.project import copy_shipped, run_cli

pytestmark = pytest.mark.timeout(180)
REPO = Path(__file__).resolve().parents[2]
AGENT = """\
apiVersion: runner/v1
kind: Agent
name: plain
model: {id: gpt-4o-mini, max_tokens: 100, retries: 0}
system_prompt: You write one sentence.
"""
TASK = """\
apiVersion: runner/v1
kind: Task
name: resume_check
inputs:
  date: {type: date}
workspace:
  files: [sales.csv]
pipeline:
  steps:
    - {id: load, tool: load_table, args: {path: sales.csv, name: sales}}
    - id: totals
      tool: query_table
      depends_on: [load]
      args: {table: sales, group_by: [region], aggregations: {revenue: sum}, sort_by: [region], save_as: totals}
    - id: chart
      tool: chart
      depends_on: [totals]
      args: {table: totals, kind: bar, x: region, y: revenue_sum, title: Revenue, filename: regions.png}
    - {id: draft, agent: plain, depends_on: [totals], goal: "DRAFT {{ inputs.date }}: {{ steps.totals.data.records | length }} regions"}
    - {id: final, agent: plain, depends_on: [draft, chart], goal: "FINAL {{ steps.draft.output }}"}
report:
  narrative_step: final
"""
SCRIPT = {
    "rules": [
        {"when": {"last_message": "^FINAL"}, "times": 1, "reply": {"fault": {"status": 400}}},
        {"when": {"last_message": "^DRAFT"}, "reply": "Four regions sold."},
    ],
    "fallback": "All good.",
}


def _project(root: Path) -> Path:
    files = {"agents.d/plain.yaml": AGENT, "tasks.d/resume_check.yaml": TASK}
    return copy_shipped(root, (), files, copies={"examples/data/sales.csv": "sales.csv"})


def _run(project: Path, server: ScriptedServer, store: list[str], env_extra: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return run_cli(project, server, "run", "resume_check", "--root", str(project), "-i", "date=2026-03-02",
                   "--run-id", "daily-1", "--json", *store, key="sk-test-resume-000001", drop=("RUNNER_",),
                   env=env_extra, timeout=150)  # fmt: skip


def _events(done: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def test_a_retry_with_a_wiped_disk_reuses_paid_steps_and_rebuilds_the_workspace(
    tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    shared = tmp_path / "shared"  # what every worker reaches: a shared path, or the database
    shared.mkdir()
    if backend == "postgresql":
        store, env = [], {"RUNNER_STORE_URL": str(request.getfixturevalue("postgres_url"))}
    else:
        store, env = ["--store", str(shared / "runs.sqlite3")], {}
    first_disk, second_disk = _project(tmp_path / "worker-a"), _project(tmp_path / "worker-b")
    with ScriptedServer(SCRIPT) as server:
        first = _run(first_disk, server, store, env)
        assert first.returncode == 1, first.stderr
        assert (first_disk / ".runner/workspaces/daily-1/charts/regions.png").is_file()
        shutil.rmtree(first_disk)  # the first worker is gone; the retry lands on another one
        second = _run(second_disk, server, store, env)
        prompts = [r.body["messages"][-1]["content"] for r in server.requests if r.method == "POST"]
    assert second.returncode == 0, second.stderr
    assert sum(p.startswith("DRAFT") for p in prompts) == 1  # the paid agent step was not paid again
    assert sum(p.startswith("FINAL") for p in prompts) == 2  # the failed one ran again, once
    events = _events(second)
    started = next(e for e in events if e["event"] == "run_started")
    assert started["attempt"] == 2 and started["resumed_steps"] == ["draft"]
    assert sorted(e["step"] for e in events if e["event"] == "step_reused") == ["draft"]
    finished = events[-1]
    assert finished["status"] == "completed"
    warning = next(w for w in finished["warnings"] if "not on this machine" in w)
    assert "chart, load, totals ran again" in warning and "draft were reused" in warning
    report_dir = Path(finished["report_dir"])
    assert report_dir.is_relative_to(second_disk) and (report_dir / "artifacts/charts/regions.png").is_file()


def test_on_the_same_machine_every_completed_step_is_reused(tmp_path: Path) -> None:
    project = _project(tmp_path / "worker")
    with ScriptedServer(SCRIPT) as server:
        assert _run(project, server, [], {}).returncode == 1
        again = _run(project, server, [], {})
    assert again.returncode == 0, again.stderr
    started = next(e for e in _events(again) if e["event"] == "run_started")
    assert started["resumed_steps"] == ["chart", "draft", "load", "totals"]
    assert not any("not on this machine" in w for w in _events(again)[-1]["warnings"])
