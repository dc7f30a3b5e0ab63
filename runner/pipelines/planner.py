"""An LLM planner: its plan must validate against ``plan.schema.json``; a failed step (or an
invalid plan) triggers bounded re-planning (``max_replans``). Every plan is recorded."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from runner.config.graph import find_cycle
from runner.config.schema import schema, validate_value
from runner.config.specs import PlannerSpec
from runner.config.template_types import TemplateError
from runner.config.templates import render
from runner.core.status import Status, as_final
from runner.core.steps import StepRecord
from runner.pipelines.dag import Node, run_dag
from runner.pipelines.host import StepHost
from runner.prompts import Prompts


@dataclass
class PlanOutcome:
    """How planning and executing the plan(s) ended."""

    status: Status
    plan: dict[str, Any] | None = None
    replans: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    error_kind: str | None = None
    error_scope: str | None = None
    error_budget: str | None = None

    def failed_with(self, record: StepRecord, error: str | None = None) -> None:
        self.status, self.error = as_final(record.status), error or record.error
        self.error_kind, self.error_scope, self.error_budget = record.error_kind, record.error_scope, record.error_budget


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


async def run_planned(host: StepHost, planner: PlannerSpec, max_parallel: int) -> PlanOutcome:
    """Plan, execute, and re-plan after failures, at most ``max_replans`` times."""
    outcome = PlanOutcome(status="failed")
    prompts = Prompts(host.agent(planner.agent).prompts)
    reason: str | None = None
    for attempt in range(planner.max_replans + 1):
        step_id = "plan" if attempt == 0 else f"replan_{attempt}"
        try:
            goal = _planner_goal(host, planner, prompts, reason)
        except TemplateError as exc:
            outcome.status, outcome.error, outcome.error_kind = "failed", f"planner goal: {exc}", "template"
            return outcome
        record = await host.run_agent(
            step_id, "planner", planner.agent, goal,
            visible=None, tools=(), output_schema=schema("plan"), literal_goal=True,
        )
        if not record.completed:
            outcome.failed_with(record)
            if record.status == "capped":
                return outcome
            reason = f"the planner failed: {record.error}"
            continue
        plan = record.output
        completed = {sid for sid, r in host.done.items() if r.completed}
        problems = check_plan(plan, planner, completed)
        host.record_plan(plan, reason, attempt=attempt, problems=problems)
        if attempt == 0:
            outcome.plan = plan
        else:
            outcome.replans.append({"attempt": attempt, "reason": reason or "", "plan": plan})
        if problems:
            reason = "the plan was invalid: " + "; ".join(problems[:5])
            outcome.error, outcome.error_kind = reason, "invalid_plan"
            continue
        results = await run_dag(host, _nodes(host, plan, prompts), max_parallel)
        bad = [r for r in results.values() if not r.completed]
        capped = [r for r in bad if r.status == "capped"]
        if capped:
            outcome.failed_with(capped[0])
            return outcome
        if not bad:
            outcome.status, outcome.error, outcome.error_kind = "completed", None, None
            return outcome
        first = next((r for r in bad if r.status != "skipped"), bad[0])
        reason = f"step {first.id} {first.status}: {first.error}"
        outcome.failed_with(first, reason)
    outcome.error = f"{outcome.error} (re-planned {planner.max_replans} time(s); max_replans reached)"
    return outcome


def _planner_goal(host: StepHost, planner: PlannerSpec, prompts: Prompts, reason: str | None) -> str:
    goal = render(planner.goal, host.template_context())
    completed = {sid: _excerpt(r.output) for sid, r in host.done.items() if r.completed and r.kind != "planner"}
    descriptions = {n: host.agent(n).description for n in planner.executors if host.agent(n).description}
    text = prompts.render(
        "planner_instructions",
        max_steps=planner.max_plan_steps,
        executors=list(planner.executors),
        executor_descriptions=descriptions,
        plan_schema=json.dumps(schema("plan")),
        completed=completed,
        goal=goal,
    )
    if reason:
        text += "\n" + prompts.render("replan", reason=reason)
    return text


def _nodes(host: StepHost, plan: dict[str, Any], prompts: Prompts) -> list[Node]:
    return [Node(step["id"], tuple(step.get("depends_on", ())), _executor(host, step, prompts)) for step in plan["steps"]]


def _executor(host: StepHost, step: dict[str, Any], prompts: Prompts) -> Any:
    async def run() -> StepRecord:
        # The plan's text is the model's: it goes in as values, never as a template.
        inputs = {dep: _excerpt(host.done[dep].output, 4000) for dep in step.get("depends_on", ())}
        goal = prompts.render("executor_goal", goal=step["goal"], inputs=inputs)
        return await host.run_agent(step["id"], "agent", step["agent"], goal, visible=None, literal_goal=True)

    return run


def _excerpt(value: Any, limit: int = 600) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= limit else text[:limit] + " [...]"
