"""What a run opens for its tools besides the workspace: knowledge bases (built or refreshed
before the first step), the long-term memory index and the browser, closed when it ends.

``runner index`` builds knowledge bases ahead of time through :func:`open_knowledge` too.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runner.config.project import Project
from runner.config.specs import AgentSpec, TaskSpec
from runner.errors import ConfigError, did_you_mean
from runner.local_state import state_path
from runner.runs.options import RunOptions

if TYPE_CHECKING:  # loaded by the runs that open a knowledge base or memory, not by every run
    from runner.knowledge.base import KnowledgeBase, RefreshReport
    from runner.knowledge.memory import MemoryStore, Notebook

MEMORY_TOOLS = frozenset({"remember", "recall"})
BROWSER_TOOLS = frozenset({"browse"})


def index_path(root: Path, name: str) -> Path:
    """Where the index of knowledge base ``name`` lives."""
    return state_path(root, "knowledge", f"{name}.sqlite3", holds=f"the index of knowledge base '{name}'", sqlite=True)


@dataclass
class RunServices:
    """The run's knowledge bases (by name), memory index and browser (each only when used)."""

    knowledge: dict[str, KnowledgeBase] = field(default_factory=dict)
    memory: MemoryStore | None = None
    browser: Any = None  # runner.tools.browser.Browser
    warnings: list[str] = field(default_factory=list)

    async def refresh_knowledge(self, meter_for: Callable[[str], Any]) -> None:
        """Build or refresh each knowledge base, its embeddings requests metered by
        ``meter_for(name)`` (reserved against the caps: ``CapReached`` stops the refresh)."""
        for name, base in self.knowledge.items():
            meter_embeddings(base, meter_for(name))
            report = await base.refresh()
            self.warnings += [f"knowledge base '{name}': {problem}" for problem in report.problems]

    def knowledge_for(self, names: tuple[str, ...]) -> dict[str, KnowledgeBase]:
        return {name: self.knowledge[name] for name in names if name in self.knowledge}

    def notebook(self, agent: AgentSpec, task: TaskSpec) -> Notebook | None:
        """The memory an agent reads and writes, in its declared scope."""
        if self.memory is None:
            return None
        from runner.knowledge.memory import MemoryScope, Notebook

        policy = agent.memory
        key = {"agent": f"agent:{agent.name}", "task": f"task:{task.name}", "project": "project"}[policy.scope]
        return Notebook(self.memory, MemoryScope(key, policy.max_entries, policy.max_age_days))


async def open_services(project: Project, task: TaskSpec, options: RunOptions, stack: contextlib.AsyncExitStack) -> RunServices:
    """Everything the task's tools need, opened (and closed with ``stack``)."""
    services = RunServices()
    names = list(dict.fromkeys([*task.knowledge, *(n for a in _agents(project, task) for n in a.knowledge)]))
    services.knowledge, _ = await open_knowledge(project, names, options, stack, refresh=False)  # refreshed by the run, metered
    used = _tools_used(project, task)
    if used & MEMORY_TOOLS:
        from runner.knowledge.memory import MemoryStore

        services.memory = MemoryStore(state_path(project.root, "memory.sqlite3", holds="agent memory", sqlite=True))
        stack.callback(services.memory.close)
    if used & BROWSER_TOOLS:
        from runner.tools.browser import Browser

        browser = Browser()
        browser.check_available()
        services.browser = await stack.enter_async_context(browser)
    return services


async def open_knowledge(
    project: Project, names: list[str], options: RunOptions | None, stack: contextlib.AsyncExitStack, *,
    refresh: bool = True, meter_for: Callable[[str], Any] | None = None,
) -> tuple[dict[str, KnowledgeBase], dict[str, RefreshReport]]:
    """The knowledge bases ``names``, each refreshed unless ``refresh`` is off (built on first
    use, then incrementally), embeddings requests metered by ``meter_for(name)`` when given."""
    bases: dict[str, KnowledgeBase] = {}
    reports: dict[str, RefreshReport] = {}
    if names:
        from runner.knowledge.base import KnowledgeBase
    for name in names:
        spec = project.knowledge.get(name)
        if spec is None:
            raise ConfigError(f"unknown knowledge base '{name}'{did_you_mean(name, project.knowledge)}")
        embedder = None
        if spec.embeddings is not None:
            from runner.model.embeddings import make_embedder

            override, key = (options.base_url_override, options.api_key) if options else (None, None)
            embedder = make_embedder(spec.embeddings, base_url_override=override, api_key=key)
            stack.push_async_callback(embedder.aclose)
        base = KnowledgeBase(spec, project.root, index_path(project.root, name), embedder)
        stack.callback(base.close)
        bases[name] = base
        if meter_for is not None:
            meter_embeddings(base, meter_for(name))
        if refresh:
            reports[name] = await base.refresh()
    return bases, reports


def meter_embeddings(base: KnowledgeBase, meter: Any) -> None:
    """Send ``base``'s embeddings requests through ``meter`` (an endpoint's; the embedded model is free)."""
    if base.embedder is not None and hasattr(base.embedder, "meter"):
        base.embedder.meter = meter


def _agents(project: Project, task: TaskSpec) -> list[AgentSpec]:
    return [project.agents[name] for name in task.agents_used() if name in project.agents]


def _tools_used(project: Project, task: TaskSpec) -> set[str]:
    names = {ref.name for agent in _agents(project, task) for ref in agent.tools}
    for step in task.pipeline.steps if task.pipeline else ():
        names |= {step.tool} if step.tool else set()
        names |= {ref.name for ref in step.tools or ()}
    return names
