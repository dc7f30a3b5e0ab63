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

from runner.config.report_options import WARNING_TEMPLATE_ROOTS, Delivery, build_deliveries
from runner.config.sources import Document
from runner.errors import Problem, did_you_mean

if TYPE_CHECKING:
    from runner.config.project import Project

Calendar = Literal["day", "week", "month"]


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
    description: str = ""

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
    )  # fmt: skip


def budget_problems(project: Project) -> list[Problem]:
    """Located problems of every budget: a limit that is not a number, an unknown time zone,
    a scope naming a task, agent or tag nobody declares, a money budget over an unpriced model."""
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    from runner.config.prices import find_price, unpriced_message

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
        if budget.max_cost_usd is None:
            continue
        for agent in project.agents.values():
            covered = any(budget.covers(t.name, t.tags, agent.name, agent.tags, agent.model.id) for t in project.tasks.values()
                          if agent.name in t.agents_used())  # fmt: skip
            if covered and agent.model.provider != "local" and find_price(project.prices, agent.model.id) is None:
                problems.append(
                    doc.problem(
                        "/max_cost_usd", f"budget '{budget.name}': {unpriced_message(agent.model.id, agent.name)}"
                    )
                )
    return problems


def delivery_problems(budget: BudgetSpec, doc: Document) -> list[Problem]:
    """Located problems of a budget's ``deliver:`` targets: ``when`` (a warning is no run's
    outcome), a name given twice, a template reading something a warning does not have."""
    from runner.config.template_check import static_problems
    from runner.config.template_engine import references
    from runner.config.templates import TemplateError

    problems: list[Problem] = []
    if budget.deliver and not budget.warn_at:
        problems.append(doc.problem("/deliver", "deliver: sends the warnings of warn_at; add warn_at: [0.8] (say) or drop deliver:"))
    seen: dict[str, int] = {}
    for i, target in enumerate(budget.deliver):
        if "when" in doc.data["deliver"][i]:
            problems.append(doc.problem(f"/deliver/{i}/when", "a budget's delivery is sent for every warning; drop when:", key=True))
        if target.name in seen:
            problems.append(doc.problem(f"/deliver/{i}", f"a second delivery named '{target.name}' (also #{seen[target.name]}); give each a distinct name:"))
        seen.setdefault(target.name, i)
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
    found = []
    for budget in project.budgets.values():
        agents = [project.agents[a] for a in task.agents_used() if a in project.agents]
        if (budget.covers(task.name, task.tags, None, (), None) and budget.task_wide) or any(
            budget.covers(task.name, task.tags, a.name, a.tags, a.model.id) for a in agents
        ):
            found.append(budget)
    return found
