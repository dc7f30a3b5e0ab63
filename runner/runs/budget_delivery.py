"""Sending the budget warnings a run met to their budgets' ``deliver:`` targets.

A warning is made while a call settles, deep in a step (:mod:`runner.caps.budget_windows`); it
is kept in the run store at once (:meth:`~runner.store.recorder.RunRecorder.budget_warning`)
and sent when the attempt's steps are over, before its record is built, whatever they ended in
(a batch row's run too: it writes no report, but it delivers its warnings). Each target is sent
each warning once: a later attempt of the run sends only what an earlier one did not deliver
(:func:`~runner.reports.delivery.deliver.deliver_all`). A delivery that fails is a warning of
the run, never a change of its result.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from pathlib import Path
from typing import Any

from runner.config.budgets import BudgetSpec
from runner.config.templates import render
from runner.core.budget_warnings import BudgetWarning
from runner.reports.delivery.outcome import DeliveryOutcome
from runner.runs.context import RunContext
from runner.store.runstore import now_iso


async def deliver_budget_warnings(ctx: RunContext) -> tuple[BudgetWarning, ...]:
    """Deliver what is still to deliver of the warnings run ``ctx.run_id`` met; they all, every attempt's."""
    met = ctx.store.budget_warnings.of_run(ctx.run_id)
    for warning, earlier in met:
        spec = ctx.project.budgets.get(warning.budget)
        if spec is None or not spec.deliver or _all_delivered(spec, earlier):
            continue
        outcomes = await asyncio.to_thread(_deliver, ctx, spec, warning, earlier)
        ctx.store.budget_warnings.delivered(ctx.run_id, warning, [o.as_dict() for o in outcomes])
        for outcome in outcomes:
            shown = {k: v for k, v in outcome.as_dict().items() if k != "files"}
            ctx.recorder.emit("delivery", **shown, budget=warning.budget, budget_warning=warning.message)
            if outcome.status != "delivered":
                ctx.warnings.append(f"budget warning not delivered to '{outcome.name}' ({outcome.kind}, {outcome.target}): "
                                    f"{outcome.error}; the run's next attempt sends it again")  # fmt: skip
    return tuple(warning for warning, _ in met)


def _all_delivered(spec: BudgetSpec, earlier: list[dict[str, Any]]) -> bool:
    delivered = {d.get("name") for d in earlier if d.get("status") == "delivered"}
    return all(target.name in delivered for target in spec.deliver)


def _deliver(ctx: RunContext, spec: BudgetSpec, warning: BudgetWarning, earlier: list[dict[str, Any]]) -> list[DeliveryOutcome]:
    """One warning to every target of ``spec`` (in a thread: SMTP and HTTP block)."""
    from runner.reports.delivery.budget_warning import warning_context, warning_package
    from runner.reports.delivery.deliver import deliver_all

    context = warning_context(warning, ctx.run_id, ctx.task.name, ctx.today)
    with tempfile.TemporaryDirectory(prefix="runner-budget-warning-") as directory:
        package = warning_package(warning, ctx.run_id, ctx.task.name, Path(directory), dict(os.environ))
        return deliver_all(
            list(spec.deliver), package, lambda template: render(template, context),
            earlier={d["name"]: DeliveryOutcome.from_dict(d) for d in earlier if "name" in d},
            secrets=ctx.recorder.secrets, root=ctx.project.root, now=now_iso,
        )  # fmt: skip
