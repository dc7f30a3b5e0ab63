"""A task's pipeline: its declared steps in dependency order, then the planner (if any),
then the synthesis step (if any). The run hands in a :class:`StepHost` to run each step."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from runner.config.graph import ancestors
from runner.config.specs import PipelineSpec, StepSpec, TaskSpec
from runner.core.status import Status, as_final, worst
from runner.core.steps import StepRecord
from runner.pipelines.dag import Node, NodeRunner, run_dag
from runner.pipelines.host import StepHost

if TYPE_CHECKING:
    from runner.pipelines.planner import PlanOutcome


@dataclass(frozen=True)
class PipelineOutcome:
    """How a pipeline ended, and its output (the synthesis, narrative or last step's)."""

    status: Status
    output: Any = None
    error: str | None = None
    error_kind: str | None = None
    error_scope: str | None = None
    plan: PlanOutcome | None = None
    error_budget: str | None = None  # the budget over time whose window ``error_scope`` is, if one is

    @classmethod
    def from_step(cls, record: StepRecord, plan: PlanOutcome | None = None) -> PipelineOutcome:
        error = f"step {record.id}: {record.error}"
        status = as_final(record.status)
        return cls(status, None, error, record.error_kind, record.error_scope, plan, error_budget=record.error_budget)


async def run_pipeline(host: StepHost, task: TaskSpec) -> PipelineOutcome:
    """Run ``task``'s pipeline to the end, or to its first failure."""
    pipeline = task.pipeline
    assert pipeline is not None
    nodes = [Node(s.id, s.depends_on, _declared(host, pipeline, s), kind=s.kind) for s in pipeline.steps]
    results = await run_dag(host, nodes, pipeline.max_parallel)
    bad = [r for r in results.values() if not r.completed]
    if bad:
        return PipelineOutcome.from_step(worst(bad, lambda r: r.status))
    plan = None
    if pipeline.planner:
        from runner.pipelines.planner import run_planned  # tasks with a planner only

        plan = await run_planned(host, pipeline.planner, pipeline.max_parallel)
    if plan is not None and plan.status != "completed":
        return PipelineOutcome(
            plan.status, None, plan.error, plan.error_kind, plan.error_scope, plan, error_budget=plan.error_budget
        )
    if pipeline.synthesis is not None:
        record = await host.run_agent(
            "synthesis", "synthesis", pipeline.synthesis.agent, pipeline.synthesis.goal,
            visible=None, output_schema=task.output_schema,
        )
        if not record.completed:
            return PipelineOutcome.from_step(record, plan)
        return PipelineOutcome("completed", record.output, plan=plan)
    if task.report.narrative_step:
        return PipelineOutcome("completed", host.done[task.report.narrative_step].output, plan=plan)
    last = [s.id for s in pipeline.steps] or list(host.done)
    return PipelineOutcome("completed", host.done[last[-1]].output if last else None, plan=plan)


def _declared(host: StepHost, pipeline: PipelineSpec, step: StepSpec) -> NodeRunner:
    async def run() -> StepRecord:
        visible = ancestors(step.id, pipeline.steps)
        if step.tool is not None:
            return await host.run_tool(step.id, step.tool, step.args, visible)
        assert step.agent is not None and step.goal is not None
        return await host.run_agent(
            step.id, "agent", step.agent, step.goal, visible=visible, tools=step.tools,
            caps=step.caps, output_schema=step.output_schema,
        )

    return run
