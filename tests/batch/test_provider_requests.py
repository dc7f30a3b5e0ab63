"""Which tasks a provider batch takes, batch prices, and how it polls."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from runner.batch.provider_batch import PollPolicy
from runner.batch.provider_requests import single_request_agent
from runner.config.prices import batch_price
from runner.config.project import Project
from runner.config.specs import AgentSpec, ContextPolicy, ModelSpec, Price, TaskSpec, ToolRef
from runner.errors import UsageError


def _project(agent: AgentSpec, task: TaskSpec) -> Project:
    project = Project(root=task.root)
    project.agents[agent.name] = agent
    project.tasks[task.name] = task
    return project


AGENT = AgentSpec(name="writer", model=ModelSpec(id="gpt-4o-mini"))
TASK = TaskSpec(name="write", agent="writer", goal="Write about {{ inputs.topic }}")


def test_a_single_agent_without_tools_qualifies() -> None:
    assert single_request_agent(_project(AGENT, TASK), TASK) is AGENT


@pytest.mark.parametrize("agent, task, why", [
    (replace(AGENT, tools=(ToolRef("calculator"),)), TASK, "has tools (calculator)"),
    (replace(AGENT, model=ModelSpec(id="x", provider="local")), TASK, "embedded local model"),
    (replace(AGENT, numbers_from_prompt=True), TASK, "numbers_from_prompt"),
    (replace(AGENT, context=ContextPolicy(summarize=True)), TASK, "summarises"),
    (AGENT, replace(TASK, previous_run=True), "previous run"),
    (AGENT, replace(TASK, agent=None, goal=None), "pipeline"),
])
def test_a_task_needing_more_than_one_request_is_refused_naming_why(agent: AgentSpec, task: TaskSpec, why: str) -> None:
    with pytest.raises(UsageError) as refused:
        single_request_agent(_project(agent, task), task)
    assert "task 'write' cannot run with --via batch-api: " in str(refused.value) and why in str(refused.value)
    assert refused.value.exit_code == 2


def test_batch_price_is_half_the_live_price_unless_given() -> None:
    live = Price(0.15, 0.60, 0.075)
    assert batch_price(live) == Price(0.075, 0.30, 0.0375)
    assert batch_price(replace(live, batch_input_per_mtok=0.1, batch_output_per_mtok=0.2)) == Price(0.1, 0.2, 0.0375)
    assert batch_price(Price(1.0, 2.0)).cached_input_per_mtok is None


def test_polling_backs_off_up_to_its_maximum() -> None:
    waits = list(itertools.islice(PollPolicy(first_seconds=10, max_seconds=30, factor=2).waits(), 4))
    assert waits == [10, 20, 30, 30]
    assert list(itertools.islice(PollPolicy(first_seconds=900).waits(), 2)) == [900, 900]
