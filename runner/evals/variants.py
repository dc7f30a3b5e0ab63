"""A variant's project: the eval's task with the variant's agents, temperature and system
prompt (its model id goes to the batch as ``--model`` does)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, replace

from runner.config.evals import Variant
from runner.config.project import Project
from runner.config.specs import TaskSpec


def variant_project(project: Project, task: TaskSpec, variant: Variant) -> Project:
    """A copy of ``project`` in which the agents ``task`` uses are the variant's."""
    agents = dict(project.agents)
    for old, new in variant.agents.items():
        agents[old] = project.agents[new]  # looked up by the task's name, run as the other agent
    for name in task.agents_used():
        agent = agents[name]
        if variant.temperature is not None:
            agent = replace(agent, model=replace(agent.model, temperature=variant.temperature))
        if variant.system_prompt is not None and name == task.agent:
            agent = replace(agent, system_prompt=variant.system_prompt)
        agents[name] = agent
    return replace(project, agents=agents, hashes={})


def variant_fingerprint(project: Project, task: TaskSpec, variant: Variant, dataset_digest: str = "") -> str:
    """Changes when anything a case's result depends on changes (the variant, its agents, the
    task, tools, the dataset's bytes): a variant's journal is resumed only for the very same
    configuration and cases."""
    from runner.runs.execute import config_hash

    changes = {k: v for k, v in asdict(variant).items() if k not in ("threshold", "description")}
    payload = json.dumps({"variant": changes, "config": config_hash(project, task), "dataset": dataset_digest}, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:12]
