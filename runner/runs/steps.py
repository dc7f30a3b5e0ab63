"""Running one step of a run: an agent step (the think -> act loop) or a tool step.

Each returns a :class:`~runner.core.steps.StepRecord`, redacted and saved in the run store,
so a resumed run can skip what already completed. :class:`StepRunner` offers these to the
pipelines (it is their :class:`~runner.pipelines.host.StepHost`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from runner.agent.call_cache import CallAnswers, CallCache, endpoint_identity, tool_scope
from runner.agent.fallback import FallbackRoute
from runner.agent.loop import AgentEnv, ModelBinding, fallback_binding, run_agent
from runner.caps.budget import Budget, within_deadline
from runner.config.budgets import BudgetSpec
from runner.config.prices import find_price, unpriced_message
from runner.config.profile_checks import refused_settings
from runner.config.specs import AgentSpec, Caps, ToolRef
from runner.config.template_types import TemplateError
from runner.config.templates import render
from runner.core.providers import Provider
from runner.core.sources import unique_sources
from runner.core.status import Status
from runner.core.steps import StepKind, StepRecord, ToolCallSummary
from runner.core.usage import Usage
from runner.errors import ArgumentsRefused, CapReached, ConfigError, ToolFailure
from runner.model.call_settings import call_settings
from runner.model.prompt_cache import prompt_cache_key
from runner.redact import redact_secrets
from runner.runs.context import RunContext
from runner.runs.toolbox import ToolBox, tool_context
from runner.store.runstore import now_iso
from runner.tools.base import ToolContext

if TYPE_CHECKING:
    from runner.tools.net import NetworkPolicy


class StepRunner:
    """Runs the steps of one run (the pipelines' :class:`~runner.pipelines.host.StepHost`)."""

    def __init__(self, ctx: RunContext):
        self.ctx = ctx

    @property
    def done(self) -> Mapping[str, StepRecord]:
        return self.ctx.done

    def agent(self, name: str) -> AgentSpec:
        return self.ctx.project.agents[name]

    def template_context(self, visible: set[str] | None = None) -> dict[str, Any]:
        return self.ctx.template_context(visible)

    async def run_agent(
        self, step_id: str, kind: StepKind, agent_name: str, goal_template: str, *, visible: set[str] | None,
        tools: tuple[ToolRef, ...] | None = None, caps: Caps | None = None,
        output_schema: dict[str, Any] | None = None, literal_goal: bool = False,
    ) -> StepRecord:
        return await run_agent_step(
            self.ctx, step_id, kind, agent_name, goal_template, visible=visible, tools=tools, caps=caps,
            output_schema=output_schema, literal_goal=literal_goal,
        )

    async def run_tool(self, step_id: str, tool_name: str, args: dict[str, Any], visible: set[str]) -> StepRecord:
        return await run_tool_step(self.ctx, step_id, tool_name, args, visible)

    def skip(self, step_id: str, kind: StepKind, reason: str) -> StepRecord:
        record = StepRecord(step_id, kind, status="skipped", error=reason, started_at=now_iso(), finished_at=now_iso())
        self.ctx.done[step_id] = record
        self.ctx.recorder.emit("step_finished", step=step_id, status="skipped", error=reason, cost_usd=0.0, duration_seconds=0.0)
        return record

    def record_plan(self, plan: Any, reason: str | None, *, attempt: int, problems: list[str]) -> None:
        ctx = self.ctx
        ctx.store.add_plan(ctx.run_id, ctx.attempt, plan if isinstance(plan, dict) else {"raw": plan}, reason)
        ctx.recorder.emit("plan", attempt=attempt, valid=not problems, problems=problems, plan=plan)


async def run_agent_step(
    ctx: RunContext,
    step_id: str,
    kind: StepKind,
    agent_name: str,
    goal_template: str,
    *,
    visible: set[str] | None,
    tools: tuple[ToolRef, ...] | None = None,
    caps: Caps | None = None,
    output_schema: dict[str, Any] | None = None,
    literal_goal: bool = False,
) -> StepRecord:
    """Run one agent on a goal inside the run's budget. ``goal_template`` is rendered with the
    run's template context unless ``literal_goal`` (text written by a model is never a template)."""
    if step_id in ctx.resumed:
        return _reuse(ctx, step_id)
    agent = ctx.project.agents[agent_name]
    if tools is not None:
        agent = agent.with_tools(tools)
    record = StepRecord(step_id, kind, agent=agent.name, started_at=now_iso())
    started = time.monotonic()
    ctx.recorder.emit("step_started", step=step_id, kind=kind, agent=agent.name)
    try:
        goal = goal_template if literal_goal else render(goal_template, ctx.template_context(visible))
        ctx.budget.check_can_start()
    except TemplateError as exc:
        return _finish(ctx, record, started, "failed", error=str(exc), kind="template")
    except CapReached as cap:
        return _finish(ctx, record, started, "capped", error=str(cap), kind=cap.cap, scope=cap.scope, budget=cap.budget)
    endpoint = ctx.endpoint(agent)
    tool_ctx = _agent_tools(ctx, agent, step_id) if agent.tools else None
    env = AgentEnv(
        model=ctx.pool.get(endpoint, agent.model),
        tools=ToolBox(ctx.registry, agent, tool_ctx),
        budget=_step_scope(ctx, agent).child(agent.caps.tighten(caps or Caps()), scope=f"step '{step_id}'"),
        pricer=ctx.pricer(endpoint, agent),
        profile=ctx.profile(agent, endpoint),
        recorder=ctx.recorder,
        step_id=step_id,
        rate_gate=ctx.options.rate_gate,
        output_schema=output_schema,
        model_id=endpoint.model_id,
        other_agent=lambda name: model_binding(ctx, name),
        prompt_cache_key=prompt_cache_key(agent, endpoint.model_id, endpoint.provider, endpoint.base_url),
        endpoint_identity=endpoint_identity(endpoint),
        call_cache=call_cache(ctx, agent, tool_ctx.network if tool_ctx is not None else None),
        tool_settings={ref.name: dict(ref.settings) for ref in agent.tools},
        fallback=fallback_route(ctx, agent),
        on_degraded=lambda switch: ctx.recorder.emit("budget_degraded", **switch.as_dict()),
    )
    outcome = await run_agent(agent, goal, env)
    record = replace(
        record, output=outcome.output, data=outcome.data[-1] if outcome.data else None, model=endpoint.model_id,
        artifacts=tuple(outcome.artifacts), usage=outcome.usage, warnings=tuple(outcome.warnings),
        sources=unique_sources(outcome.sources), cached_calls=outcome.cached_calls, degraded=tuple(outcome.degraded),
    )
    return _finish(
        ctx, record, started, outcome.status, error=outcome.error, kind=outcome.error_kind,
        scope=outcome.error_scope, budget=outcome.error_budget,
    )  # fmt: skip


def call_cache(ctx: RunContext, agent: AgentSpec, network: NetworkPolicy | None) -> CallAnswers | None:
    """The result cache for ``agent``'s calls: its own ``cache:`` policy, else the task's;
    none without a policy or with ``--no-cache``. Its tool keys include ``network``, the
    policy the agent's tools run under. Under a provider batch, the answers it stored for
    this run come first; a batch row run live keeps its answers there, for an attempt that
    resumes it to replay (:mod:`runner.agent.replay`)."""
    policy = agent.cache or ctx.task.cache
    cache = None
    if policy is not None and ctx.options.use_cache:
        scope = tool_scope(network, {ref.name: ref.settings for ref in agent.tools})
        cache = CallCache(ctx.store.result_cache, policy.ttl_seconds, ctx.recorder.secrets, scope)
    options = ctx.options
    if options.replay_answers or options.store_live_answers:
        from runner.agent.replay import ReplayCache
        from runner.store.provider_answers import ProviderAnswers
        from runner.store.provider_tools import ProviderToolResults

        db = ctx.store.database  # its tables were made by the batch (file_batch.keep_for_replay, or the rounds)
        return ReplayCache(ProviderAnswers(db, create=False), ctx.run_id, cache, tools=ProviderToolResults(db, create=False),
                           workspace=ctx.workspace, secrets=ctx.recorder.secrets, replay=options.replay_answers,
                           keep_live=options.store_live_answers)  # fmt: skip
    return cache


async def run_tool_step(ctx: RunContext, step_id: str, tool_name: str, args: dict[str, Any], visible: set[str]) -> StepRecord:
    """Call one tool with declared arguments: no model, no cost."""
    if step_id in ctx.resumed:
        return _reuse(ctx, step_id)
    record = StepRecord(step_id, "tool", tool=tool_name, started_at=now_iso())
    started = time.monotonic()
    ctx.recorder.emit("step_started", step=step_id, kind="tool", tool=tool_name)
    try:
        rendered = _render_arg(args, ctx.template_context(visible))
        ctx.budget.check_can_start()
        ctx.budget.take_tool_call()
        deadline = ctx.budget.deadline()
        context = replace(
            tool_context(ctx.workspace, None, ctx.recorder.secrets, ctx.sql), deadline=deadline.at if deadline else None,
            knowledge=ctx.services.knowledge_for(ctx.task.knowledge),
        )  # fmt: skip
        async with within_deadline(ctx.budget):
            result = await ctx.registry.invoke(tool_name, rendered, context)
    except TemplateError as exc:
        return _finish(ctx, record, started, "failed", error=str(exc), kind="template")
    except ToolFailure as exc:  # no model reads it: arguments refused are named without the tool's whole schema
        error = exc.short if isinstance(exc, ArgumentsRefused) else str(exc)
        return _finish(ctx, record, started, "failed", error=error, kind="tool")
    except CapReached as cap:
        return _finish(ctx, record, started, "capped", error=str(cap), kind=cap.cap, scope=cap.scope, budget=cap.budget)
    call = ToolCallSummary(tool_name, "ok", rendered, time.monotonic() - started, result.content[:500])
    record = replace(
        record, output=result.content, data=result.data, artifacts=tuple(result.artifacts),
        tool_calls=(call,), usage=Usage(tool_calls=1), sources=unique_sources(result.sources),
    )
    return _finish(ctx, record, started, "completed")


def _agent_tools(ctx: RunContext, agent: AgentSpec, step_id: str) -> ToolContext:
    """The tool context of one agent step: its workspace and policies, plus the knowledge bases
    it and its task name, its memory notebook and its own browser tab."""
    services = ctx.services
    return replace(
        tool_context(ctx.workspace, agent, ctx.recorder.secrets, ctx.sql),
        knowledge=services.knowledge_for((*agent.knowledge, *ctx.task.knowledge)),
        memory=services.notebook(agent, ctx.task),
        browser=services.browser.tab(step_id, ctx.workspace) if services.browser is not None else None,
    )


def _render_arg(value: Any, context: dict[str, Any]) -> Any:
    if isinstance(value, str):
        return render(value, context)
    if isinstance(value, list):
        return [_render_arg(v, context) for v in value]
    if isinstance(value, dict):
        return {k: _render_arg(v, context) for k, v in value.items()}
    return value


def _reuse(ctx: RunContext, step_id: str) -> StepRecord:
    record = replace(ctx.resumed[step_id], resumed=True)
    ctx.done[step_id] = record
    ctx.recorder.emit("step_reused", step=step_id, status=record.status)
    return record


def _finish(
    ctx: RunContext, record: StepRecord, started: float, status: Status, *,
    error: str | None = None, kind: str | None = None, scope: str | None = None, budget: str | None = None,
) -> StepRecord:
    secrets = ctx.recorder.secrets
    if record.kind != "tool":
        record = replace(record, tool_calls=tuple(ctx.recorder.tool_calls_by_step.get(record.id, ())))
    record = replace(
        record, status=status, error_kind=kind, error_scope=scope, error_budget=budget, finished_at=now_iso(),
        duration_seconds=time.monotonic() - started, output=redact_secrets(record.output, secrets),
        data=redact_secrets(record.data, secrets), error=redact_secrets(error, secrets),
    )
    ctx.store.save_step(ctx.run_id, record)
    ctx.done[record.id] = record
    ctx.recorder.emit(
        "step_finished", step=record.id, status=status, error=record.error, error_kind=kind,
        cost_usd=record.usage.cost_usd, duration_seconds=round(record.duration_seconds, 3),
    )
    return record


def model_binding(ctx: RunContext, name: str) -> ModelBinding:
    """Another declared agent's model (a judge's), called from within a step's loop, with its
    fallback model when it declares one."""
    agent = ctx.project.agents[name]
    endpoint = ctx.endpoint(agent)
    key = prompt_cache_key(agent, endpoint.model_id, endpoint.provider, endpoint.base_url)
    settings = call_settings(agent.model, ctx.profile(agent, endpoint), None, key)
    return ModelBinding(
        agent.name, ctx.pool.get(endpoint, agent.model), ctx.pricer(endpoint, agent), endpoint.model_id, settings,
        agent.system_prompt, endpoint_identity(endpoint), fallback=fallback_binding(agent.name, fallback_route(ctx, agent)),
    )  # fmt: skip


def fallback_route(ctx: RunContext, agent: AgentSpec) -> FallbackRoute | None:
    """How ``agent``'s calls reach its ``fallback_model``; ``None`` when no budget can switch
    them to it (see :func:`_degradable`), or when it is the model called anyway (``--model``
    names the model of every call)."""
    if not _degradable(ctx, agent):
        return None
    degraded = agent.on_fallback()
    endpoint = ctx.endpoint(degraded)
    if endpoint.model_id == ctx.endpoint(agent).model_id:
        return None
    return FallbackRoute(
        ctx.pool.get(endpoint, degraded.model), ctx.pricer(endpoint, degraded), endpoint.model_id, degraded.model,
        ctx.profile(degraded, endpoint), prompt_cache_key(degraded, endpoint.model_id, endpoint.provider, endpoint.base_url),
        endpoint_identity(endpoint),
    )  # fmt: skip


def _degradable(ctx: RunContext, agent: AgentSpec) -> bool:
    """Whether ``agent``'s calls may go to its ``fallback_model``: it declares one, and a budget
    with ``on_exceed: degrade`` counts its calls (on either model). Otherwise the fallback is
    never called, so it is neither built, priced nor given budgets."""
    if agent.fallback_model is None or not ctx.project.budgets:
        return False
    from runner.runs.budget_scopes import step_budgets, task_budgets

    models = {ctx.endpoint(called).model_id for called in (agent, agent.on_fallback())}
    budgets = [*task_budgets(ctx.project, ctx.task), *(b for m in models for b in step_budgets(ctx.project, ctx.task, agent, m))]
    return any(b.degrade_at is not None for b in budgets)


def _as_called(ctx: RunContext, agent: AgentSpec) -> list[AgentSpec]:
    """``agent`` as its calls may be sent: on its model, and on its fallback model when a budget may switch to it."""
    return [agent, *([agent.on_fallback()] if _degradable(ctx, agent) else [])]


def _called_models(ctx: RunContext, agent: AgentSpec) -> list[str]:
    """The ids ``agent``'s calls may go to: its model's, and its fallback model's."""
    return list(dict.fromkeys(ctx.endpoint(called).model_id for called in _as_called(ctx, agent)))


def _step_budgets(ctx: RunContext, agent: AgentSpec) -> list[BudgetSpec]:
    """The budgets over time that only this agent's calls count in (beyond the task-wide ones):
    those of its model and of its fallback model, each once, since a step's calls (either model)
    reserve in one chain of scopes."""
    from runner.runs.budget_scopes import step_budgets

    found = {b.name: b for model_id in _called_models(ctx, agent) for b in step_budgets(ctx.project, ctx.task, agent, model_id)}
    return list(found.values())


def _step_scope(ctx: RunContext, agent: AgentSpec) -> Budget:
    """The run's scope, inside the budgets over time that only this agent's or model's calls count in."""
    if not ctx.project.budgets:
        return ctx.budget
    from runner.runs.budget_scopes import budget_notice, with_budgets

    notice = budget_notice(ctx.warnings, ctx.recorder)
    scope = with_budgets(_step_budgets(ctx, agent), ctx.budget, ctx.project.root, ctx.options.store_url, notice)
    assert scope is not None
    return scope


def _money_budget(ctx: RunContext, agent: AgentSpec) -> bool:
    """Whether a budget over time in USD counts this agent's calls (beyond the task-wide ones, in the chain)."""
    if not ctx.project.budgets:
        return False
    return any(b.max_cost_usd is not None for b in _step_budgets(ctx, agent))


def preflight_prices(ctx: RunContext, agent_names: list[str]) -> None:
    """A money cap on a model with no known price refuses to start, saying how to fix it
    (for the agents' judges too: their calls are paid from the same caps). A setting the
    profile of a model given by ``--model`` does not take is not sent, and the run warns
    (``runner validate`` refuses it for the agents' own model ids)."""
    money_capped = any(b.caps.max_cost_usd is not None for b in ctx.budget.chain())
    judges = [j.agent for n in agent_names if (j := ctx.project.agents[n].judge) and j.agent in ctx.project.agents]
    for name in dict.fromkeys([*agent_names, *judges]):
        agent = ctx.project.agents[name]
        endpoint = ctx.endpoint(agent)
        if endpoint.model_id != agent.model.id and endpoint.provider.remote:
            for setting, why in refused_settings(agent.model, ctx.profile(agent, endpoint), endpoint.model_id):
                ctx.warnings.append(f"agent '{name}': {why.split(';')[0]}: model.{setting} is not sent")
        capped = money_capped or agent.caps.max_cost_usd is not None or _money_budget(ctx, agent)
        for called in _as_called(ctx, agent):
            endpoint = ctx.endpoint(called)
            pricer = ctx.pricer(endpoint, called) if capped and endpoint.provider is not Provider.LOCAL else None
            if pricer is not None and not pricer.priced:
                raise ConfigError(unpriced_message(endpoint.model_id, name, pricer.profile.reserved_billing(pricer.tier)))
    for base in ctx.services.knowledge:  # embeddings requests are paid from the same caps
        spec = ctx.project.knowledge[base].embeddings
        if money_capped and spec is not None and spec.provider is not Provider.LOCAL and find_price(ctx.project.prices, spec.model) is None:
            raise ConfigError(unpriced_message(spec.model, f"embeddings of knowledge base {base}"))
