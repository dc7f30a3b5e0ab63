"""What the steps of one run share: the run's specs, stores, budget, models and tools."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

from runner.caps.budget import Budget
from runner.caps.pricing import Pricer
from runner.config.prices import find_price
from runner.config.profiles import ModelProfile, find_profile
from runner.config.project import Project
from runner.config.specs import AgentSpec, TaskSpec
from runner.core.steps import StepRecord
from runner.model.endpoint import Endpoint
from runner.model.factory import ModelPool
from runner.runs.options import RunOptions
from runner.runs.services import RunServices
from runner.store.recorder import RunRecorder
from runner.store.runstore import RunStore
from runner.tools.registry import ToolRegistry
from runner.tools.sql.source import SqlSources


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
    done: dict[str, StepRecord] = field(default_factory=dict)  # step id -> record, in finishing order
    resumed: dict[str, StepRecord] = field(default_factory=dict)  # completed in an earlier attempt
    warnings: list[str] = field(default_factory=list)  # about the run as a whole (e.g. spend estimated after a crash)
    services: RunServices = field(default_factory=RunServices)  # knowledge bases, memory, browser

    def template_context(self, visible: set[str] | None = None) -> dict[str, Any]:
        """What templates may read: inputs, the visible steps' results, the previous run."""
        steps = {
            sid: {"output": r.output, "data": r.data, "status": r.status, "artifacts": list(r.artifacts)}
            for sid, r in self.done.items()
            if visible is None or sid in visible
        }
        return template_context(self.inputs, self.today, self.run_id, steps=steps, previous=self.previous)

    @property
    def sql(self) -> SqlSources:
        """The SQL sources this run's tools may read, with URLs the caller resolved."""
        return SqlSources(self.project.sources_for(self.task), self.options.source_urls)

    def endpoint(self, agent: AgentSpec) -> Endpoint:
        options = self.options
        return self.pool.endpoint(agent.model, options.model_override, options.base_url_override, options.api_key)

    def profile(self, agent: AgentSpec, endpoint: Endpoint) -> ModelProfile:
        """The profile of the model ``agent`` calls at ``endpoint`` (after ``--model``)."""
        return find_profile(self.project.profiles, endpoint.model_id, agent.model.profile)

    def pricer(self, endpoint: Endpoint, agent: AgentSpec | None = None) -> Pricer:
        """How ``endpoint``'s calls are priced; with ``agent``, at its service tier's rates."""
        price = find_price(self.project.prices, endpoint.model_id)
        if agent is None:
            return Pricer(endpoint.model_id, price, endpoint.tariff)
        return Pricer(endpoint.model_id, price, endpoint.tariff, agent.model.service_tier, self.profile(agent, endpoint))


def template_context(
    inputs: dict[str, Any], today: date, run_id: str, *, steps: dict[str, Any] | None = None,
    previous: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """What a goal template may read (also how a provider batch renders a row's goal)."""
    return {"inputs": inputs, "steps": steps or {}, "previous": previous, "today": today.isoformat(), "run_id": run_id}
