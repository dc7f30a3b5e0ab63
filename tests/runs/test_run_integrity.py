"""Edge cases of a run's integrity: keys from the environment, endpoints without usage,
reused run ids, runs that stop on an error, plans that reuse step ids."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from runner.config.project import load_project_or_raise
from runner.config.specs import Caps
from runner.errors import UsageError
from runner.model.base import ModelResponse, ToolCall, Usage
from runner.model.factory import ModelPool
from runner.model.scripted import ScriptedModel
from runner.pipelines.planner import check_plan
from runner.runs.execute import execute_task
from runner.runs.options import RunOptions


async def run(project_dir: Path, task: str, model: ScriptedModel, inputs: dict[str, Any], **options: Any) -> Any:
    project = load_project_or_raise(project_dir)
    return await execute_task(project, project.task_for(task), inputs, RunOptions(**options), pool=ModelPool(fixed=model))


async def test_key_from_the_environment_is_redacted_everywhere(project_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key = "envkey-canary-0123456789"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    events: list[dict[str, Any]] = []
    store = project_dir / "store.sqlite3"
    model = ScriptedModel.sequence({"content": f"the key is {key}"})
    result = await run(project_dir, "sum", model, {"a": "1"}, store_path=store, events=events.append)
    assert key not in json.dumps(events) and key not in json.dumps(result.output)
    for path in project_dir.glob("store.sqlite3*"):
        assert key.encode() not in path.read_bytes()
    for path in result.report_dir.rglob("*"):
        if path.is_file():
            assert key.encode() not in path.read_bytes()


async def test_an_endpoint_without_usage_is_not_free(project_dir: Path) -> None:
    calls = iter(range(1000))

    def no_usage(request: Any) -> ModelResponse:
        n = next(calls)
        return ModelResponse(None, (ToolCall(f"c{n}", "calculator", json.dumps({"expression": f"{n} + 1"})),), Usage(0, 0, 0))

    result = await run(project_dir, "sum", ScriptedModel(no_usage), {"a": "1"}, caps=Caps(max_cost_usd=0.002, max_steps=50))
    assert result.status == "capped" and result.error_kind == "max_cost_usd"
    assert 0 < result.usage.cost_usd <= 0.002


async def test_a_run_id_cannot_be_reused_with_other_inputs(project_dir: Path) -> None:
    store = project_dir / "store.sqlite3"
    first = await run(project_dir, "sum", ScriptedModel.sequence({"content": "2"}), {"a": "1"}, run_id="r", store_path=store)
    assert first.status == "completed"
    with pytest.raises(UsageError, match="same task and inputs"):
        await run(project_dir, "sum", ScriptedModel.sequence({"content": "6"}), {"a": "5"}, run_id="r", store_path=store)
    with pytest.raises(UsageError, match="run id"):
        await run(project_dir, "sum", ScriptedModel.sequence({"content": "6"}), {"a": "5"}, run_id="../escape")


async def test_a_run_stopped_by_an_error_is_recorded_as_failed(project_dir: Path) -> None:
    from runner.errors import ConfigError

    store = project_dir / "store.sqlite3"
    with pytest.raises(ConfigError):
        await run(project_dir, "unpriced_capped", ScriptedModel.sequence({"content": "x"}), {}, run_id="u",
                  store_path=store, caps=Caps(max_cost_usd=1.0))
    with sqlite3.connect(store) as db:
        status, error = db.execute("SELECT status, error FROM runs WHERE run_id = 'u'").fetchone()
    assert status == "failed" and "no known price" in error


def test_plans_cannot_reuse_step_ids(project_dir: Path) -> None:
    project = load_project_or_raise(project_dir)
    planner = project.tasks["planned"].pipeline.planner  # type: ignore[union-attr]
    plan = {"steps": [{"id": "plan", "agent": "writer", "goal": "x"}, {"id": "fetch", "agent": "writer", "goal": "y"}]}
    problems = check_plan(plan, planner, completed={"fetch"})
    assert len([p for p in problems if "already used" in p]) == 2
    ok = {"steps": [{"id": "next", "agent": "writer", "goal": "y", "depends_on": ["fetch"]}]}
    assert check_plan(ok, planner, completed={"fetch"}) == []
    assert check_plan(ok, planner, completed=set()) != []
