"""What a provider batch (``--via batch-api``) sends: which tasks qualify, and each row's request.

A row becomes one Chat Completions request, the first turn the live loop would send for it
(:func:`~runner.agent.loop.opening_messages`, the goal rendered like
:func:`~runner.runs.steps.run_agent_step` does, the body like
:class:`~runner.model.openai_client.OpenAIChatModel` sends it). So only a task whose whole
run is that one request qualifies: one agent on one goal, no tools, no answer checks
but the output schema (an answer that fails it is recorded failed, where the live loop
would ask for a repair: ``--batch-fallback live`` gives it that turn), no summarising,
no previous run.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from runner.agent.loop import opening_messages
from runner.caps.budget import Estimate
from runner.caps.pricing import Pricer
from runner.config.coerce import resolve_inputs
from runner.config.prices import batch_price, find_price
from runner.config.project import Project
from runner.config.specs import AgentSpec, TaskSpec
from runner.config.templates import render
from runner.errors import UsageError
from runner.model.base import ModelRequest
from runner.model.factory import Endpoint, resolve_endpoint
from runner.model.openai_client import wire_body
from runner.model.prompt_cache import prompt_cache_key
from runner.runs.context import template_context

CHAT_COMPLETIONS = "/v1/chat/completions"


def single_request_agent(project: Project, task: TaskSpec) -> AgentSpec:
    """The agent of ``task`` when each row is one request; else :class:`UsageError` (exit 2)
    naming the task and why, before anything is called."""
    why = _why_not(project, task)
    if why is not None:
        raise UsageError(
            f"task '{task.name}' cannot run with --via batch-api: {why}. A provider batch sends one request per row; "
            "run it without --via batch-api (the live engine)"
        )
    assert task.agent is not None
    return project.agents[task.agent]


def _why_not(project: Project, task: TaskSpec) -> str | None:
    if task.pipeline is not None or task.agent is None or task.goal is None:
        return "it is a pipeline, not a single agent with a goal"
    if task.previous_run:
        return "it reads the previous run (previous_run: true)"
    agent = project.agents.get(task.agent)
    if agent is None:
        return f"its agent '{task.agent}' is not defined"
    return _agent_why_not(agent)


def _agent_why_not(agent: AgentSpec) -> str | None:
    name = f"its agent '{agent.name}'"
    if agent.tools:
        return f"{name} has tools ({', '.join(ref.name for ref in agent.tools)}), so a row may need several turns"
    if agent.model.provider == "local":
        return f"{name} uses the embedded local model, which has no Batch API"
    if agent.judge is not None or agent.evidence is not None:
        return f"{name} has answer checks (judge or evidence), which need more model calls or tool results"
    if agent.numbers_from_prompt or agent.figures_in_order:
        return f"{name} has answer checks (numbers_from_prompt / figures_in_order), which may need a repair turn"
    if agent.context.summarize:
        return f"{name} summarises its history, another model call"
    return None


@dataclass(frozen=True)
class RowRequest:
    """One row's request line and its worst case at batch prices."""

    number: int
    line: dict[str, Any]
    estimate: Estimate


@dataclass(frozen=True)
class RequestBuilder:
    """Builds each row's request line for one task's agent at one endpoint."""

    task: TaskSpec
    agent: AgentSpec
    endpoint: Endpoint
    pricer: Pricer  # at batch prices
    today: dt.date

    @classmethod
    def open(cls, project: Project, task: TaskSpec, agent: AgentSpec, *, model_override: str | None,
             base_url_override: str | None, api_key: str | None) -> RequestBuilder:
        """The builder for ``agent``, its endpoint resolved like the live path resolves it."""
        endpoint = resolve_endpoint(agent.model, model_override=model_override, base_url_override=base_url_override, api_key=api_key)
        price = find_price(project.prices, endpoint.model_id)
        pricer = Pricer(endpoint.model_id, None if price is None else batch_price(price))
        return cls(task, agent, endpoint, pricer, dt.date.today())

    @property
    def schema(self) -> dict[str, Any] | None:
        """The output schema answers must match: the task's, else the agent's (as the live loop)."""
        return self.task.output_schema or self.agent.output_schema

    def request(self, raw_inputs: dict[str, Any], run_id: str) -> ModelRequest:
        """The first-turn request for one row (raises ``InputError`` / ``TemplateError``)."""
        assert self.task.goal is not None
        inputs = resolve_inputs(self.task, raw_inputs, self.today)
        goal = render(self.task.goal, template_context(inputs, self.today, run_id))
        endpoint, model = self.endpoint, self.agent.model
        return ModelRequest(
            model=endpoint.model_id, messages=tuple(opening_messages(self.agent, goal)), tools=(), tool_choice="none",
            max_tokens=model.max_tokens, temperature=model.temperature,
            prompt_cache_key=prompt_cache_key(self.agent, endpoint.model_id, endpoint.provider, endpoint.base_url),
        )

    def row(self, number: int, raw_inputs: dict[str, Any], run_id: str, *, exact: bool) -> RowRequest:
        """Row ``number``'s batch line (``custom_id`` is the row number) and worst case."""
        request = self.request(raw_inputs, run_id)
        line = {"custom_id": str(number), "method": "POST", "url": CHAT_COMPLETIONS, "body": wire_body(request, self.endpoint.model_id)}
        return RowRequest(number, line, self.pricer.estimate(request, self.agent.model.max_tokens, exact=exact))
