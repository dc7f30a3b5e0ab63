"""Whole runs through execute_task with the in-process scripted model and real tools, store
and reports: statuses, caps, stuck detection, repair, pipelines, planning, resume."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from runner.config.project import load_project_or_raise
from runner.config.specs import Caps
from runner.core.results import RunResult
from runner.errors import ConfigError, InputError
from runner.model.factory import ModelPool
from runner.model.scripted import ScriptedModel
from runner.runs.execute import execute_task
from runner.runs.options import RunOptions


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


async def run(
    project_dir: Path, task: str, script: Any, inputs: dict[str, Any] | None = None, **options: Any
) -> tuple[RunResult, ScriptedModel, list[dict[str, Any]]]:
    project = load_project_or_raise(project_dir)
    model = script if isinstance(script, ScriptedModel) else ScriptedModel(script)
    events: list[dict[str, Any]] = []
    opts = RunOptions(events=events.append, **options)
    result = await execute_task(project, project.task_for(task), inputs or {}, opts, pool=ModelPool(fixed=model))
    return result, model, events


async def test_tool_call_then_answer_completes(project_dir: Path) -> None:
    script = {"rules": [
        {"when": {"last_role": "user"}, "times": 1, "reply": call("calculator", expression="3 + 2")},
        {"when": {"last_role": "tool"}, "reply": {"content": "The answer is 5."}},
    ]}
    result, model, events = await run(project_dir, "sum", script, {"a": "3"})
    assert result.status == "completed" and result.exit_code == 0
    assert result.output == "The answer is 5."
    assert result.usage.model_calls == 2 and result.usage.tool_calls == 1
    assert "What is 3 + 2?" in (model.requests[0].messages[1].content or "")
    tool_message = model.requests[1].messages[-1]
    assert tool_message.role == "tool" and tool_message.content == "3 + 2 = 5"
    assert result.usage.cost_usd > 0
    report = json.loads((result.report_dir / "report.json").read_text())  # type: ignore[operator]
    assert report["status"] == "completed" and report["usage"]["total"]["model_calls"] == 2
    kinds = [e["event"] for e in events]
    assert kinds[0] == "run_started" and kinds[-1] == "run_finished"


async def test_inputs_are_typed_and_checked(project_dir: Path) -> None:
    with pytest.raises(InputError, match="input 'a': a value is required"):
        await run(project_dir, "sum", {"rules": []})
    with pytest.raises(InputError, match="unknown input 'c'"):
        await run(project_dir, "sum", {"rules": []}, {"a": "1", "c": "2"})
    with pytest.raises(InputError, match="a"):
        await run(project_dir, "sum", {"rules": []}, {"a": "one"})


async def test_max_steps_cap_stops_before_the_call(project_dir: Path) -> None:
    script = {"fallback": call("calculator", expression="1 + 1")}
    result, model, _ = await run(project_dir, "sum", script, {"a": "1"}, caps=Caps(max_steps=2))
    assert result.status == "capped" and result.exit_code == 3
    assert len(model.requests) == 2
    assert result.error_kind == "max_steps" and "max_steps=2" in (result.error or "")


async def test_max_tool_calls_cap(project_dir: Path) -> None:
    script = {"fallback": {"tool_calls": [
        {"name": "calculator", "arguments": {"expression": "1 + 1"}},
        {"name": "calculator", "arguments": {"expression": "2 + 2"}},
    ]}}
    result, _, _ = await run(project_dir, "sum", script, {"a": "1"}, caps=Caps(max_tool_calls=3))
    assert result.status == "capped" and result.error_kind == "max_tool_calls"
    assert result.usage.tool_calls == 3


async def test_token_cap_counts_reservations(project_dir: Path) -> None:
    script = {"fallback": {**call("calculator", expression="1 + 1"), "usage": {"prompt_tokens": 400, "completion_tokens": 50}}}
    result, _, _ = await run(project_dir, "sum", script, {"a": "1"}, caps=Caps(max_tokens=1500))
    assert result.status == "capped" and result.error_kind == "max_tokens"
    assert result.usage.input_tokens + result.usage.output_tokens <= 1500


def counting_calls(request: Any) -> dict[str, Any]:
    """A model that keeps calling the calculator with new arguments (never stuck)."""
    return call("calculator", expression=f"{len(request.messages)} + 1")


async def test_money_never_overshoots(project_dir: Path) -> None:
    # gpt-4o-mini: 0.15 / 0.60 USD per million tokens; max_tokens 200 is reserved per call.
    cap = 0.0005
    result, model, _ = await run(project_dir, "sum", ScriptedModel(counting_calls), {"a": "1"}, caps=Caps(max_cost_usd=cap))
    assert result.status == "capped" and result.error_kind == "max_cost_usd"
    assert result.usage.cost_usd <= cap
    assert len(model.requests) >= 2


async def test_wall_time_cap(project_dir: Path) -> None:
    script = {"fallback": {**call("calculator", expression="1 + 1"), "latency_seconds": 0.3}}
    result, _, _ = await run(project_dir, "sum", script, {"a": "1"}, caps=Caps(max_wall_seconds=0.2))
    assert result.status == "capped" and result.error_kind == "max_wall_seconds"


async def test_money_cap_on_unpriced_model_refuses_to_start(project_dir: Path) -> None:
    with pytest.raises(ConfigError, match="no known price"):
        await run(project_dir, "unpriced_capped", {"rules": []}, caps=Caps(max_cost_usd=1.0))


async def test_looping_model_ends_stuck(project_dir: Path) -> None:
    script = {"rules": [
        {"when": {"tools": "calculator"}, "reply": call("calculator", expression="7 * 6")},
        {"reply": {"content": "42, I think."}},
    ]}
    result, model, _ = await run(project_dir, "sum", script, {"a": "1"})
    assert result.status == "stuck" and result.exit_code == 4
    assert result.output == "42, I think."
    assert model.requests[-1].tools == () and "repeating" in (model.requests[-1].messages[-1].content or "")


async def test_malformed_and_unknown_tool_calls_become_observations(project_dir: Path) -> None:
    script = {"rules": [
        {"times": 1, "reply": {"tool_calls": [{"name": "calculator", "arguments": '{"expression": '}]}},
        {"times": 1, "reply": call("calculater", expression="1")},
        {"times": 1, "reply": call("calculator", expression="2 + 2")},
        {"reply": {"content": "4"}},
    ]}
    result, model, _ = await run(project_dir, "sum", script, {"a": "1"})
    assert result.status == "completed" and result.output == "4"
    observations = [m.content for m in model.requests[-1].messages if m.role == "tool"]
    assert observations[0].startswith("error:") and "JSON" in observations[0]
    assert "unknown tool 'calculater'" in observations[1]
    assert observations[2] == "2 + 2 = 4"


async def test_output_schema_gets_one_repair_turn(project_dir: Path) -> None:
    script = ScriptedModel.sequence({"content": "total is 3"}, {"content": '{"total": 3}'})
    result, _, _ = await run(project_dir, "structured", script)
    assert result.status == "completed" and result.output == {"total": 3}
    script = ScriptedModel.sequence({"content": "nope"}, {"content": '{"total": "x"}'})
    result, _, _ = await run(project_dir, "structured", script)
    assert result.status == "failed" and result.error_kind == "output_schema"


async def test_model_fault_fails_the_run(project_dir: Path) -> None:
    result, _, _ = await run(project_dir, "sum", {"fallback": {"fault": {"status": 500}}}, {"a": "1"})
    assert result.status == "failed" and result.exit_code == 1 and result.error_kind == "server_error"


async def test_pipeline_runs_steps_in_order_and_writes_narrative(project_dir: Path) -> None:
    script = {"fallback": {"content": "Both numbers are small."}}
    result, model, events = await run(project_dir, "pipeline", script)
    assert result.status == "completed" and result.output == "Both numbers are small."
    assert "one=2 two=6" in (model.requests[0].messages[1].content or "")
    finished = [e["step"] for e in events if e["event"] == "step_finished"]
    assert finished[-1] == "write" and set(finished[:2]) == {"one", "two"}
    assert result.usage.cost_usd > 0 and result.usage.tool_calls == 2


async def test_resume_does_not_repay_completed_steps(project_dir: Path) -> None:
    store = project_dir / "store.sqlite3"
    failing = {"fallback": {"fault": {"status": 500}}}
    first, _, _ = await run(project_dir, "pipeline", failing, run_id="r1", store_path=store)
    assert first.status == "failed"
    second, model, events = await run(project_dir, "pipeline", {"fallback": {"content": "ok"}}, run_id="r1", store_path=store)
    assert second.status == "completed"
    reused = sorted(e["step"] for e in events if e["event"] == "step_reused")
    assert reused == ["one", "two"]
    assert len(model.requests) == 1
    with sqlite3.connect(store) as db:
        assert db.execute("SELECT attempts FROM runs WHERE run_id = 'r1'").fetchone()[0] == 2


def plan(*steps: tuple[str, str, list[str]]) -> str:
    return json.dumps({"steps": [{"id": i, "agent": a, "goal": f"do {i}", "depends_on": d} for i, a, d in steps]})


async def test_planner_invalid_plan_is_rejected_then_replanned(project_dir: Path) -> None:
    script = {"rules": [
        {"when": {"system": "You plan"}, "times": 1, "reply": {"content": plan(("a", "nobody", []))}},
        {"when": {"system": "You plan"}, "times": 1, "reply": {"content": plan(("a", "writer", []), ("b", "writer", ["a"]))}},
        {"when": {"last_message": "^do a"}, "reply": {"content": "A done"}},
        {"when": {"last_message": "^do b"}, "reply": {"content": "B done"}},
        {"reply": {"content": "Final synthesis."}},
    ]}
    result, model, events = await run(project_dir, "planned", script)
    assert result.status == "completed" and result.output == "Final synthesis."
    plans = [e for e in events if e["event"] == "plan"]
    assert [p["valid"] for p in plans] == [False, True]
    assert "not one of ['writer']" in plans[0]["problems"][0]
    b_goal = next(r.messages[1].content for r in model.requests if (r.messages[1].content or "").startswith("do b"))
    assert "A done" in (b_goal or "")
    report = json.loads((result.report_dir / "report.json").read_text())  # type: ignore[operator]
    assert report["plan"]["steps"][0]["agent"] == "nobody" and len(report["replans"]) == 1


async def test_replanning_is_bounded(project_dir: Path) -> None:
    script = {"rules": [
        {"when": {"system": "You plan"}, "reply": {"content": plan(("a", "writer", []))}},
        {"reply": {"fault": {"status": 400}}},
    ]}
    result, _model, events = await run(project_dir, "planned", script)
    assert result.status == "failed"
    assert "max_replans reached" in (result.error or "")
    assert len([e for e in events if e["event"] == "plan"]) == 2


async def test_canary_key_never_reaches_store_events_or_report(project_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    canary = "sk-canary-0123456789abcdef"
    monkeypatch.setenv("OPENAI_API_KEY", canary)
    script = {"rules": [
        {"times": 1, "reply": call("calculator", expression="1 + 1")},
        {"reply": {"content": f"leaking {canary} here"}},
    ]}
    store = project_dir / "store.sqlite3"
    result, _, events = await run(project_dir, "sum", script, {"a": "1"}, store_path=store, api_key=canary)
    assert canary not in json.dumps(events)
    for path in project_dir.glob("store.sqlite3*"):
        assert canary.encode() not in path.read_bytes(), path
    for path in result.report_dir.rglob("*"):  # type: ignore[union-attr]
        if path.is_file():
            assert canary.encode() not in path.read_bytes(), path


async def test_memory_across_runs_renders_the_previous_output(project_dir: Path) -> None:
    store = project_dir / "store.sqlite3"
    first, _, _ = await run(project_dir, "diary", {"fallback": "Quiet day."}, {"day": "2026-11-29"}, store_path=store)
    assert first.status == "completed"
    again, model, _ = await run(project_dir, "diary", {"fallback": "Busy day."}, {"day": "2026-11-30"}, store_path=store)
    assert again.status == "completed"
    goal = model.requests[0].messages[1].content or ""
    assert "Last time (2026-11-29) you wrote: Quiet day." in goal


async def test_independent_steps_run_concurrently_and_task_caps_cover_the_pipeline(project_dir: Path) -> None:
    script = {"fallback": {"content": "done", "latency_seconds": 0.2}}
    result, _, events = await run(project_dir, "fan", script)
    order = [(e["event"], e.get("step")) for e in events if e["event"] in ("step_started", "step_finished")]
    starts = order.index(("step_started", "right"))
    assert starts < order.index(("step_finished", "left")), order  # both started before either finished
    # the task allows 2 model calls: left and right use them, join cannot start
    assert result.status == "capped" and result.error_kind == "max_steps"
    assert result.usage.model_calls == 2
    join = next(e for e in events if e["event"] == "step_finished" and e["step"] == "join")
    assert join["status"] == "capped"


def test_history_is_compacted_before_it_exceeds_the_budget() -> None:
    from runner.agent.context import compact, message_tokens, truncate_output
    from runner.model.base import Message

    big = "x" * 4000
    messages = [Message("system", "s"), Message("user", "goal")]
    for i in range(10):
        messages += [Message("assistant", None), Message("tool", big + str(i), tool_call_id=str(i))]
    compacted = compact(messages, budget_tokens=3000, keep_last=4)
    assert sum(message_tokens(m) for m in compacted) <= 3000
    assert len(compacted) == len(messages)
    assert compacted[1].content == "goal" and compacted[-1].content == big + "9"
    assert compacted[3].content is not None and compacted[3].content.startswith("[compacted")
    cut = truncate_output("a" * 10000, 1000)
    assert len(cut) < 1100 and "characters truncated" in cut
