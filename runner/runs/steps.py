"""Running one step of a run: an agent step (the think -> act loop) or a tool step.

Both return a step record (a dict shaped like ``report.schema.json#/steps``) and save it
in the run store, so a resumed run can skip what already completed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

from runner import untrusted_json
from runner.agent.loop import AgentEnv, run_agent
from runner.caps.budget import Budget
from runner.caps.pricing import Pricer
from runner.config.prices import find_price, unpriced_message
from runner.config.project import Project
from runner.config.specs import AgentSpec, Caps, TaskSpec, ToolRef
from runner.config.templates import TemplateError, render
from runner.errors import CapReached, ConfigError, ToolFailure
from runner.model.factory import Endpoint, ModelPool
from runner.redact import redact_secrets
from runner.runs.toolbox import ToolBox, tool_context
from runner.runs.types import RunOptions
from runner.store.recorder import RunRecorder
from runner.store.runstore import RunStore, now_iso
from runner.tools.registry import ToolRegistry


@dataclass
class RunContext:
    """Everything the steps of one run share."""

    project: Project
    task: TaskSpec
    inputs: dict[str, Any]
    run_id: str
    attempt: int
    options: RunOptions
    store: RunStore
    recorder: RunRecorder
    budget: Budget
    pool: ModelPool
    registry: ToolRegistry
    workspace: Path
    today: date
    previous: dict[str, Any] | None = None
    config_hash: str = ""
    done: dict[str, dict[str, Any]] = field(default_factory=dict)  # step id -> record
    resumed: dict[str, dict[str, Any]] = field(default_factory=dict)  # completed in an earlier attempt

    def template_context(self, visible: set[str] | None = None) -> dict[str, Any]:
        steps = {
            sid: {"output": r.get("output"), "data": r.get("data"), "status": r["status"], "artifacts": r.get("artifacts", [])}
            for sid, r in self.done.items()
            if visible is None or sid in visible
        }
        return {
            "inputs": self.inputs,
            "steps": steps,
            "previous": self.previous,
            "today": self.today.isoformat(),
            "run_id": self.run_id,
        }

    def endpoint(self, agent: AgentSpec) -> Endpoint:
        options = self.options
        return self.pool.endpoint(agent.model, options.model_override, options.base_url_override, options.api_key)

    def pricer(self, endpoint: Endpoint) -> Pricer:
        return Pricer(endpoint.model_id, find_price(self.project.prices, endpoint.model_id))


def new_step(step_id: str, kind: str, *, agent: str | None = None, tool: str | None = None) -> dict[str, Any]:
    return {
        "id": step_id,
        "kind": kind,
        "agent": agent,
        "tool": tool,
        "status": "running",
        "output": None,
        "data": None,
        "error": None,
        "error_kind": None,
        "started_at": now_iso(),
        "duration_seconds": 0.0,
        "usage": {"input_tokens": 0, "output_tokens": 0, "cached_input_tokens": 0, "cost_usd": 0.0, "model_calls": 0},
        "model": None,
        "tool_calls": [],
        "artifacts": [],
    }


async def run_agent_step(
    ctx: RunContext,
    step_id: str,
    kind: str,
    agent_name: str,
    goal_template: str,
    *,
    visible: set[str] | None,
    tools: tuple[ToolRef, ...] | None = None,
    caps: Caps | None = None,
    output_schema: dict[str, Any] | None = None,
    literal_goal: bool = False,
) -> dict[str, Any]:
    """Run one agent on a goal inside the run's budget. ``goal_template`` is rendered with the
    run's template context unless ``literal_goal`` (text written by a model is never a template)."""
    if step_id in ctx.resumed:
        return _reuse(ctx, step_id)
    agent = ctx.project.agents[agent_name]
    if tools is not None:
        agent = agent.with_tools(tools)
    record = new_step(step_id, kind, agent=agent.name)
    started = time.monotonic()
    ctx.recorder.emit("step_started", step=step_id, kind=kind, agent=agent.name)
    try:
        goal = goal_template if literal_goal else render(goal_template, ctx.template_context(visible))
        ctx.budget.check_can_start()
    except TemplateError as exc:
        return _finish(ctx, record, started, "failed", error=str(exc), kind="template")
    except CapReached as cap:
        return _finish(ctx, record, started, "capped", error=str(cap), kind=cap.cap)
    endpoint = ctx.endpoint(agent)
    env = AgentEnv(
        model=ctx.pool.get(endpoint, agent.model),
        tools=ToolBox(ctx.registry, agent, tool_context(ctx.workspace, agent, ctx.recorder.secrets) if agent.tools else None),
        budget=ctx.budget.child(agent.caps.tighten(caps or Caps()), scope=f"step '{step_id}'"),
        pricer=ctx.pricer(endpoint),
        recorder=ctx.recorder,
        step_id=step_id,
        rate_gate=ctx.options.rate_gate,
        output_schema=output_schema,
        model_id=endpoint.model_id,
    )
    outcome = await run_agent(agent, goal, env)
    record.update(
        output=outcome.output,
        data=outcome.data[-1] if outcome.data else None,
        model=endpoint.model_id,
        artifacts=outcome.artifacts,
        usage={
            "input_tokens": outcome.input_tokens,
            "output_tokens": outcome.output_tokens,
            "cached_input_tokens": 0,
            "cost_usd": outcome.cost_usd,
            "model_calls": outcome.model_calls,
        },
    )
    return _finish(ctx, record, started, outcome.status, error=outcome.error, kind=outcome.error_kind)


async def run_tool_step(ctx: RunContext, step_id: str, tool_name: str, args: dict[str, Any], visible: set[str]) -> dict[str, Any]:
    """Call one tool with declared arguments: no model, no cost."""
    if step_id in ctx.resumed:
        return _reuse(ctx, step_id)
    record = new_step(step_id, "tool", tool=tool_name)
    started = time.monotonic()
    ctx.recorder.emit("step_started", step=step_id, kind="tool", tool=tool_name)
    try:
        rendered = _render_arg(args, ctx.template_context(visible))
        ctx.budget.check_can_start()
        ctx.budget.take_tool_call()
        context = tool_context(ctx.workspace, None, ctx.recorder.secrets)
        result = await ctx.registry.invoke(tool_name, rendered, context)
    except TemplateError as exc:
        return _finish(ctx, record, started, "failed", error=str(exc), kind="template")
    except ToolFailure as exc:
        return _finish(ctx, record, started, "failed", error=str(exc), kind="tool")
    except CapReached as cap:
        return _finish(ctx, record, started, "capped", error=str(cap), kind=cap.cap)
    record.update(output=result.content, data=result.data, artifacts=list(result.artifacts))
    record["tool_calls"] = [
        {"name": tool_name, "arguments": rendered, "status": "ok", "duration_seconds": time.monotonic() - started,
         "output_excerpt": result.content[:500]}
    ]
    return _finish(ctx, record, started, "completed")


def _render_arg(value: Any, context: dict[str, Any]) -> Any:
    if isinstance(value, str):
        return render(value, context)
    if isinstance(value, list):
        return [_render_arg(v, context) for v in value]
    if isinstance(value, dict):
        return {k: _render_arg(v, context) for k, v in value.items()}
    return value


def _reuse(ctx: RunContext, step_id: str) -> dict[str, Any]:
    record = dict(ctx.resumed[step_id])
    record["resumed"] = True
    ctx.done[step_id] = record
    ctx.recorder.emit("step_reused", step=step_id, status=record["status"])
    return record


def _finish(
    ctx: RunContext, record: dict[str, Any], started: float, status: str, *, error: str | None = None, kind: str | None = None
) -> dict[str, Any]:
    record.update(status=status, error=error, error_kind=kind, finished_at=now_iso(), duration_seconds=time.monotonic() - started)
    if record["kind"] != "tool":
        record["tool_calls"] = [
            {k: c[k] for k in ("name", "status", "duration_seconds", "output_excerpt")} | {"arguments": _args(c["arguments"])}
            for c in ctx.recorder.tool_calls_by_step.get(record["id"], [])
        ]
    record.update(redact_secrets({k: record[k] for k in ("output", "data", "error")}, ctx.recorder.secrets))
    ctx.store.save_step(ctx.run_id, record)
    ctx.done[record["id"]] = record
    ctx.recorder.emit(
        "step_finished", step=record["id"], status=status, error=error,
        cost_usd=record["usage"]["cost_usd"], duration_seconds=round(record["duration_seconds"], 3),
    )
    return record


def _args(raw: str) -> Any:
    try:
        return untrusted_json.loads(raw)
    except ValueError:
        return {"raw": raw}


def preflight_prices(ctx: RunContext, agent_names: list[str]) -> None:
    """A money cap on a model with no known price refuses to start, saying how to fix it."""
    money_capped = any(b.caps.max_cost_usd is not None for b in ctx.budget.chain())
    for name in agent_names:
        agent = ctx.project.agents[name]
        endpoint = ctx.endpoint(agent)
        capped = money_capped or agent.caps.max_cost_usd is not None
        if capped and endpoint.provider != "local" and not ctx.pricer(endpoint).priced:
            raise ConfigError(unpriced_message(endpoint.model_id, name))
