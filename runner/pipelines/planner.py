"""An LLM planner: its plan must validate against ``plan.schema.json``; a failed step (or an
invalid plan) triggers bounded re-planning (``max_replans``). Every plan is recorded."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

import yaml

from runner.config.crossref import find_cycle
from runner.config.schema import schema, validate_value
from runner.config.specs import PlannerSpec
from runner.config.templates import TemplateError, render
from runner.pipelines.dag import Node, run_dag
from runner.runs.steps import RunContext, run_agent_step


@cache
def prompts() -> dict[str, str]:
    text = resources.files("runner.prompts").joinpath("planning.yaml").read_text("utf-8")
    loaded: dict[str, str] = yaml.safe_load(text)
    return loaded


@dataclass
class PlanOutcome:
    status: str  # completed | failed | capped | stuck
    plan: dict[str, Any] | None = None
    replans: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    error_kind: str | None = None


RESERVED_IDS = ("main", "plan", "synthesis")


def check_plan(plan: Any, planner: PlannerSpec, completed: set[str]) -> list[str]:
    """Problems with a plan beyond its schema: unknown agents, ids already used by completed
    or reserved steps, dependencies on anything but its own or completed steps, cycles, size.
    (A failed step's id may be planned again: it runs again.)"""
    problems = validate_value(plan, schema("plan"))
    if problems:
        return problems
    steps = plan["steps"]
    ids = [s["id"] for s in steps]
    if len(steps) > planner.max_plan_steps:
        problems.append(f"the plan has {len(steps)} steps; at most {planner.max_plan_steps} are allowed")
    if len(set(ids)) != len(ids):
        problems.append("step ids must be unique")
    for step in steps:
        if step["id"] in completed or step["id"] in RESERVED_IDS or step["id"].startswith("replan_"):
            problems.append(f"step id '{step['id']}' is already used by another step; choose a new id")
        if step["agent"] not in planner.executors:
            problems.append(f"step {step['id']}: agent '{step['agent']}' is not one of {list(planner.executors)}")
        for dep in step.get("depends_on", []):
            if dep not in ids and dep not in completed:
                problems.append(f"step {step['id']}: depends on unknown or unfinished step '{dep}'")
    cycle = find_cycle({s["id"]: [d for d in s.get("depends_on", []) if d in ids] for s in steps})
    if cycle:
        problems.append(f"dependency cycle: {' -> '.join(cycle)}")
    return problems


async def run_planned(ctx: RunContext, planner: PlannerSpec, max_parallel: int) -> PlanOutcome:
    """Plan, execute, and re-plan after failures, at most ``max_replans`` times."""
    outcome = PlanOutcome(status="failed")
    reason: str | None = None
    for attempt in range(planner.max_replans + 1):
        step_id = "plan" if attempt == 0 else f"replan_{attempt}"
        try:
            goal = _planner_goal(ctx, planner, reason)
        except TemplateError as exc:
            outcome.status, outcome.error, outcome.error_kind = "failed", f"planner goal: {exc}", "template"
            return outcome
        record = await run_agent_step(
            ctx, step_id, "planner", planner.agent, goal,
            visible=None, tools=(), output_schema=schema("plan"), literal_goal=True,
        )
        if record["status"] != "completed":
            outcome.status, outcome.error, outcome.error_kind = record["status"], record["error"], record["error_kind"]
            if record["status"] == "capped":
                return outcome
            reason = f"the planner failed: {record['error']}"
            continue
        plan = record["output"]
        completed = {sid for sid, r in ctx.done.items() if r["status"] == "completed"}
        problems = check_plan(plan, planner, completed)
        ctx.store.add_plan(ctx.run_id, ctx.attempt, plan if isinstance(plan, dict) else {"raw": plan}, reason)
        ctx.recorder.emit("plan", attempt=attempt, valid=not problems, problems=problems, plan=plan)
        if attempt == 0:
            outcome.plan = plan
        else:
            outcome.replans.append({"attempt": attempt, "reason": reason or "", "plan": plan})
        if problems:
            reason = "the plan was invalid: " + "; ".join(problems[:5])
            outcome.error, outcome.error_kind = reason, "invalid_plan"
            continue
        results = await run_dag(ctx, _nodes(ctx, plan), max_parallel)
        bad = [r for r in results.values() if r["status"] != "completed"]
        capped = [r for r in bad if r["status"] == "capped"]
        if capped:
            outcome.status, outcome.error, outcome.error_kind = "capped", capped[0]["error"], capped[0]["error_kind"]
            return outcome
        if not bad:
            outcome.status, outcome.error, outcome.error_kind = "completed", None, None
            return outcome
        first = next((r for r in bad if r["status"] != "skipped"), bad[0])
        reason = f"step {first['id']} {first['status']}: {first['error']}"
        status = "failed" if first["status"] == "skipped" else first["status"]
        outcome.status, outcome.error, outcome.error_kind = status, reason, first["error_kind"]
    outcome.error = f"{outcome.error} (re-planned {planner.max_replans} time(s); max_replans reached)"
    return outcome


def _planner_goal(ctx: RunContext, planner: PlannerSpec, reason: str | None) -> str:
    goal = render(planner.goal, ctx.template_context())
    completed = {sid: _excerpt(r.get("output")) for sid, r in ctx.done.items() if r["status"] == "completed" and r["kind"] != "planner"}
    text = render(
        prompts()["planner_instructions"],
        {
            "max_steps": planner.max_plan_steps,
            "executors": list(planner.executors),
            "executor_descriptions": {n: ctx.project.agents[n].description for n in planner.executors if ctx.project.agents[n].description},
            "plan_schema": json.dumps(schema("plan")),
            "completed": completed,
            "goal": goal,
        },
    )
    if reason:
        text += "\n" + render(prompts()["replan"], {"reason": reason})
    return text


def _nodes(ctx: RunContext, plan: dict[str, Any]) -> list[Node]:
    return [Node(step["id"], tuple(step.get("depends_on", ())), _executor(ctx, step)) for step in plan["steps"]]


def _executor(ctx: RunContext, step: dict[str, Any]) -> Any:
    async def run() -> dict[str, Any]:
        # The plan's text is the model's: it goes in as values, never as a template.
        inputs = {dep: _excerpt(ctx.done[dep].get("output"), 4000) for dep in step.get("depends_on", ())}
        goal = render(prompts()["executor_goal"], {"goal": step["goal"], "inputs": inputs})
        return await run_agent_step(ctx, step["id"], "agent", step["agent"], goal, visible=None, literal_goal=True)

    return run


def _excerpt(value: Any, limit: int = 600) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= limit else text[:limit] + " [...]"
