"""The budgets over time a run's calls reserve in (``kind: Budget``, :mod:`runner.config.budgets`).

A run's chain of scopes gets one :class:`~runner.caps.budget_windows.BudgetWindow` per
budget it falls under: the task-wide ones (no agent or model selector) above the task's
scope, so embeddings requests and every step count there; those that depend on the agent
or model above each agent step's scope. They live in the shared cap ledger: the run
store's PostgreSQL database when the store is shared (``--store-url``,
``$RUNNER_STORE_URL``), which every worker and Airflow task reaches, else the SQLite file
``<state dir>/budgets.sqlite3`` every process of the machine reaches. One ledger
connection per process and place.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from runner.caps.budget import Budget
from runner.caps.budget_windows import BudgetWindow, Clock, budget_caps, describe, utc_now
from runner.caps.windows import window_at
from runner.config.budgets import BudgetSpec
from runner.config.specs import Caps
from runner.core.budget_warnings import BudgetWarning
from runner.local_state import state_path
from runner.store.database import resolve_store
from runner.store.runstore import now_iso

if TYPE_CHECKING:
    from runner.config.project import Project
    from runner.config.specs import AgentSpec, TaskSpec
    from runner.store.cap_ledger import CapLedger
    from runner.store.recorder import RunRecorder

_LEDGERS: dict[str, CapLedger] = {}
_LOCK = threading.Lock()


def ledger_target(root: Path, store_url: str | None) -> str | Path:
    """Where the budgets' ledger lives: the shared PostgreSQL store, else ``<state dir>/budgets.sqlite3``."""
    return resolve_store(
        url=store_url, default=state_path(root, "budgets.sqlite3", holds="the budget ledger", sqlite=True)
    )


def budget_ledger(root: Path, store_url: str | None) -> CapLedger:
    """This process's connection to the budgets' ledger (opened once per place)."""
    from runner.store.cap_ledger import open_cap_ledger

    target = ledger_target(root, store_url)
    with _LOCK:
        ledger = _LEDGERS.get(str(target))
        if ledger is None:
            ledger = _LEDGERS[str(target)] = open_cap_ledger(target, role="budget ledger")
        return ledger


def close_budget_ledgers() -> None:
    """Close this process's connections to the budgets' ledgers (a later call opens them again):
    for a process that runs tasks in line and then drops their store, as a test does."""
    with _LOCK:
        ledgers = list(_LEDGERS.values())
        _LEDGERS.clear()
    for ledger in ledgers:
        ledger.close()


def check_budget_ledger(project: Project, task: TaskSpec, store_url: str | None) -> None:
    """Open the ledger now if some budget covers ``task``: a damaged or foreign one
    (:class:`~runner.errors.StoreDamaged`) stops a batch before its first row."""
    from runner.config.budgets import budgets_of_task

    if budgets_of_task(project, task.name):
        budget_ledger(project.root, store_url)


def open_window(ledger: CapLedger, key: str, caps: Caps) -> None:
    """Create window scope ``key`` with the budget's limits; an existing one takes the limits
    as the budget now declares them (a raised budget lets the window's refused calls through)."""
    ledger.db.execute(
        "UPDATE cap_scopes SET max_cost_usd = ?, max_tokens = ? WHERE key = ?",
        (caps.max_cost_usd, caps.max_tokens, key),
        idempotent=True,
    )
    ledger.open(key, caps, now_iso())


def window_scope(
    spec: BudgetSpec,
    ledger: CapLedger,
    parent: Budget | None,
    clock: Clock = utc_now,
    notice: Callable[[BudgetWarning], None] | None = None,
) -> BudgetWindow:
    """Budget ``spec`` as a scope of ``ledger``, enclosed by ``parent`` (``notice``: told of ``warn_at`` crossings)."""
    window = window_at(spec, clock())
    return BudgetWindow(
        budget_caps(spec), describe(spec, window), parent=parent, ledger=ledger, key=window.key, spec=spec,
        opener=lambda key, caps: open_window(ledger, key, caps), clock=clock, notice=notice,
    )  # fmt: skip


def with_budgets(
    budgets: list[BudgetSpec],
    parent: Budget | None,
    root: Path,
    store_url: str | None,
    notice: Callable[[BudgetWarning], None] | None = None,
) -> Budget | None:
    """A window scope of each of ``budgets``, nested inside ``parent``: the scope to enclose a
    task's or step's own (``parent`` itself when there are none)."""
    if not budgets:
        return parent
    ledger = budget_ledger(root, store_url)
    node = parent
    for spec in budgets:
        node = window_scope(spec, ledger, node, notice=notice)
    return node


def task_budgets(project: Project, task: TaskSpec) -> list[BudgetSpec]:
    """The budgets every call of ``task`` counts in (no agent or model selector)."""
    return [b for b in project.budgets.values() if b.task_wide and b.covers(task.name, task.tags, None, (), None)]


def step_budgets(project: Project, task: TaskSpec, agent: AgentSpec, model_id: str) -> list[BudgetSpec]:
    """The budgets an agent step's calls count in beyond the task-wide ones."""
    wide = {b.name for b in task_budgets(project, task)}
    return [
        b for b in project.budgets.values()
        if b.name not in wide and b.covers(task.name, task.tags, agent.name, agent.tags, model_id)
    ]  # fmt: skip


def budget_notice(warnings: list[str], recorder: RunRecorder) -> Callable[[BudgetWarning], None]:
    """A ``warn_at`` crossing as a line in the run's warnings, kept in the run store and emitted
    as a ``budget_warning`` event (:meth:`RunRecorder.budget_warning`)."""

    def notice(warning: BudgetWarning) -> None:
        if warning.message not in warnings:
            warnings.append(warning.message)
        recorder.budget_warning(warning)

    return notice
