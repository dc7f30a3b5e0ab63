"""``kind: Budget`` documents (``budgets.d/``): spend ceilings over time.

A budget has a limit (``max_cost_usd``, optionally ``max_tokens``) per window (``day``,
``week``, ``month`` in a ``timezone``, or fixed ``{hours: N}`` buckets since the epoch), and a
scope: every call of the project, or those matching every selector given (``tasks``,
``agents``, ``models``, ``tags``; any name of a list). The windows and their enforcement are
:mod:`runner.caps.windows` and :mod:`runner.caps.budget_windows`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, cast

from runner.config.documents import Document
from runner.config.report_options import WARNING_TEMPLATE_ROOTS, Delivery, build_deliveries, repeated_names
from runner.core.providers import Provider
from runner.errors import Problem, did_you_mean

if TYPE_CHECKING:
    from runner.config.project import Project

Calendar = Literal["day", "week", "month"]
OnExceed = Literal["stop", "degrade"]
"""What a budget does as its window fills: refuse the call that would pass the limit (``stop``),
or first switch its agents to their ``fallback_model`` from the first ``warn_at`` threshold (``degrade``)."""


@dataclass(frozen=True)
class BudgetSpec:
    """A budget from ``budgets.d/``: ``window`` is a calendar unit or a number of hours."""

    name: str
    window: Calendar | int
    max_cost_usd: float | None = None
    max_tokens: int | None = None
    timezone: str = "UTC"
    tasks: tuple[str, ...] = ()
    agents: tuple[str, ...] = ()
    models: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    warn_at: tuple[float, ...] = ()  # fractions of the limit whose crossing is a warning
    deliver: tuple[Delivery, ...] = ()  # where each warning is sent
    on_exceed: OnExceed = "stop"
    description: str = ""

    @property
    def degrade_at(self) -> float | None:
        """The share of the limit from which calls in scope go to their agents' fallback models
        (``on_exceed: degrade``: the first ``warn_at`` threshold), ``None`` for a budget that only stops."""
        return self.warn_at[0] if self.on_exceed == "degrade" and self.warn_at else None

    @property
    def window_name(self) -> str:
        """``day``, ``week``, ``month`` or ``12h``."""
        return self.window if isinstance(self.window, str) else f"{self.window}h"

    @property
    def task_wide(self) -> bool:
        """Whether the task alone decides if a call falls in scope (no agent or model selector)."""
        return not self.agents and not self.models

    def covers(self, task: str, task_tags: tuple[str, ...], agent: str | None, agent_tags: tuple[str, ...],
               model: str | None) -> bool:  # fmt: skip
        """Whether a call of ``agent`` on ``model`` in ``task`` counts here (``agent``/``model``
        ``None``: a call of no agent, an embeddings request, counted by task-wide budgets)."""
        if self.tasks and task not in self.tasks:
            return False
        if self.agents and agent not in self.agents:
            return False
        if self.models and model not in self.models:
            return False
        return not self.tags or bool(set(self.tags) & set(task_tags + agent_tags))

    def scope_text(self) -> str:
        """The scope in words (``runner budgets``, ``runner validate``)."""
        parts = [f"{key} {', '.join(names)}" for key, names in
                 (("tasks", self.tasks), ("agents", self.agents), ("models", self.models), ("tags", self.tags)) if names]  # fmt: skip
        return "; ".join(parts) or "the whole project"


def build_budget(doc: Document) -> BudgetSpec:
    """The budget a schema-valid document declares."""
    d = doc.data
    window = d["window"]
    scope = d.get("scope") or {}
    return BudgetSpec(
        name=d["name"], window=cast(Calendar, window) if isinstance(window, str) else int(window["hours"]),
        max_cost_usd=None if d.get("max_cost_usd") is None else float(d["max_cost_usd"]), max_tokens=d.get("max_tokens"),
        timezone=d.get("timezone", "UTC"), tasks=tuple(scope.get("tasks", ())), agents=tuple(scope.get("agents", ())),
        models=tuple(scope.get("models", ())), tags=tuple(scope.get("tags", ())), description=d.get("description", ""),
        warn_at=tuple(sorted(float(x) for x in d.get("warn_at", ()))), deliver=build_deliveries(d.get("deliver"), "/deliver"),
        on_exceed=cast(OnExceed, d.get("on_exceed", "stop")),
    )  # fmt: skip


def budget_problems(project: Project) -> list[Problem]:
    """Located problems of every budget: a limit that is not a number, an unknown time zone,
    a scope naming a task, agent or tag nobody declares, a money budget over an unpriced model,
    ``on_exceed: degrade`` without a threshold or over an agent without a ``fallback_model``."""
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    problems: list[Problem] = []
    tags = {t for task in project.tasks.values() for t in task.tags} | {
        t for agent in project.agents.values() for t in agent.tags
    }
    for budget in project.budgets.values():
        doc = project.document("Budget", budget.name)
        if budget.max_cost_usd is not None and not math.isfinite(budget.max_cost_usd):
            problems.append(
                doc.problem(
                    "/max_cost_usd", f"{budget.max_cost_usd} is not a limit; give a finite number of USD (e.g. 50)"
                )
            )
        if "timezone" in doc.data:
            try:
                ZoneInfo(budget.timezone)
            except (ZoneInfoNotFoundError, ValueError):
                problems.append(
                    doc.problem(
                        "/timezone",
                        f"unknown time zone '{budget.timezone}'; give an IANA name such as Europe/Berlin or UTC",
                    )
                )
            if not isinstance(budget.window, str):
                problems.append(
                    doc.problem(
                        "/timezone",
                        "an {hours: N} window is counted in UTC from the epoch; drop timezone or use day, week or month",
                    )
                )
        for key, names, known in (("tasks", budget.tasks, project.tasks), ("agents", budget.agents, project.agents)):
            for i, name in enumerate(names):
                if name not in known:
                    problems.append(
                        doc.problem(f"/scope/{key}/{i}", f"unknown {key[:-1]} '{name}'{did_you_mean(name, known)}")
                    )
        for i, tag in enumerate(budget.tags):
            if tag not in tags:
                problems.append(
                    doc.problem(
                        f"/scope/tags/{i}",
                        f"no task or agent declares tag '{tag}'{did_you_mean(tag, tags)}; add it under their tags:",
                    )
                )
        problems += delivery_problems(budget, doc)
        problems += _degrade_problems(project, budget, doc)
        problems += _price_problems(project, budget, doc)
    return problems


def covered_agents(project: Project, budget: BudgetSpec, *, fallback: bool = False) -> dict[str, str]:
    """The agents some of whose calls count in ``budget``, each with a task that runs it (agent
    name -> task name); with ``fallback``, calls on the agent's ``fallback_model`` count too."""
    found: dict[str, str] = {}
    for task in project.tasks.values():
        for name in task.agents_used():
            agent = project.agents.get(name)
            if agent is None or name in found:
                continue
            models = [agent.model.id, *([agent.fallback_model.id] if fallback and agent.fallback_model else [])]
            if any(budget.covers(task.name, task.tags, agent.name, agent.tags, model) for model in models):
                found[name] = task.name
    return found


def _degrade_problems(project: Project, budget: BudgetSpec, doc: Document) -> list[Problem]:
    """``on_exceed: degrade`` needs a threshold to switch at and a fallback model for every agent it covers."""
    if budget.on_exceed != "degrade":
        return []
    problems = []
    if not budget.warn_at:
        problems.append(doc.problem("/on_exceed", (
            "on_exceed: degrade switches to the fallback models at the first warn_at threshold, and this budget "
            "declares none; add warn_at (e.g. warn_at: [0.8]) or use on_exceed: stop"
        )))  # fmt: skip
    for name, task in covered_agents(project, budget).items():
        agent = project.agents[name]
        if agent.fallback_model is None:
            problems.append(doc.problem("/on_exceed", (
                f"budget '{budget.name}' degrades agent '{name}' (run by task '{task}'), which declares no "
                f"fallback_model; add one to {agent.source or 'the agent'}, narrow the scope, or use on_exceed: stop"
            )))  # fmt: skip
    return problems


def _price_problems(project: Project, budget: BudgetSpec, doc: Document) -> list[Problem]:
    """A money budget over an agent whose model or fallback model has no price (neither could be reserved)."""
    from runner.config.prices import find_price, unpriced_message

    if budget.max_cost_usd is None:
        return []
    problems = []
    for name in covered_agents(project, budget, fallback=True):
        agent = project.agents[name]
        if agent.model.provider is not Provider.LOCAL and find_price(project.prices, agent.model.id) is None:
            problems.append(doc.problem("/max_cost_usd", f"budget '{budget.name}': {unpriced_message(agent.model.id, name)}"))
        fallback = agent.fallback_model
        if fallback is not None and fallback.provider is not Provider.LOCAL and find_price(project.prices, fallback.id) is None:
            problems.append(doc.problem("/max_cost_usd", (
                f"budget '{budget.name}': the fallback_model '{fallback.id}' of agent '{name}' has no known price; add it "
                "to a `kind: Prices` document (USD per million tokens) or remove max_cost_usd"
            )))  # fmt: skip
    return problems


def delivery_problems(budget: BudgetSpec, doc: Document) -> list[Problem]:
    """Located problems of a budget's ``deliver:`` targets: ``when`` (a warning is no run's
    outcome), a name given twice, a template reading something a warning does not have."""
    from runner.config.template_check import static_problems
    from runner.config.template_engine import references
    from runner.config.template_types import TemplateError

    problems: list[Problem] = []
    if budget.deliver and not budget.warn_at:
        problems.append(doc.problem("/deliver", "deliver: sends the warnings of warn_at; add warn_at: [0.8] (say) or drop deliver:"))
    for i, first in repeated_names(budget.deliver):
        problems.append(doc.problem(f"/deliver/{i}", f"a second delivery named '{budget.deliver[i].name}' (also #{first}); give each a distinct name:"))
    for i, target in enumerate(budget.deliver):
        if "when" in doc.data["deliver"][i]:
            problems.append(doc.problem(f"/deliver/{i}/when", "a budget's delivery is sent for every warning; drop when:", key=True))
        for key in ("subject", "link", "to"):
            template = target.settings.get(key)
            if not isinstance(template, str):
                continue
            pointer = f"/deliver/{i}/{target.kind}/{key}"
            try:
                unknown = sorted({r.root for r in references(template)} - set(WARNING_TEMPLATE_ROOTS))
                found = static_problems(template)
            except TemplateError as exc:
                problems.append(doc.problem(pointer, str(exc)))
                continue
            problems += [doc.problem(pointer, f"unknown variable '{name}'{did_you_mean(name, WARNING_TEMPLATE_ROOTS)} "
                                     f"(a budget's delivery reads {', '.join(WARNING_TEMPLATE_ROOTS)})")
                         for name in unknown]  # fmt: skip
            problems += [doc.problem(pointer, problem) for problem in found]
    return problems


def budgets_of_task(project: Project, task_name: str) -> list[BudgetSpec]:
    """The budgets some call of task ``task_name`` falls under (``runner validate``)."""
    task = project.tasks[task_name]
    agents = [project.agents[a] for a in task.agents_used() if a in project.agents]
    calls = [(a, m.id) for a in agents for m in (a.model, a.fallback_model) if m is not None]
    found = []
    for budget in project.budgets.values():
        if (budget.covers(task.name, task.tags, None, (), None) and budget.task_wide) or any(
            budget.covers(task.name, task.tags, a.name, a.tags, model_id) for a, model_id in calls
        ):
            found.append(budget)
    return found
